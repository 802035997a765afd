//! An operator's answer to the request a run waits on: an approval or a rejection (of a plan, a
//! result, a policy's request or a budget), a human task's output or its decline, a question's
//! answer. Each is the frames it records and the decision kept with the request.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::{Decision, Operated, Pending, Refusal, closed, decision_info, failed, record, resolved};
use crate::budget::BudgetRaise;
use crate::contract::SchemaViolation;
use crate::error_code::ErrorCode;
use crate::events::Event;
use crate::events::payload::*;
use crate::mcp::question::ToolQuestion;
use crate::run::decide::budget;
use crate::run::operator::Actor;
use crate::run::state::RunState;

pub(super) fn approval(
    run: &Operated,
    pending: &Pending,
    approved: bool,
    feedback: Option<String>,
    actor: Actor,
) -> Decision {
    let feedback = feedback.filter(|f| !f.trim().is_empty());
    let verdict = if approved { Verdict::Approved } else { Verdict::Rejected };
    // A policy's `rejectAction` decides what a rejection does; the coordinator carries it out.
    let follows_up = pending.info.policy_request().is_some_and(|r| r.reject_action.is_some());
    let replan = (!approved && !follows_up && feedback.is_some() && run.replans_left() > 0)
        .then(|| ReplanInfo::operator(ReplanReason::OperatorRejected, feedback.clone()));
    let mut decision =
        Decision::of(vec![resolved(pending, decision_info(verdict, feedback.clone(), &actor), replan.clone())]);
    decision.record = Some(record(pending, verdict, feedback.clone(), None, &actor));
    if approved || follows_up || replan.is_some() {
        return decision;
    }
    let why = match (&feedback, run.replans_left()) {
        (Some(_), 0) => {
            format!(" (no replan is left of {}, so the feedback cannot be planned for)", run.limits.max_replans)
        }
        _ => String::new(),
    };
    let subject = pending.info.subject.as_str();
    decision.events.push(failed(
        "operator_rejected",
        format!("An operator rejected the {subject}{why}"),
        json!({"requestId": pending.info.id, "feedback": feedback, "note": actor.note}),
    ));
    decision
}

/// An operator's answer to a budget request: approved with raised limits (recorded on
/// `hitl_resolved`), the run goes on under them; rejected, it fails with `budget_exceeded`.
pub(super) fn budget_answer(
    state: &RunState,
    pending: &Pending,
    (approved, raise): (bool, Option<BudgetRaise>),
    feedback: Option<String>,
    actor: Actor,
) -> Result<Decision, Refusal> {
    let feedback = feedback.filter(|f| !f.trim().is_empty());
    let answered = budget::answer(&pending.info, state.budget, &state.usage.spent, approved, raise)
        .map_err(|message| Refusal::Mismatch { code: ErrorCode::BudgetNotRaised, message })?;
    let verdict = if approved { Verdict::Approved } else { Verdict::Rejected };
    let (raised, failure) = match answered {
        budget::Answered::Raised(limits) => (Some(limits), None),
        budget::Answered::Ended(failure) => (None, Some(failure)),
    };
    let mut decision = Decision::of(vec![Event::HitlResolved(HitlResolved {
        request: closed(pending, RequestStatus::Resolved),
        decision: Some(decision_info(verdict, feedback.clone(), &actor)),
        replan: None,
        budget: raised,
    })]);
    decision.record = Some(record(pending, verdict, feedback.clone(), raised.map(|b| json!(b)), &actor));
    if let Some(failure) = failure {
        let extra = json!({"requestId": pending.info.id, "feedback": feedback});
        decision.events.push(failed(failure.code, failure.message.clone(), merged(failure.details, extra)));
    }
    Ok(decision)
}

/// `details` with `extra`'s fields added.
fn merged(mut details: serde_json::Map<String, Value>, extra: Value) -> Value {
    if let Value::Object(extra) = extra {
        details.extend(extra);
    }
    Value::Object(details)
}

/// An operator approved a policy request about an output that failed its capability's
/// post-conditions (its `candidateOutput`): the node completes with that output.
pub(super) fn accept_candidate(pending: &Pending, now: DateTime<Utc>, decision: &mut Decision) {
    let Some(request) = pending.info.policy_request() else { return };
    let (Some(output), Some(node_id)) = (request.candidate_output, pending.info.node_id.clone()) else { return };
    decision.events.push(Event::NodeComplete(NodeComplete {
        node_id,
        capability_id: pending.capability_id.clone(),
        label: pending.label.clone(),
        completed_at: now.to_rfc3339_opts(SecondsFormat::Millis, true),
        output,
        executor_type: None,
        post_condition_results: request.post_condition_results,
        usage: None,
        reused_from: None,
    }));
}

pub(super) fn submission(
    pending: &Pending,
    output: Value,
    actor: Actor,
    now: DateTime<Utc>,
    violations: impl Fn(&str, &Value) -> Vec<SchemaViolation>,
) -> Decision {
    let node_id = pending.info.node_id.clone().unwrap_or_default();
    let problems = violations(&pending.capability_id, &output);
    if !problems.is_empty() {
        // The run keeps waiting; the operator is told what is wrong.
        let message =
            format!("the submitted output does not match the node's contract ({} problem(s))", problems.len());
        return Decision::of(vec![
            Event::ValidationError(ValidationError {
                node_id: Some(node_id.clone()),
                scope: ValidationScope::CapabilityOutput,
                errors: problems,
                usage: None,
            }),
            Event::NodeError(NodeError {
                node_id,
                capability_id: pending.capability_id.clone(),
                label: pending.label.clone(),
                error: ErrorInfo::new(HUMAN_OUTPUT_INVALID, &message),
                usage: None,
            }),
        ]);
    }
    let mut decision = Decision::of(vec![
        resolved(pending, decision_info(Verdict::Submitted, None, &actor), None),
        Event::NodeComplete(NodeComplete {
            node_id,
            capability_id: pending.capability_id.clone(),
            label: pending.label.clone(),
            completed_at: now.to_rfc3339_opts(SecondsFormat::Millis, true),
            output: output.clone(),
            executor_type: Some(ExecutorType::Human),
            post_condition_results: Vec::new(),
            usage: None,
            reused_from: None,
        }),
    ]);
    decision.record = Some(record(pending, Verdict::Submitted, None, Some(output), &actor));
    decision
}

pub(super) fn decline(pending: &Pending, reason: String, note: Option<String>, actor: Actor) -> Decision {
    let message = format!("The human task was declined: {reason}");
    refuse_node(pending, "human_task_declined", message, json!({"reason": reason, "note": note}), actor)
}

/// Answers a node's question: the run goes on and the node runs again with the answer. Rejecting
/// the request (`approved: false`) declines to answer: the node and the run fail.
pub(super) fn clarification(
    pending: &Pending,
    approved: bool,
    text: Option<String>,
    actor: Actor,
) -> Result<Decision, Refusal> {
    let text = text.filter(|t| !t.trim().is_empty());
    if !approved {
        let reason = text.as_deref().map(|t| format!(": {t}")).unwrap_or_default();
        let message = format!("An operator declined to answer the node's question{reason}");
        return Ok(refuse_node(pending, "clarification_declined", message, json!({"reason": text}), actor));
    }
    let answer = text.ok_or_else(|| Refusal::Mismatch {
        code: ErrorCode::AnswerRequired,
        message: format!(
            "request {} asks a question: send the answer as `decision.freeformText` (or `approved: false` to decline)",
            pending.info.id
        ),
    })?;
    let answer = match ToolQuestion::from_context(&pending.info.context) {
        // A tool's question: the answer is recorded as the content its next call sends.
        Some(question) => question
            .content(&answer)
            .map_err(|message| Refusal::Mismatch { code: ErrorCode::AnswerInvalid, message })?
            .to_string(),
        None => answer,
    };
    let info = DecisionInfo { answer: Some(answer.clone()), ..decision_info(Verdict::Answered, None, &actor) };
    let mut decision = Decision::of(vec![resolved(pending, info, None)]);
    decision.record = Some(record(pending, Verdict::Answered, None, Some(json!({"answer": answer})), &actor));
    Ok(decision)
}

/// A human task declined, or a node's question left unanswered: the node fails, and the run.
fn refuse_node(pending: &Pending, code: &'static str, message: String, details: Value, actor: Actor) -> Decision {
    let message = crate::excerpt::excerpt(&message, crate::excerpt::FRAME).into_owned();
    let node_id = pending.info.node_id.clone().unwrap_or_default();
    let mut node_error = ErrorInfo::new(code, &message);
    let mut run_error = json!({"nodeId": node_id, "capabilityId": pending.capability_id});
    if let Some(details) = details.as_object() {
        node_error.details.extend(details.clone());
        if let Some(error) = run_error.as_object_mut() {
            error.extend(details.clone());
        }
    }
    let complete = failed(code, format!("Node \"{node_id}\" failed: {message}"), run_error);
    let mut decision = Decision::of(vec![
        resolved(pending, decision_info(Verdict::Declined, None, &actor), None),
        Event::NodeError(NodeError {
            node_id,
            capability_id: pending.capability_id.clone(),
            label: pending.label.clone(),
            error: node_error,
            usage: None,
        }),
        complete,
    ]);
    decision.record = Some(record(pending, Verdict::Declined, None, Some(details), &actor));
    decision
}
