//! The plan section of a run page: the version switcher (v1…vN), why the version shown replaced
//! the one before and what it kept, added and dropped, its graph, and the goal-condition round
//! evaluated against it.

use super::checks::Check;
use super::events::FrameFacts;
use super::graph::{self, Drawing};
use super::nodes::{self, NodePanel};
use crate::hash::HashSet;
use crate::redact::Redaction;
use crate::run::view::RunView;

/// A version in the switcher.
pub struct Tab {
    pub number: u32,
    pub current: bool,
}

/// The plan section, for the version asked for (the latest when none or an unknown one is).
pub struct PlanSection {
    pub tabs: Vec<Tab>,
    pub version: u32,
    /// Why this version replaced the one before (empty for the first plan).
    pub why: String,
    /// What producing this version and running its steps used (empty for runs stored before
    /// usage was recorded).
    pub usage: String,
    pub kept: Vec<String>,
    pub added: Vec<String>,
    pub dropped: Vec<String>,
    pub drawing: Drawing,
    /// The goal-condition round evaluated after this version ran, if there was one.
    pub checks: Vec<Check>,
    /// Each step's panel, in plan order.
    pub nodes: Vec<NodePanel>,
}

impl PlanSection {
    /// `facts`: what the run's frames say of its nodes (retries, what each received).
    pub fn of(view: &RunView, asked: Option<u32>, facts: &FrameFacts, redaction: &Redaction) -> Option<Self> {
        let versions = &view.plan_versions;
        let chosen = asked
            .and_then(|n| versions.iter().position(|v| v.version == n))
            .or_else(|| versions.len().checked_sub(1))?;
        let shown = &versions[chosen];
        let ids = |i: usize| -> Vec<String> { versions[i].plan.nodes.iter().map(|n| n.id.to_string()).collect() };
        let now = ids(chosen);
        let before = chosen.checked_sub(1).map(ids).unwrap_or_default();
        let (was, is): (HashSet<&String>, HashSet<&String>) = (before.iter().collect(), now.iter().collect());
        let status = |id: &str| {
            view.nodes
                .iter()
                .find(|n| u32::try_from(n.plan_version) == Ok(shown.version) && n.node_id == id)
                .map(|n| n.status)
        };
        let nodes = shown
            .plan
            .nodes
            .iter()
            .map(|n| graph::Node {
                id: n.id.to_string(),
                label: crate::excerpt::excerpt(&n.label, 40).into_owned(),
                capability: n.capability_id.clone(),
                status: status(n.id.as_str()).unwrap_or(n.status.into()),
                reused: view.nodes.iter().any(|row| row.node_id == n.id.as_str() && row.reused_from.is_some()),
            })
            .collect();
        let edges: Vec<(String, String)> =
            shown.plan.edges.iter().map(|e| (e.from.to_string(), e.to.to_string())).collect();
        Some(Self {
            tabs: versions.iter().map(|v| Tab { number: v.version, current: v.version == shown.version }).collect(),
            version: shown.version,
            why: shown.trigger.as_ref().map(why).unwrap_or_default(),
            usage: shown.usage.as_ref().map(ToString::to_string).unwrap_or_default(),
            kept: now.iter().filter(|id| was.contains(id)).cloned().collect(),
            added: now.iter().filter(|id| !was.contains(id)).cloned().collect(),
            dropped: before.iter().filter(|id| !is.contains(id)).cloned().collect(),
            drawing: graph::layout(nodes, &edges),
            checks: checks(view, shown.version, redaction),
            nodes: nodes::panels(view, &shown.plan, facts, redaction),
        })
    }
}

/// A replan's reason in words, with what it carried: the failed conditions, the feedback.
fn why(trigger: &crate::events::payload::ReplanInfo) -> String {
    let mut text = trigger.reason.as_str().replace('_', " ");
    let failed: Vec<String> =
        trigger.failed_goal_conditions.iter().map(|c| format!("{} {}", c.facet, c.path)).collect();
    if !failed.is_empty() {
        text.push_str(&format!(": {} not met", failed.join(", ")));
    }
    if let Some(feedback) = &trigger.feedback {
        text.push_str(&format!(": “{}”", crate::excerpt::excerpt(feedback, 300)));
    }
    text
}

fn checks(view: &RunView, version: u32, redaction: &Redaction) -> Vec<Check> {
    let round = view.outputs.iter().find(|o| u32::try_from(o.plan_version) == Ok(version));
    let results = round.map(|round| round.goal_condition_results.iter());
    results.map(|results| results.map(|result| Check::of(result, redaction)).collect()).unwrap_or_default()
}
