//! The node panel of a run page: for each step of the plan version shown, what it was given
//! (its instructions, the input facets it reads with their current values, the steps it waits
//! for), what it produced or why it failed, its retries, its post-condition results, its
//! timings and what its model calls used. The graph's boxes link to these panels.

use serde_json::Value;

use super::checks::Check;
use super::events::FrameFacts;
use super::shown;
use crate::condition::{FacetSource, GoalConditionResult};
use crate::plan::{Plan, StoredNodeStatus};
use crate::redact::Redaction;
use crate::run::view::{NodeView, RunView};

/// One step as its panel shows it.
pub struct NodePanel {
    pub id: String,
    pub label: String,
    pub capability: String,
    pub status: StoredNodeStatus,
    pub instructions: Vec<String>,
    /// Why the planner chose the step, as it said.
    pub rationale: Vec<String>,
    /// `(facet, its value)` for each input facet: as the step received it (its `node_start`), or
    /// for runs stored before that was recorded its current value (`—` when none was written).
    pub inputs: Vec<(String, String)>,
    /// The values in `inputs` are those the step received.
    pub as_received: bool,
    pub depends_on: Vec<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    /// The error in words, from its code, with its message.
    pub error_words: Option<String>,
    /// Transient failures retried, as `retry` frames counted them.
    pub retries: u32,
    pub post_conditions: Vec<Check>,
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
    /// How long the step took, in words (`1.2 s`), once it ended.
    pub took: Option<String>,
    /// What its model calls in this version used, if it made any.
    pub usage: Option<String>,
    /// A fork's step that did not run: the run and step whose output it took.
    pub reused_from: Option<(String, String)>,
    /// Which model answered its calls: the route entries asked, and the models the responses named.
    pub answered_by: Option<String>,
}

/// The panels of `plan`'s steps in plan order; `facts`: what the frames say of them.
pub fn panels(view: &RunView, plan: &Plan, facts: &FrameFacts, redaction: &Redaction) -> Vec<NodePanel> {
    plan.nodes
        .iter()
        .map(|node| {
            let id = node.id.to_string();
            let row = view.nodes.iter().find(|n| u32::try_from(n.plan_version) == Ok(plan.version) && n.node_id == id);
            let received = facts.received.get(&(plan.version, id.clone()));
            let value_of = |facet: &String| match received {
                Some(received) => received.get(facet),
                None => view.context.facet_value(facet),
            };
            let inputs = node
                .input_facets
                .iter()
                .map(|facet| (facet.clone(), value_of(facet).map_or_else(|| "—".into(), |v| shown::json(redaction, v))))
                .collect();
            NodePanel {
                label: node.label.clone(),
                capability: node.capability_id.clone(),
                status: row.map_or(node.status.into(), |r| r.status),
                instructions: node.instructions.clone(),
                rationale: node.rationale.clone(),
                inputs,
                as_received: received.is_some(),
                depends_on: plan.edges.iter().filter(|e| e.to == node.id).map(|e| e.from.to_string()).collect(),
                output: row.and_then(|r| present(&r.output)).map(|v| shown::json(redaction, v)),
                error: row.and_then(|r| present(&r.error)).map(|v| shown::json(redaction, v)),
                error_words: row.and_then(|r| present(&r.error)).map(in_words),
                retries: facts.retries.get(&id).copied().unwrap_or_default(),
                post_conditions: row.map(|r| post_conditions(r, redaction)).unwrap_or_default(),
                started_at: row.and_then(|r| r.started_at).map(|t| t.to_rfc3339()),
                completed_at: row.and_then(|r| r.completed_at).map(|t| t.to_rfc3339()),
                took: row.and_then(took),
                usage: row.and_then(|r| r.usage.as_ref()).map(ToString::to_string),
                reused_from: row.and_then(|r| r.reused_from.as_ref()).map(|f| (f.run_id.clone(), f.node_id.clone())),
                answered_by: row
                    .and_then(|r| r.usage.as_ref())
                    .filter(|u| !u.answered_by.is_empty())
                    .map(|u| format!("{} (the responses named {})", u.answered_by.join(", "), u.models.join(", "))),
                id,
            }
        })
        .collect()
}

/// A step's error in words: what its code means, then its message.
fn in_words(error: &Value) -> String {
    let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or_default();
    let code = text("code");
    let words = super::failure::words(code);
    match text("message") {
        "" => format!("{words} ({code})"),
        message => format!("{words} ({code}): {}", crate::excerpt::excerpt(message, crate::excerpt::MESSAGE)),
    }
}

fn present(value: &Value) -> Option<&Value> {
    Some(value).filter(|v| !v.is_null())
}

fn post_conditions(row: &NodeView, redaction: &Redaction) -> Vec<Check> {
    serde_json::from_value::<Vec<GoalConditionResult>>(row.post_condition_results.clone())
        .map(|results| results.iter().map(|result| Check::of(result, redaction)).collect())
        .unwrap_or_default()
}

fn took(row: &NodeView) -> Option<String> {
    Some(super::timeline::took(row.completed_at? - row.started_at?))
}
