//! `/ui/runs/{id}` — one run: its header, the actions that apply now, the plan graph with its
//! versions, node panels and goal-condition rounds, the final output, and the tail of its
//! frames, followed live.

use super::failure::FailureSummary;
use super::timeline::{self, Timeline};
use actix_web::{HttpResponse, get, web};
use askama::Template;
use serde::Deserialize;

use super::events::{self, EventItem};
use super::graph;
use super::page::{self, Chrome};
use super::plan_view::PlanSection;
use super::runs::unavailable;
use super::shown;
use super::task_form::{self, Field};
use super::viewer::Viewer;
use crate::events::Seq;
use crate::events::payload::{HitlKind, RequestStatus};
use crate::http::{Caller, Role};
use crate::run::view::{RunView, ViewError};
use crate::run::{RunId, RunStatus};
use crate::services::Services;
use crate::store::{StoreError, runs};

/// Characters of the objective the run page's heading shows (the run list shows as many).
const HEADING_CHARS: usize = 300;

#[derive(Template)]
#[template(path = "console/run.html")]
struct RunPage {
    chrome: Chrome,
    /// The request the run waits on, as the operator answers it here.
    pending: Option<Pending>,
    /// Operator actions that apply now (empty for a caller: the page is read-only).
    can_replan: bool,
    can_cancel: bool,
    /// Why a waiting run cannot be replanned although an operator looks at it (its replans are
    /// used up): the action is shown disabled with this reason rather than offered and refused.
    replan_refused: Option<String>,
    run_id: String,
    /// The objective as the page's heading: its first [`HEADING_CHARS`] characters, as the run
    /// list and the inbox show it, so a long one does not push the run's status off the screen.
    heading: String,
    /// The whole objective, when the heading is cut: one click away.
    whole_objective: Option<String>,
    status: String,
    correlation_id: String,
    plan_version: u32,
    /// Replans made of each kind, and of the budget: "1 of 4 (goal conditions 1 of 2)".
    replans: String,
    /// What the run's model calls used and cost (`1 call, … tokens, $…`).
    usage: String,
    /// The run's budget, per limit what was spent and is left, and what reaching one does.
    budget: String,
    /// The last frame the page was rendered with: later ones are live.
    last_seq: u64,
    plan: Option<PlanSection>,
    timeline: Timeline,
    result: Option<String>,
    /// What the actions offered depend on: the live page replaces them only when it changes (not
    /// under an operator typing feedback).
    actions_key: String,
    /// The raw error, one click away from its summary.
    error: Option<String>,
    failure: Option<FailureSummary>,
    /// The run this one was started again from (or forked from: `forked_from` says where), and
    /// the runs started again or forked from this one.
    parent: Option<String>,
    forked_from: Option<String>,
    reruns: Vec<String>,
    events: Vec<EventItem>,
    /// The seq of the oldest frame shown, when older ones exist.
    earlier: Option<u64>,
    /// Every frame type, for the filter and the page's `EventSource`.
    kinds: Vec<&'static str>,
    frame_types: String,
    box_width: u32,
    box_height: u32,
}

impl page::Page for RunPage {
    fn chrome(&self) -> &Chrome {
        &self.chrome
    }
}

#[derive(Debug, Deserialize)]
pub struct RunQuery {
    version: Option<u32>,
}

/// A pending request, as the run page offers to answer it.
struct Pending {
    id: String,
    /// `approval`, `budget`, `question` or `human_task`.
    kind: &'static str,
    question: String,
    node_id: String,
    /// A human task's form.
    fields: Vec<Field>,
}

/// `GET /ui/runs/{id}`: the run, its frames followed live.
#[get("/runs/{id}")]
pub async fn show(
    viewer: Viewer,
    id: web::Path<String>,
    query: web::Query<RunQuery>,
    services: web::Data<Services>,
) -> HttpResponse {
    let caller = &viewer.caller;
    let not_found =
        || page::message(Some(&viewer), 404, "Run not found", "There is no run with this id that you may see.");
    let Ok(run_id) = RunId::parse(&id) else { return not_found() };
    let view = match RunView::read(&services, &run_id, caller).await {
        Ok(view) => view,
        Err(ViewError::Store(StoreError::NotFound(_))) => return not_found(),
        Err(error) => return unavailable(&viewer, &error),
    };
    if let Some(version) = query.version.filter(|&n| !view.plan_versions.iter().any(|v| v.version == n)) {
        let text = format!("Run {run_id} has no plan version {version}: it is at version {}.", view.run.plan_version);
        return page::message(Some(&viewer), 404, "No such plan version", &text);
    }
    // Large values are left out of the page as of the API's document, and linked to whole.
    let href =
        |pointer: &str| format!("/api/v1/flex/runs/{run_id}/value?pointer={}", crate::http::query_escape(pointer));
    let view = match view.bounded(href) {
        Ok(view) => view,
        Err(error) => return unavailable(&viewer, &error),
    };
    let read = async {
        // The frames up to the view's last one, not later ones: the page follows from there.
        let rendered = Seq::new(view.run.last_seq).unwrap_or(Seq::MAX).next();
        let events = events::page_before(&services, &run_id, rendered).await?;
        let facts = events::facts(&services, &run_id).await?;
        let parent = parent_run(&services, caller, &view).await?;
        Ok::<_, StoreError>((events, facts, parent))
    };
    let (events, facts, parent) = match read.await {
        Ok(read) => read,
        Err(error) => return unavailable(&viewer, &error),
    };
    let operator = caller.role == Role::Operator;
    let status = view.run.status;
    let waiting = matches!(status, RunStatus::AwaitingHitl | RunStatus::AwaitingHuman);
    let redaction = &services.redaction;
    let result = Some(&view.run.result).filter(|v| !v.is_null()).map(|v| shown::json(redaction, v));
    let error = Some(&view.run.error).filter(|v| !v.is_null()).map(|v| shown::json(redaction, v));
    let pending = pending(&services, &view).filter(|_| operator && waiting);
    let replan_refused = replan_refused(&view).filter(|_| operator && waiting);
    let can_replan = operator && waiting && replan_refused.is_none();
    let can_cancel = operator && !status.is_terminal();
    let actions_key = format!("{}|{can_replan}|{can_cancel}", pending.as_ref().map_or("", |p| p.id.as_str()));
    page::html(&RunPage {
        chrome: Chrome::new("runs", Some(&viewer)),
        pending,
        can_replan,
        can_cancel,
        replan_refused,
        actions_key,
        run_id: run_id.to_string(),
        heading: crate::excerpt::excerpt(&view.run.objective, HEADING_CHARS).into_owned(),
        whole_objective: (view.run.objective.chars().count() > HEADING_CHARS).then(|| view.run.objective.clone()),
        status: status.as_str().to_string(),
        correlation_id: view.run.correlation_id.clone(),
        plan_version: view.run.plan_version,
        replans: replans(&view),
        usage: view.run.usage.as_ref().map(ToString::to_string).unwrap_or_default(),
        budget: view.run.budget.as_ref().map(budget).unwrap_or_default(),
        last_seq: view.run.last_seq,
        plan: PlanSection::of(&view, query.version, &facts, redaction),
        timeline: timeline::of(&view, &facts.retries, chrono::Utc::now()),
        result,
        error,
        failure: FailureSummary::of(&view.run.error),
        forked_from: view.run.forked_from.as_ref().map(|from| match &from.node_id {
            Some(node) => format!("plan version {}, step {node}", from.version),
            None => format!("plan version {}", from.version),
        }),
        parent,
        reruns: view.run.forks.clone(),
        earlier: events.earlier(),
        events: events.items,
        kinds: events::kinds(),
        frame_types: events::kinds().join(" "),
        box_width: graph::BOX_WIDTH,
        box_height: graph::BOX_HEIGHT,
    })
}

/// The request the run waits on, with a human task's form.
fn pending(services: &Services, view: &RunView) -> Option<Pending> {
    let request = view.hitl_requests.iter().find(|r| r.status == RequestStatus::Pending)?;
    let node_id = request.request.node_id.clone().unwrap_or_default();
    let kind = match request.request.kind {
        HitlKind::Approval => "approval",
        HitlKind::Clarify => "question",
        HitlKind::HumanTask => "human_task",
        HitlKind::Budget => "budget",
    };
    let fields = match view.nodes.iter().rev().find(|n| n.node_id == node_id) {
        Some(node) if request.request.kind == HitlKind::HumanTask => {
            task_form::for_capability(&services.registry, &node.capability_id)
        }
        _ => Vec::new(),
    };
    Some(Pending { id: request.request.id.clone(), kind, question: request.request.question.clone(), node_id, fields })
}

/// "modelCalls: 2 spent of 3, 1 left (pauses when reached)": the run's spending budget.
pub(super) fn budget(view: &crate::run::view::SpendingView) -> String {
    let action = match view.limits.on_exceeded {
        crate::budget::OnExceeded::Pause => "pauses",
        crate::budget::OnExceeded::Fail => "fails",
    };
    format!("{} (the run {action} when one is reached)", view.limits.lines(&view.spent).join("; "))
}

/// "2 of 4 (goal conditions 1 of 2, operator 1)": what the run used of its replan budget.
fn replans(view: &RunView) -> String {
    let used = &view.run.replans;
    let kinds: Vec<String> = [
        ("goal conditions", used.goal_condition),
        ("capability signals", used.capability_signal),
        ("runtime policies", used.runtime_policy),
        ("operator", used.operator),
        ("post-conditions", used.post_condition),
        ("node errors", used.node_error),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(name, n)| match (name, &view.run.replan_budget) {
        (&"goal conditions", Some(budget)) => format!("{name} {n} of {}", budget.limits.max_goal_condition_replans),
        _ => format!("{name} {n}"),
    })
    .collect();
    let total = match &view.run.replan_budget {
        Some(budget) => format!("{} of {}", used.total, budget.limits.max_replans),
        None => used.total.to_string(),
    };
    if kinds.is_empty() { total } else { format!("{total} ({})", kinds.join(", ")) }
}

/// "No replans left: 4 of 4 used" when the run used every replan it may make: the server would
/// refuse an operator's replan (`replan_limit`), so the page does not offer one.
fn replan_refused(view: &RunView) -> Option<String> {
    let budget = view.run.replan_budget.as_ref()?;
    let (used, max) = (budget.used.total, budget.limits.max_replans);
    (budget.limits.replans_left(&budget.used) == 0).then(|| format!("No replans left: {used} of {max} used"))
}

/// The run this one was started again from, if the viewer may see it. The runs started again
/// from this one are the view's: read for the viewer already (`RunView::read`).
async fn parent_run(services: &Services, caller: &Caller, view: &RunView) -> Result<Option<String>, StoreError> {
    let Some(parent) = view.run.parent_run_id.clone() else { return Ok(None) };
    let parent = services
        .store
        .read(move |conn| match runs::get(conn, &parent) {
            Ok(row) => Ok(Some((row.run_id, row.owner))),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(error) => Err(error),
        })
        .await?;
    Ok(parent.filter(|(_, owner)| caller.may_see(owner.as_deref())).map(|(id, _)| id))
}
