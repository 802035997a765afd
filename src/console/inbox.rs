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
use crate::http::Role;
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

/// The most plan approvals shown with their plans: each reads its run.
const PLANS_SHOWN: usize = 20;

/// Reads the plan each plan approval asks about (the first [`PLANS_SHOWN`]); a run that cannot be
/// read leaves its item without one.
async fn with_plans(services: &Services, items: &mut [Item], versions: &[Option<u32>]) {
    let asked = items.iter_mut().zip(versions).filter_map(|(item, version)| Some((item, (*version)?)));
    for (item, version) in asked.take(PLANS_SHOWN) {
        let Ok(run_id) = RunId::parse(&item.run_id) else { continue };
        if let Ok(view) = RunView::read(services, &run_id).await {
            item.plan = PlanSection::of(&view, Some(version), &FrameFacts::default(), &services.redaction);
        }
    }
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
            with_plans(&services, &mut items, &versions).await;
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
            page::message(503, "The inbox cannot be read right now", "The database did not answer; try again shortly.")
        }
    }
}
