//! How a run ends: completed with its output, or failed (or cancelled) with its error, and the
//! `node_error`s of nodes still running when it was stopped.

use serde_json::{Value, json};

use super::Failure;
use crate::capability::CapabilityError;
use crate::condition::GoalConditionResult;
use crate::events::Event;
use crate::events::payload::{
    CANCELLED, Complete, CompleteStatus, ErrorInfo, NodeError, ValidationError, ValidationScope,
};
use crate::plan::{NodeStatus, PlanNode};
use crate::run::operator::Actor;
use crate::run::state::RunState;

/// The frames that complete a run with `output`.
pub fn completed(state: &RunState, output: Value, results: Vec<GoalConditionResult>) -> Vec<Event> {
    vec![Event::Complete(Complete {
        status: CompleteStatus::Completed,
        output,
        goal_condition_results: (!results.is_empty()).then_some(results),
        error: None,
        post_condition_results: state.post_conditions.passed.clone(),
        usage: None,
    })]
}

/// The frames that end a run with `failure`: `prelude`, then `complete`.
pub fn failed(state: &RunState, failure: Failure, mut prelude: Vec<Event>) -> Vec<Event> {
    let error = failure.error_json();
    let status = match failure.ending {
        CompleteStatus::Cancelled => CompleteStatus::Cancelled,
        _ => CompleteStatus::Failed,
    };
    prelude.push(Event::Complete(Complete {
        status,
        output: failure.output,
        goal_condition_results: failure.goal_condition_results,
        error: Some(error),
        post_condition_results: state.post_conditions.passed.clone(),
        usage: None,
    }));
    prelude
}

/// The frames that end a run stopped while nodes ran (its time limit, a cancel): a
/// `node_error` with the failure's code for each running node, then `complete`.
pub fn stopped(state: &RunState, failure: Failure) -> Vec<Event> {
    let error = ErrorInfo::new(failure.code, &failure.message);
    let plan = state.plan().map(|p| p.nodes.as_slice()).unwrap_or_default();
    let errors = plan
        .iter()
        .filter(|n| state.nodes.get(&n.id) == Some(&NodeStatus::Running))
        .map(|node| {
            Event::NodeError(NodeError {
                node_id: node.id.to_string(),
                capability_id: node.capability_id.clone(),
                label: node.label.clone(),
                error: error.clone(),
                usage: None,
            })
        })
        .collect();
    failed(state, failure, errors)
}

/// What a node's failure records (`validation_error` first for contract violations, then
/// `node_error`), and how the run fails because of it.
pub fn node_failed(node: &PlanNode, error: &CapabilityError) -> (Vec<Event>, Failure) {
    let mut prelude = Vec::new();
    if let CapabilityError::Contract(violations) = error {
        prelude.push(Event::ValidationError(ValidationError {
            node_id: Some(node.id.to_string()),
            scope: ValidationScope::CapabilityOutput,
            errors: violations.clone(),
            usage: None,
        }));
    }
    node_error(node, error.code(), error.to_string(), prelude)
}

/// `prelude`, then the `node_error` with `code` and `message`; and how the run fails because of it.
pub fn node_error(node: &PlanNode, code: &str, message: String, mut events: Vec<Event>) -> (Vec<Event>, Failure) {
    let failure = node_failure(&node.id, &node.capability_id, code, &message);
    events.push(Event::NodeError(NodeError {
        node_id: node.id.to_string(),
        capability_id: node.capability_id.clone(),
        label: node.label.clone(),
        error: ErrorInfo::new(code, &message),
        usage: None,
    }));
    (events, failure)
}

/// How a run fails because node `node_id` did.
pub fn node_failure(node_id: &str, capability_id: &str, code: &str, message: &str) -> Failure {
    Failure::new("node_failed", format!("Node \"{node_id}\" failed: {message}"))
        .detail("nodeId", node_id)
        .detail("capabilityId", capability_id)
        .detail("cause", code)
}

/// How a run ends that an operator cancelled: the error names the operator and their note.
pub fn cancelled(actor: &Actor) -> Failure {
    let mut failure = Failure::new(CANCELLED, "An operator cancelled the run");
    failure.ending = CompleteStatus::Cancelled;
    failure.details.insert("operator".into(), json!(actor.operator));
    failure.details.insert("note".into(), json!(actor.note));
    failure
}

/// How a run fails that reached its time limit of `limit` seconds.
pub fn timed_out(limit: u64) -> Failure {
    Failure::new("run_timeout", format!("The run did not finish within its time limit of {limit} s"))
        .detail("limitSeconds", limit)
}

/// After a process died this many times while driving a run — a node that did not hand its
/// lease back (several nodes on PostgreSQL), or the one server that did not hand the database back
/// (SQLite) — the run is failed rather than tried again: something in it may be what kills them.
pub const CRASH_LIMIT: i32 = 3;

/// How a run fails that processes died driving `attempts` times ([`CRASH_LIMIT`]).
pub fn crashed(attempts: i32) -> Failure {
    Failure::new(
        "crash_limit_reached",
        format!("The node driving the run stopped without handing it back {attempts} times; it is not tried again"),
    )
}

/// How a run fails whose stored envelope or log cannot be read back.
pub fn unresumable(reason: &str) -> Failure {
    Failure::new("resume_failed", format!("The run cannot be resumed: {reason}"))
}
