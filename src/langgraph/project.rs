//! What a LangGraph client sees of a flex run: the thread's `values` (the run's projection), its
//! open interrupts, the nodes it waits on (`next`), its statuses in LangGraph's words, and chat
//! messages in LangChain's format. Pure: everything is computed from the run's [`RunState`].

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Serialize, Serializer, ser::SerializeMap};
use serde_json::{Map, Value, json};

use crate::condition::GoalConditionResult;
use crate::elide;
use crate::events::payload::{CompleteStatus, HitlKind, HitlRequestInfo};
use crate::events::{Event, Seq};
use crate::plan::NodeStatus;
use crate::redact::Redaction;
use crate::run::RunStatus;
use crate::run::state::{At, RunState};
use crate::run::stored::LogReader;
use flexrun_core::usage::Usage;

/// Outputs and observed values larger than this (bytes) are left out of what LangGraph readers
/// keep: a stream's state holds at most a plan's nodes of them.
const KEPT_BYTES: usize = 16 * 1024;

/// What a LangGraph reader keeps of an event before folding it into the state it projects:
/// outputs and observed values larger than [`KEPT_BYTES`] are left out, with the frame
/// that carries them (the flex API's events page) as where to read them whole. A client gets a
/// node's output whole once, in its `updates` event; `values`, sent after every step, and the
/// state a stream holds for its client stay bounded.
pub fn lighten(run_id: &str, seq: Seq, event: &mut Event) {
    let href = || Some(format!("/api/v1/flex/runs/{run_id}/events?after={}&limit=1", seq.get().saturating_sub(1)));
    match event {
        Event::NodeComplete(complete) => {
            elide::if_larger(&mut complete.output, KEPT_BYTES, href);
        }
        Event::Complete(complete) => {
            elide::if_larger(&mut complete.output, KEPT_BYTES, href);
            lighten_results(complete.goal_condition_results.iter_mut().flatten(), href);
        }
        Event::GoalConditionFailed(failed) => lighten_results(failed.failed_goal_conditions.iter_mut(), href),
        // Bounded already, or carry nothing that grows with a node's output.
        Event::Start(_)
        | Event::PlanRequested(_)
        | Event::PlanRejected(_)
        | Event::PlanGenerated(_)
        | Event::PlanUpdated(_)
        | Event::NodeStart(_)
        | Event::NodeError(_)
        | Event::ValidationError(_)
        | Event::PolicyTriggered(_)
        | Event::PolicyUpdate(_)
        | Event::HitlRequest(_)
        | Event::HitlResolved(_)
        | Event::Log(_)
        | Event::Retry(_)
        | Event::BudgetExceeded(_) => {}
    }
}

/// A reader of the log of the run whose id it holds: [`lighten`]s each event as it is folded.
pub struct Lightened(pub String);

impl LogReader for Lightened {
    fn read(&mut self, _: &RunState, at: At, event: &mut Event) {
        lighten(&self.0, at.seq, event);
    }
}

/// [`lighten`] for an event that may be shared (a live frame's): copied only if it changes,
/// which most never do.
pub fn lightened<'e>(run_id: &str, seq: Seq, mut event: Cow<'e, Event>) -> Cow<'e, Event> {
    if carries_large(&event) {
        lighten(run_id, seq, event.to_mut());
    }
    event
}

/// Whether [`lighten`] would leave something of `event` out.
fn carries_large(event: &Event) -> bool {
    let large = |value: &Value| elide::json_size(value) > KEPT_BYTES;
    let any_large =
        |results: &[GoalConditionResult]| results.iter().filter_map(|r| r.observed_value.as_ref()).any(large);
    match event {
        Event::NodeComplete(complete) => large(&complete.output),
        Event::Complete(complete) => {
            large(&complete.output) || complete.goal_condition_results.as_deref().is_some_and(any_large)
        }
        Event::GoalConditionFailed(failed) => any_large(&failed.failed_goal_conditions),
        Event::Start(_)
        | Event::PlanRequested(_)
        | Event::PlanRejected(_)
        | Event::PlanGenerated(_)
        | Event::PlanUpdated(_)
        | Event::NodeStart(_)
        | Event::NodeError(_)
        | Event::ValidationError(_)
        | Event::PolicyTriggered(_)
        | Event::PolicyUpdate(_)
        | Event::HitlRequest(_)
        | Event::HitlResolved(_)
        | Event::Log(_)
        | Event::Retry(_)
        | Event::BudgetExceeded(_) => false,
    }
}

fn lighten_results<'a>(results: impl Iterator<Item = &'a mut GoalConditionResult>, href: impl Fn() -> Option<String>) {
    for value in results.filter_map(|result| result.observed_value.as_mut()) {
        elide::if_larger(value, KEPT_BYTES, &href);
    }
}

/// The node outputs of `values` together, at most (bytes): beyond it, the largest are left out.
pub(super) const VALUES_OUTPUT_BYTES: usize = 256 * 1024;

/// A run's status as a LangGraph `RunStatus`.
pub fn run_status(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Pending => "pending",
        RunStatus::Planning | RunStatus::Running => "running",
        RunStatus::AwaitingHitl | RunStatus::AwaitingHuman | RunStatus::Cancelled => "interrupted",
        RunStatus::Completed => "success",
        RunStatus::Failed => "error",
    }
}

/// A thread's status (`ThreadStatus`), from its newest run's.
pub fn thread_status(newest: Option<RunStatus>) -> &'static str {
    match newest {
        Some(RunStatus::Pending | RunStatus::Planning | RunStatus::Running) => "busy",
        Some(RunStatus::AwaitingHitl | RunStatus::AwaitingHuman) => "interrupted",
        Some(RunStatus::Failed) => "error",
        Some(RunStatus::Completed | RunStatus::Cancelled) | None => "idle",
    }
}

/// The run as the thread's `values`: status, objective, plan, node outputs, goal-condition
/// results, output and error; `messages` for a run started from a chat input.
pub fn values(state: &RunState, objective: &str, chat: Option<&[Value]>, redaction: &Redaction) -> Value {
    Values::of(state, objective, chat, redaction).to_value()
}

/// [`values`] as it is written: the node outputs borrowed from the state, not copied — a stream
/// writes `values` after every step, each time with every output so far.
pub struct Values<'a> {
    /// Every key but `outputs`, in the order a JSON object of them is written.
    rest: Map<String, Value>,
    /// The outputs by node, in that order too.
    outputs: BTreeMap<&'a str, Output<'a>>,
}

/// A node's output in `values`: whole, or left out for the outputs' budget.
enum Output<'a> {
    Whole(&'a Value),
    LeftOut(Value),
}

/// A state's `goalConditionResults`: those of the run's last round while it runs (the ones that
/// failed), those its end recorded once it ended — a list either way (empty when no round was
/// evaluated: the end records none then).
pub fn goal_results(state: &RunState) -> &Vec<GoalConditionResult> {
    /// An end that recorded no results.
    static NONE: Vec<GoalConditionResult> = Vec::new();
    match &state.end {
        Some(end) => end.goal_condition_results.as_ref().unwrap_or(&NONE),
        None => &state.repair,
    }
}

impl<'a> Values<'a> {
    pub fn of(state: &'a RunState, objective: &str, chat: Option<&[Value]>, redaction: &Redaction) -> Self {
        let mut rest = Map::new();
        rest.insert("runId".into(), json!(state.run_id));
        rest.insert("status".into(), json!(state.status));
        rest.insert("objective".into(), json!(objective));
        rest.insert("planVersion".into(), json!(state.plan_version()));
        rest.insert("plan".into(), plan(state));
        rest.insert("goalConditionResults".into(), json!(goal_results(state)));
        rest.insert("usage".into(), json!(state.usage.total));
        if let Some(end) = &state.end {
            rest.insert("output".into(), end.output.clone());
            if let Some(error) = &end.error {
                rest.insert("error".into(), error.clone());
            }
        }
        if let Some(chat) = chat {
            let mut messages = chat.to_vec();
            messages.extend(answer(state, redaction));
            rest.insert("messages".into(), Value::Array(messages));
        }
        Self { rest, outputs: outputs(state) }
    }

    /// With the run's open requests under `__interrupt__`, while it waits.
    pub fn with_interrupts(mut self, state: &RunState) -> Self {
        let interrupts = interrupts(state);
        if !interrupts.is_empty() {
            self.rest.insert("__interrupt__".into(), Value::Array(interrupts));
        }
        self
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// The outputs of the run's completed nodes (the latest of a node's), the largest left out beyond
/// [`VALUES_OUTPUT_BYTES`] together.
fn outputs(state: &RunState) -> BTreeMap<&str, Output<'_>> {
    let latest: BTreeMap<&str, &Value> =
        state.completed().iter().map(|work| (work.node_id.as_str(), &work.output)).collect();
    let sizes: Vec<usize> = latest.values().map(|output| elide::json_size(output)).collect();
    let out = elide::left_out(&sizes, VALUES_OUTPUT_BYTES);
    latest
        .into_iter()
        .zip(sizes.into_iter().zip(out))
        .map(|((node, output), (size, out))| {
            (node, if out { Output::LeftOut(elide::marker(size, None)) } else { Output::Whole(output) })
        })
        .collect()
}

impl Serialize for Values<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.rest.len() + 1))?;
        let mut outputs = Some(Outputs(&self.outputs));
        for (key, value) in &self.rest {
            if key.as_str() > "outputs"
                && let Some(outputs) = outputs.take()
            {
                map.serialize_entry("outputs", &outputs)?;
            }
            map.serialize_entry(key, value)?;
        }
        if let Some(outputs) = outputs {
            map.serialize_entry("outputs", &outputs)?;
        }
        map.end()
    }
}

struct Outputs<'v, 'a>(&'v BTreeMap<&'a str, Output<'a>>);

impl Serialize for Outputs<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(node, output)| {
            let output = match output {
                Output::Whole(value) => *value,
                Output::LeftOut(marker) => marker,
            };
            (node, output)
        }))
    }
}

/// The current plan: its version and nodes with their statuses (`null` before the first plan).
fn plan(state: &RunState) -> Value {
    let Some(plan) = state.plan() else { return Value::Null };
    let nodes: Vec<Value> = plan
        .nodes
        .iter()
        .map(|node| {
            let status = state.nodes.get(&node.id).copied().unwrap_or(node.status);
            json!({"id": node.id, "label": node.label, "capabilityId": node.capability_id, "status": status.as_str()})
        })
        .collect();
    json!({"version": plan.version, "nodes": nodes, "edges": plan.edges})
}

/// The nodes the run still has to run (LangGraph's `next`), in plan order.
pub fn next(state: &RunState) -> Vec<String> {
    if state.status.is_terminal() {
        return Vec::new();
    }
    let Some(plan) = state.plan() else { return Vec::new() };
    plan.nodes
        .iter()
        .filter(|node| !matches!(state.nodes.get(&node.id), Some(NodeStatus::Completed | NodeStatus::Failed)))
        .map(|node| node.id.to_string())
        .collect()
}

/// The run's open requests as LangGraph interrupts, oldest first.
pub fn interrupts(state: &RunState) -> Vec<Value> {
    state.requests.iter().map(|request| interrupt(state, request)).collect()
}

/// One request as an interrupt `{value, id}`: the value carries the request (kind, question,
/// plan version and plan) and the Agent Inbox `HumanInterrupt` fields, so chat front ends render
/// it and answer it with their responses.
pub fn interrupt(state: &RunState, request: &HitlRequestInfo) -> Value {
    let plan = state.plans.iter().find(|v| v.plan.version == request.plan_version).map(|v| json!(**v.plan));
    let (action, allow): (&str, [bool; 4]) = match request.kind {
        // [ignore, respond, edit, accept]
        HitlKind::Approval => ("approve", [true, true, false, true]),
        HitlKind::Clarify => ("answer_question", [false, true, false, false]),
        HitlKind::HumanTask => ("submit_task", [true, false, true, false]),
        // Edit with `{budget: {...}}` raises the budget; ignore ends the run.
        HitlKind::Budget => ("raise_budget", [true, false, true, false]),
    };
    let args = json!({
        "question": request.question, "planVersion": request.plan_version, "nodeId": request.node_id,
    });
    let value = json!({
        "requestId": request.id,
        "kind": request.kind,
        "subject": request.subject,
        "question": request.question,
        "planVersion": request.plan_version,
        "nodeId": request.node_id,
        "plan": plan,
        "context": request.context,
        "action_request": {"action": action, "args": args},
        "config": {"allow_ignore": allow[0], "allow_respond": allow[1], "allow_edit": allow[2], "allow_accept": allow[3]},
        "description": request.question,
    });
    json!({"value": value, "id": request.id})
}

/// The run's answer as an AI message, once it completed. An output that is not text is its JSON
/// text, redacted first: inside a string no later redaction of the message can see its keys.
pub fn answer(state: &RunState, redaction: &Redaction) -> Option<Value> {
    let end = state.end.as_ref().filter(|end| end.status == CompleteStatus::Completed)?;
    let content = match &end.output {
        Value::String(text) => text.clone(),
        other => redaction.value(other.clone()).to_string(),
    };
    let mut message = json!({
        "type": "ai", "id": format!("run-{}", state.run_id), "content": content, "name": null,
        "additional_kwargs": {}, "response_metadata": {}, "tool_calls": [], "invalid_tool_calls": [],
    });
    if let Some(usage) = usage_metadata(&state.usage.total) {
        message["usage_metadata"] = usage;
    }
    Some(message)
}

/// The run's usage as LangChain's `usage_metadata` (every model call of the run went into the
/// answer); none while its input or output tokens are unknown, as LangChain's counts are numbers.
fn usage_metadata(usage: &Usage) -> Option<Value> {
    let counts = &usage.tally.counts;
    let (input, output) = (counts.input_tokens?, counts.output_tokens?);
    let mut metadata =
        json!({"input_tokens": input, "output_tokens": output, "total_tokens": input.saturating_add(output)});
    if let Some(cached) = counts.cached_input_tokens {
        metadata["input_token_details"] = json!({"cache_read": cached});
    }
    if let Some(reasoning) = counts.reasoning_tokens {
        metadata["output_token_details"] = json!({"reasoning": reasoning});
    }
    Some(metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_in_langgraph_words() {
        assert_eq!(run_status(RunStatus::Planning), "running");
        assert_eq!(run_status(RunStatus::AwaitingHuman), "interrupted");
        assert_eq!(run_status(RunStatus::Completed), "success");
        assert_eq!(run_status(RunStatus::Failed), "error");
        assert_eq!(thread_status(None), "idle");
        assert_eq!(thread_status(Some(RunStatus::Running)), "busy");
        assert_eq!(thread_status(Some(RunStatus::AwaitingHitl)), "interrupted");
        assert_eq!(thread_status(Some(RunStatus::Failed)), "error");
    }
}
