//! `/ui/inbox`: every decision operators owe, across runs, oldest first, answered in place.

use actix_web::{HttpResponse, get, web};
use askama::Template;

use super::events::FrameFacts;
use super::graph;
use super::page::{self, Chrome};
use super::plan_view::PlanSection;
use super::task_form::{self, Field};
use super::viewer::Viewer;
use crate::capability::Registry;
use crate::http::{Caller, Role};
use crate::run::RunId;
use crate::run::inbox;
use crate::run::view::RunView;
use crate::services::Services;

/// One pending decision as the inbox shows it.
struct Item {
    request_id: String,
    run_id: String,
    objective: String,
    /// What is asked, in words: "Plan approval", "Question", …
    what: &'static str,
    /// `approval`, `budget`, `question` or `human_task`: which answers the item offers.
    answer: &'static str,
    question: String,
    /// The node a human task is for, and its form.
    node_id: String,
    fields: Vec<Field>,
    created_at: String,
    /// A plan approval's plan, shown to decide with: its steps, graph, why it exists and what
    /// changed.
    plan: Option<PlanSection>,
    /// The run's page, which the plan's boxes link into.
    run_page: String,
    /// What else the decision needs in view, as labelled lines: for a question, the step that
    /// asks (its capability and instructions); for a budget reached, the limits and the spending.
    context: Vec<(&'static str, String)>,
}

impl Item {
    fn of(pending: inbox::Pending, registry: &Registry) -> Self {
        let (what, answer) = match (pending.kind.as_str(), pending.subject.as_str()) {
            ("approval", "plan") => ("Plan approval", "approval"),
            ("approval", "completion") => ("Result approval", "approval"),
            ("approval", "node") => ("Destructive tool step", "approval"),
            ("approval", _) => ("Runtime policy", "approval"),
            ("clarify", _) => ("Question", "question"),
            ("budget", _) => ("Budget reached", "budget"),
            _ => ("Human task", "human_task"),
        };
        let fields = match &pending.capability_id {
            Some(capability) if answer == "human_task" => task_form::for_capability(registry, capability),
            _ => Vec::new(),
        };
        Self {
            plan: None,
            context: Vec::new(),
            run_page: format!("/ui/runs/{}", pending.run_id),
            node_id: pending.node_id.unwrap_or_default(),
            fields,
            request_id: pending.request_id,
            run_id: pending.run_id,
            objective: crate::excerpt::excerpt(&pending.objective, 200).into_owned(),
            what,
            answer,
            question: pending.question,
            created_at: pending.created_at.to_rfc3339(),
        }
    }
}

#[derive(Template)]
#[template(path = "console/inbox.html")]
struct InboxPage {
    chrome: Chrome,
    items: Vec<Item>,
    /// Operators answer here; a caller sees what its runs wait for.
    operator: bool,
    box_width: u32,
    box_height: u32,
}

impl page::Page for InboxPage {
    fn chrome(&self) -> &Chrome {
        &self.chrome
    }
}

/// The most items shown with what their run says (a plan, a step, a budget): each reads its run.
const CONTEXTS_SHOWN: usize = 20;

/// Reads, for the first [`CONTEXTS_SHOWN`] items that need it, what the decision needs in view: a
/// plan approval's plan (`versions`), a question's step, a budget's limits and spending. A run
/// that cannot be read leaves its item as it is.
async fn with_context(services: &Services, caller: &Caller, items: &mut [Item], versions: &[Option<u32>]) {
    let needing = items
        .iter_mut()
        .zip(versions)
        .filter(|(item, version)| version.is_some() || matches!(item.answer, "question" | "budget"));
    for (item, version) in needing.take(CONTEXTS_SHOWN) {
        let Ok(run_id) = RunId::parse(&item.run_id) else { continue };
        let Ok(view) = RunView::read(services, &run_id, caller).await else { continue };
        if let Some(version) = version {
            item.plan = PlanSection::of(&view, Some(*version), &FrameFacts::default(), &services.redaction);
        } else if item.answer == "budget" {
            item.context = budget_context(&view);
        } else {
            item.context = step_context(&view, &item.node_id);
        }
    }
}

/// A budget reached: per limit what was spent and is left, and the run's usage.
fn budget_context(view: &RunView) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if let Some(budget) = &view.run.budget {
        lines.push(("Budget", super::run_page::budget(budget)));
    }
    if let Some(usage) = &view.run.usage {
        lines.push(("Spent", usage.to_string()));
    }
    lines
}

/// The step a question comes from, in the run's newest plan: its name, capability and
/// instructions.
fn step_context(view: &RunView, node_id: &str) -> Vec<(&'static str, String)> {
    let newest = view.plan_versions.last().map(|version| &version.plan);
    let Some(node) = newest.and_then(|plan| plan.nodes.iter().find(|n| n.id.as_str() == node_id)) else {
        return Vec::new();
    };
    let mut lines = vec![("Asked by step", format!("{} ({}, {})", node.label, node.id, node.capability_id))];
    lines.extend(node.instructions.iter().map(|line| ("Its instructions", line.clone())));
    lines
}

/// `GET /ui/inbox`.
#[get("/inbox")]
pub async fn show(viewer: Viewer, services: web::Data<Services>) -> HttpResponse {
    let owner = viewer.caller.owner_filter().map(String::from);
    match inbox::read(&services, owner).await {
        Ok(pending) => {
            let versions: Vec<Option<u32>> = pending
                .iter()
                .map(|p| (p.subject == "plan").then(|| u32::try_from(p.plan_version).ok()).flatten())
                .collect();
            let mut items: Vec<Item> = pending.into_iter().map(|p| Item::of(p, &services.registry)).collect();
            with_context(&services, &viewer.caller, &mut items, &versions).await;
            page::html(&InboxPage {
                chrome: Chrome::new("inbox", Some(&viewer)),
                operator: viewer.caller.role == Role::Operator,
                items,
                box_width: graph::BOX_WIDTH,
                box_height: graph::BOX_HEIGHT,
            })
        }
        Err(error) => {
            tracing::error!(error = %crate::excerpt::log(&error), "console could not read the inbox");
            let text = "The database did not answer; try again shortly.";
            page::message(Some(&viewer), 503, "The inbox cannot be read right now", text)
        }
    }
}
