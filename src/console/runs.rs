//! `/ui/runs` — the run list, newest first, filtered by status and objective text (the filters
//! live in the URL, so a view can be bookmarked and shared) — and `/ui/runs/{id}`, one run.

use actix_web::{HttpResponse, get, web};
use askama::Template;
use serde::Deserialize;

use super::graph;
use super::page::{self, Chrome};
use super::plan_view::PlanSection;
use super::viewer::Viewer;
use crate::events::FrameKind;
use crate::events::payload::HitlKind;
use crate::http::Role;
use crate::run::view::{RunList, RunListEntry, RunQuery as Runs, RunView, ViewError};
use crate::run::{RunId, RunStatus};
use crate::services::Services;
use crate::store::StoreError;

/// Runs per page.
const PAGE: i64 = 50;

/// Longest objective text filter (characters).
const TEXT_CHARS: usize = 200;

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    status: String,
    #[serde(default)]
    q: String,
    cursor: Option<String>,
}

/// A run as a row of the list shows it.
struct Row {
    run_id: String,
    status: String,
    error: Option<String>,
    objective: String,
    created_at: String,
    updated_at: String,
    plan_version: i32,
    replans: i32,
    /// Who the run waits for, if it waits.
    waiting_for: &'static str,
}

impl Row {
    fn of(run: RunListEntry) -> Self {
        let waiting_for = match run.status.as_str() {
            "awaiting_hitl" => "an operator",
            "awaiting_human" => "a human task",
            _ => "",
        };
        Self {
            created_at: run.created_at.to_rfc3339(),
            updated_at: run.updated_at.to_rfc3339(),
            run_id: run.run_id,
            status: run.status,
            error: run.error,
            objective: crate::excerpt::excerpt(&run.objective, 300).into_owned(),
            plan_version: run.plan_version,
            replans: run.replans,
            waiting_for,
        }
    }
}

#[derive(Template)]
#[template(path = "console/runs.html")]
struct RunsPage {
    chrome: Chrome,
    statuses: Vec<(&'static str, bool)>,
    filtered_by_status: bool,
    filtered: bool,
    text: String,
    runs: Vec<Row>,
    next_page: Option<String>,
}

/// `GET /ui/runs?status=&q=&cursor=`.
#[get("/runs")]
pub async fn list(viewer: Viewer, query: web::Query<ListQuery>, services: web::Data<Services>) -> HttpResponse {
    let caller = &viewer.caller;
    let query = query.into_inner();
    let status = query.status.parse::<RunStatus>().ok();
    let text: String = query.q.trim().chars().take(TEXT_CHARS).collect();
    let runs = Runs {
        status,
        owner: caller.owner_filter().map(String::from),
        objective_contains: Some(text.clone()).filter(|t| !t.is_empty()),
    };
    let list = match RunList::read(&services, runs, query.cursor, PAGE).await {
        Ok(list) => list,
        Err(error) => return unavailable(&error),
    };
    let next_page = list.next_cursor.map(|cursor| {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("status", status.map_or("", RunStatus::as_str))
            .append_pair("q", &text)
            .append_pair("cursor", &cursor)
            .finish();
        format!("/ui/runs?{query}")
    });
    page::html(&RunsPage {
        chrome: Chrome::new("runs", Some(&viewer)),
        statuses: RunStatus::ALL.iter().map(|s| (s.as_str(), Some(*s) == status)).collect(),
        filtered_by_status: status.is_some(),
        filtered: status.is_some() || !text.is_empty(),
        text,
        runs: list.runs.into_iter().map(Row::of).collect(),
        next_page,
    })
}

#[derive(Template)]
#[template(path = "console/run.html")]
struct RunPage {
    chrome: Chrome,
    /// The request the run waits on, as the operator answers it here.
    pending: Option<Pending>,
    /// Operator actions that apply now (empty for a caller: the page is read-only).
    can_replan: bool,
    can_cancel: bool,
    run_id: String,
    objective: String,
    status: String,
    correlation_id: String,
    plan_version: u32,
    /// The last frame the page was rendered with: later ones are live.
    last_seq: u64,
    plan: Option<PlanSection>,
    /// Every frame type, for the page's `EventSource` to listen for.
    frame_types: String,
    box_width: u32,
    box_height: u32,
}

#[derive(Debug, Deserialize)]
pub struct RunQuery {
    version: Option<u32>,
}

/// A pending request, as the run page offers to answer it.
struct Pending {
    id: String,
    /// `approval`, `question` or `human_task`.
    kind: &'static str,
    question: String,
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
    let not_found = || page::message(404, "Run not found", "There is no run with this id that you may see.");
    let Ok(run_id) = RunId::parse(&id) else { return not_found() };
    let view = match RunView::read(&services, &run_id).await {
        Ok(view) => view,
        Err(ViewError::Store(StoreError::NotFound(_))) => return not_found(),
        Err(error) => return unavailable(&error),
    };
    if !caller.may_see(view.run.owner.as_deref()) {
        return not_found();
    }
    let operator = caller.role == Role::Operator;
    let status = view.run.status;
    let waiting = matches!(status, RunStatus::AwaitingHitl | RunStatus::AwaitingHuman);
    let pending =
        view.hitl_requests.iter().find(|r| r.status == "pending").filter(|_| operator && waiting).map(|r| Pending {
            id: r.request.id.clone(),
            kind: match r.request.kind {
                HitlKind::Approval => "approval",
                HitlKind::Clarify => "question",
                HitlKind::HumanTask => "human_task",
            },
            question: r.request.question.clone(),
        });
    page::html(&RunPage {
        chrome: Chrome::new("runs", Some(&viewer)),
        pending,
        can_replan: operator && waiting,
        can_cancel: operator && !status.is_terminal(),
        run_id: run_id.to_string(),
        objective: view.run.objective.clone(),
        status: view.run.status.as_str().to_string(),
        correlation_id: view.run.correlation_id.clone(),
        plan_version: view.run.plan_version,
        last_seq: view.run.last_seq,
        plan: PlanSection::of(&view, query.version),
        frame_types: FrameKind::ALL.map(FrameKind::as_str).join(" "),
        box_width: graph::BOX_WIDTH,
        box_height: graph::BOX_HEIGHT,
    })
}

fn unavailable(error: &dyn std::fmt::Display) -> HttpResponse {
    tracing::error!(error = %crate::excerpt::log(error), "console could not read runs");
    page::message(503, "Runs cannot be read right now", "The database did not answer; try again shortly.")
}
