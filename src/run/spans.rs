//! What a run's trace shows of it (`crate::traces`): its root, ended by whoever ends the run; a
//! span per plan version, per step attempt and per goal-condition round, made by the coordinator
//! as they happen; a span per operator wait, from the request its log recorded to the decision.
//! A run without a trace (`RunState::trace`) makes none of them.

use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanKind, Status};
use serde_json::Value;

use super::state::RunState;
use crate::capability::{CapabilityError, Reply};
use crate::events::payload::{ExecutorType, HitlResolved, ReplanInfo};
use crate::plan::{NodeStatus, PlanNode};
use crate::traces::{OpenSpan, SpanScope, Traces, spans};
use flexrun_conditions::GoalConditionResult;
use flexrun_core::run::decide::goals::{Evaluation, EvaluationStatus};

/// Sends the run's root span, if it is traced and has ended.
pub fn ended(traces: &Traces, state: &RunState) {
    let (Some(trace), Some(started)) = (&state.trace, state.started_at) else { return };
    if !state.status.is_terminal() {
        return;
    }
    let usage = &state.usage.total;
    let mut attributes = vec![
        KeyValue::new(spans::OPERATION, "invoke_workflow"),
        KeyValue::new(spans::WORKFLOW_NAME, "flexrun"),
        KeyValue::new(spans::CONVERSATION_ID, state.run_id.to_string()),
        KeyValue::new(spans::RUN_ID, state.run_id.to_string()),
        KeyValue::new(spans::RUN_STATUS, state.status.as_str()),
        KeyValue::new(spans::PLAN_VERSION, i64::from(state.plan_version())),
    ];
    attributes.extend(spans::usage(&usage.tally.counts, usage.tally.cost_usd));
    let mut status = Status::Ok;
    if let Some((code, message)) = state.end.as_ref().filter(|end| end.error.is_some()).map(|end| end.error_summary()) {
        attributes.push(KeyValue::new(spans::ERROR_TYPE, code.to_string()));
        status = Status::error(crate::excerpt::excerpt(message, crate::excerpt::MESSAGE).into_owned());
    }
    traces.end_run(trace, SystemTime::from(started), attributes, status);
}

/// Sends the span of the operator wait `resolved` closes: from its request (in `state`, before
/// `resolved` is applied) to now.
pub fn operator_wait(traces: &Traces, state: &RunState, resolved: &HitlResolved) {
    let Some(trace) = &state.trace else { return };
    let Some(request) = state.requests.iter().find(|r| r.id == resolved.request.id) else { return };
    let Ok(asked) = chrono::DateTime::parse_from_rfc3339(&request.created_at) else { return };
    let Some(mut span) = traces.span_since(Some(trace.root()), spans::OPERATOR_WAIT, SystemTime::from(asked)) else {
        return;
    };
    span.set(spans::RUN_ID, state.run_id.to_string());
    span.set(spans::WAIT_KIND, request.kind.as_str());
    span.set(spans::WAIT_SUBJECT, request.subject.as_str());
    let decision = resolved.decision.as_ref().map_or(resolved.request.status.as_str(), |d| d.decision.as_str());
    span.set(spans::WAIT_DECISION, decision);
    if let Some(node_id) = &request.node_id {
        span.set(spans::NODE_ID, node_id.clone());
    }
    span.end();
}

/// The span of the plan version a planning round is to produce (`plan flexrun`).
pub fn plan(traces: &Traces, state: &RunState, replan: &Option<ReplanInfo>) -> Option<OpenSpan> {
    let mut span = traces.span(state.trace.map(|t| t.root()), spans::PLAN, SpanKind::Internal)?;
    span.set(spans::OPERATION, "plan");
    span.set(spans::CONVERSATION_ID, state.run_id.to_string());
    span.set(spans::PLAN_VERSION, i64::from(state.plan_version()) + 1);
    if let Some(replan) = replan {
        span.set(spans::REPLAN_REASON, replan.reason.as_str());
    }
    Some(span)
}

/// Ends a plan span: `drafts` model answers were judged; `failed`: the round's failure code.
pub fn plan_ended(span: Option<OpenSpan>, drafts: u32, failed: Option<(&str, &str)>) {
    let Some(mut span) = span else { return };
    span.set(spans::PLAN_DRAFTS, i64::from(drafts));
    if let Some((code, message)) = failed {
        span.fail(code, message);
    }
    span.end();
}

/// The span of one attempt of `node`'s capability (`execute_tool <capabilityId>`).
pub fn tool(
    traces: &Traces,
    state: &RunState,
    node: &PlanNode,
    executor: Option<ExecutorType>,
    attempt: u32,
    arguments: impl FnOnce() -> Value,
) -> Option<OpenSpan> {
    let mut span =
        traces.span(state.trace.map(|t| t.root()), spans::execute_tool(&node.capability_id), SpanKind::Internal)?;
    span.set(spans::OPERATION, "execute_tool");
    span.set(spans::TOOL_NAME, node.capability_id.clone());
    span.set(spans::TOOL_CALL_ID, format!("{}#{attempt}", node.id));
    let tool_type = match executor {
        Some(ExecutorType::Mcp) => "extension",
        _ => "function",
    };
    span.set(spans::TOOL_TYPE, tool_type);
    span.set(spans::CONVERSATION_ID, state.run_id.to_string());
    span.set(spans::NODE_ID, node.id.to_string());
    span.set(spans::NODE_ATTEMPT, i64::from(attempt));
    span.content(spans::TOOL_ARGUMENTS, arguments);
    Some(span)
}

/// A step attempt's span between the capability's reply and the run's record of it: what the
/// reply was is taken from it before the coordinator consumes it.
pub struct AttemptSpan {
    span: Option<OpenSpan>,
    error: Option<(&'static str, String)>,
}

impl AttemptSpan {
    pub fn of(mut span: Option<OpenSpan>, result: &Result<Reply, CapabilityError>) -> Self {
        let error = match result {
            Ok(Reply::Output(output)) => {
                if let Some(span) = &mut span {
                    span.content(spans::TOOL_RESULT, || output.clone());
                }
                None
            }
            Ok(Reply::Signal(_)) => None,
            Err(error) => span.as_ref().map(|_| (error.code(), error.to_string())),
        };
        Self { span, error }
    }

    /// Ends the span with the node's status as the run recorded it.
    pub fn end(self, status: Option<NodeStatus>) {
        let Some(mut span) = self.span else { return };
        span.set(spans::NODE_STATUS, status.map_or("unknown", NodeStatus::as_str));
        if let Some((code, message)) = &self.error {
            span.fail(code, message);
        }
        span.end();
    }
}

/// The scope a step attempt's capability runs in: its model calls are children of `span`, and
/// its `http` calls carry `traceparent`; `inputs`: what the step was given.
pub fn scope(traces: &Traces, state: &RunState, span: &OpenSpan, inputs: &Value) -> Option<SpanScope> {
    traces.scope(Some(span.id()), state.run_id.as_str(), || traces.secret_values(inputs))
}

/// Sends the span of one goal-condition round, begun at `started`: `evaluation` as kept with the
/// run (none when the output broke its contract, and no condition was evaluated).
pub fn goal_round(traces: &Traces, state: &RunState, started: SystemTime, evaluation: Option<&Evaluation>) {
    let Some(evaluation) = evaluation else { return };
    let Some(mut span) = traces.span_since(state.trace.map(|t| t.root()), spans::GOAL_CONDITIONS, started) else {
        return;
    };
    let results: Vec<GoalConditionResult> = serde_json::from_str(&evaluation.results_json).unwrap_or_default();
    let failed: Vec<opentelemetry::StringValue> =
        results.iter().filter(|r| !r.satisfied).map(|r| format!("{}{}", r.facet, r.path).into()).collect();
    span.set(spans::RUN_ID, state.run_id.to_string());
    span.set(spans::PLAN_VERSION, i64::from(evaluation.plan_version));
    span.set(spans::GOAL_PASSED, evaluation.status == EvaluationStatus::Satisfied);
    span.set(spans::GOAL_FAILED, opentelemetry::Value::Array(failed.into()));
    span.end();
}
