//! What operators do to a run that waits for them: approve or reject a request, submit or decline
//! a human task, answer a question, replan, cancel. [`decide`] works out what a command does from
//! the run's state (pure: no I/O, unit-tested here); the caller records the [`Decision`] through
//! the run's log, whose state then says where the run went.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::budget;
use crate::budget::BudgetRaise;
use crate::contract::SchemaViolation;
use crate::error_code::ErrorCode;
use crate::events::Event;
use crate::events::payload::*;
use crate::mcp::question::ToolQuestion;
use crate::replan_budget::ReplanLimits;
use crate::run::operator::{Actor, Answer, Command};
use crate::run::state::RunState;
use crate::run::status::RunStatus;

/// The request a run waits on, as an operator answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub info: HitlRequestInfo,
    /// For a node's request (a question, a human task): its capability and label.
    pub capability_id: String,
    pub label: String,
}

impl Pending {
    /// The request the run answers next, if it waits on one.
    pub fn of(state: &RunState) -> Option<Self> {
        let info = state.pending_request()?.clone();
        let node = info.node_context();
        let (capability_id, label) = node.map(|n| (n.capability_id, n.label)).unwrap_or_default();
        Some(Self { info, capability_id, label })
    }
}

/// What a command does: the frames to record (the run's state follows from them), and what no
/// frame carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub events: Vec<Event>,
    /// The operator's decision, recorded with the request it answers.
    pub record: Option<Record>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub request_id: String,
    pub decision: Verdict,
    pub feedback: Option<String>,
    /// A human task's output, its decline, or a question's answer.
    pub payload: Option<Value>,
    pub actor: Actor,
}

/// Why a command cannot be applied; [`Refusal::code`] says it to a client (and so decides the
/// status of the answer).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("run {0} not found")]
    NotFound(String),
    /// The run is not in a status the command applies to.
    #[error("{message}")]
    InvalidState { status: RunStatus, message: String },
    /// The caller saw another plan version.
    #[error("stale plan version: the run is at plan version {actual}, not {expected}")]
    StalePlanVersion { expected: u32, actual: u32 },
    /// The request answered is not the pending one.
    #[error("request {request_id} is not pending; the run waits on {pending}")]
    StaleRequest { request_id: String, pending: String },
    /// The body does not fit what the run waits for; `code` says what it waits for.
    #[error("{message}")]
    Mismatch { code: ErrorCode, message: String },
    /// No replan is left.
    #[error("the run used all {limit} replans it is allowed")]
    ReplanLimit { limit: u32 },
    /// The run is already planning.
    #[error("a planning task is already running for this run")]
    PlanningInProgress,
    /// A replan of a run whose status does not wait on an operator.
    #[error("{message}")]
    NotWaiting { status: RunStatus, message: String },
    /// Another command or the run's coordinator is changing the run right now.
    #[error("run {0} is being changed by another command; try again")]
    Busy(String),
}

impl Refusal {
    /// The error code a client is answered with.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::NotFound(_) => ErrorCode::RunNotFound,
            Self::InvalidState { .. } => ErrorCode::InvalidRunState,
            Self::StalePlanVersion { .. } => ErrorCode::StalePlanVersion,
            Self::StaleRequest { .. } => ErrorCode::StaleRequest,
            Self::Mismatch { code, .. } => *code,
            Self::ReplanLimit { .. } => ErrorCode::ReplanLimit,
            Self::PlanningInProgress => ErrorCode::ReplanInProgress,
            Self::NotWaiting { .. } => ErrorCode::NotWaiting,
            Self::Busy(_) => ErrorCode::RunBusy,
        }
    }
}

/// Works out what `command` does to the run in `state`, whose replan caps are `limits`.
/// `violations` checks a human node's submitted output against its contracts.
pub fn decide(
    state: &RunState,
    limits: ReplanLimits,
    command: Command,
    now: DateTime<Utc>,
    violations: impl Fn(&str, &Value) -> Vec<SchemaViolation>,
) -> Result<Decision, Refusal> {
    let run = Operated { state, pending: Pending::of(state), limits };
    match command {
        Command::Resume { expected_plan_version, answer, actor } => {
            resume(&run, expected_plan_version, answer, actor, now, violations)
        }
        Command::Replan { feedback, actor } => replan(&run, feedback, actor),
        Command::Cancel { stopped, actor } => cancel(&run, stopped, actor),
    }
}

/// The run a command is decided on.
struct Operated<'a> {
    state: &'a RunState,
    pending: Option<Pending>,
    limits: ReplanLimits,
}

impl Operated<'_> {
    /// Replans the budget still allows (`maxReplans` minus those made).
    fn replans_left(&self) -> u32 {
        self.limits.max_replans.saturating_sub(self.state.replans.total)
    }
}

impl Decision {
    fn of(events: Vec<Event>) -> Self {
        Self { events, record: None }
    }
}

fn resume(
    run: &Operated,
    expected_plan_version: Option<u32>,
    answer: Answer,
    actor: Actor,
    now: DateTime<Utc>,
    violations: impl Fn(&str, &Value) -> Vec<SchemaViolation>,
) -> Result<Decision, Refusal> {
    let state = run.state;
    let waiting = matches!(state.status, RunStatus::AwaitingHitl | RunStatus::AwaitingHuman);
    let pending = run.pending.as_ref().filter(|_| waiting).ok_or_else(|| Refusal::InvalidState {
        status: state.status,
        message: format!("run {} is {}, not awaiting operator input", state.run_id, state.status),
    })?;
    if let Some(expected) = expected_plan_version.filter(|v| *v != state.plan_version()) {
        return Err(Refusal::StalePlanVersion { expected, actual: state.plan_version() });
    }
    match (pending.info.kind, answer) {
        (kind, Answer::Decide { budget: Some(_), .. }) if kind != HitlKind::Budget => Err(Refusal::Mismatch {
            code: ErrorCode::InvalidRequest,
            message: format!(
                "`decision.budget` answers a budget request; the run waits on request {} ({})",
                pending.info.id,
                kind.as_str()
            ),
        }),
        (HitlKind::Budget, Answer::Decide { request_id, approved, feedback, budget }) => {
            same_request(pending, request_id)?;
            budget_answer(state, pending, (approved, budget), feedback, actor)
        }
        (HitlKind::Approval, Answer::Decide { request_id, approved, feedback, .. }) => {
            same_request(pending, request_id)?;
            let mut decision = approval(run, pending, approved, feedback, actor);
            if approved {
                accept_candidate(pending, now, &mut decision);
            }
            Ok(decision)
        }
        (HitlKind::HumanTask, Answer::Submit { node_id, output }) => {
            same_node(pending, &node_id)?;
            Ok(submission(pending, output, actor, now, violations))
        }
        (HitlKind::HumanTask, Answer::Decline { node_id, reason, note }) => {
            same_node(pending, &node_id)?;
            Ok(decline(pending, reason, note, actor))
        }
        (HitlKind::Clarify, Answer::Decide { request_id, approved, feedback, .. }) => {
            same_request(pending, request_id)?;
            clarification(pending, approved, feedback, actor)
        }
        (HitlKind::Approval | HitlKind::Clarify | HitlKind::Budget, _) => Err(Refusal::Mismatch {
            code: ErrorCode::DecisionRequired,
            message: format!("the run waits for a decision on request {}: send `decision`", pending.info.id),
        }),
        (HitlKind::HumanTask, _) => Err(Refusal::Mismatch {
            code: ErrorCode::HumanPayloadRequired,
            message: format!(
                "the run waits for the output of human node \"{}\": send `payload` with `output` or `decline`",
                pending.info.node_id.as_deref().unwrap_or_default()
            ),
        }),
    }
}

fn same_request(pending: &Pending, request_id: Option<String>) -> Result<(), Refusal> {
    match request_id.filter(|id| *id != pending.info.id) {
        Some(request_id) => Err(Refusal::StaleRequest { request_id, pending: pending.info.id.clone() }),
        None => Ok(()),
    }
}

fn same_node(pending: &Pending, node_id: &str) -> Result<(), Refusal> {
    match pending.info.node_id.as_deref() {
        Some(waiting) if waiting == node_id => Ok(()),
        waiting => Err(Refusal::Mismatch {
            code: ErrorCode::WrongNode,
            message: format!("the run waits for human node \"{}\", not \"{node_id}\"", waiting.unwrap_or_default()),
        }),
    }
}

fn closed(pending: &Pending, status: RequestStatus) -> ClosedRequest {
    ClosedRequest { id: pending.info.id.clone(), kind: pending.info.kind, subject: pending.info.subject, status }
}

fn record(
    pending: &Pending,
    decision: Verdict,
    feedback: Option<String>,
    payload: Option<Value>,
    actor: &Actor,
) -> Record {
    Record { request_id: pending.info.id.clone(), decision, feedback, payload, actor: actor.clone() }
}

fn decision_info(decision: Verdict, feedback: Option<String>, actor: &Actor) -> DecisionInfo {
    DecisionInfo {
        decision,
        feedback,
        answer: None,
        operator: actor.operator.clone(),
        note: actor.note.clone(),
        principal: Some(actor.principal.clone()).filter(|p| !p.is_empty()),
    }
}

/// The request answered: `hitl_resolved` with the operator's decision.
fn resolved(pending: &Pending, decision: DecisionInfo, replan: Option<ReplanInfo>) -> Event {
    Event::HitlResolved(HitlResolved {
        request: closed(pending, RequestStatus::Resolved),
        decision: Some(decision),
        replan,
        budget: None,
    })
}

/// The `complete {status:"failed"}` frame of a run an operator ended.
fn failed(code: &str, message: String, extra: Value) -> Event {
    let mut error = json!({"code": code, "message": message});
    if let (Some(error), Some(extra)) = (error.as_object_mut(), extra.as_object()) {
        error.extend(extra.clone());
    }
    Event::Complete(Complete {
        status: CompleteStatus::Failed,
        output: Value::Null,
        goal_condition_results: None,
        error: Some(error),
        post_condition_results: Vec::new(),
        usage: None,
    })
}

fn approval(run: &Operated, pending: &Pending, approved: bool, feedback: Option<String>, actor: Actor) -> Decision {
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
fn budget_answer(
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
fn accept_candidate(pending: &Pending, now: DateTime<Utc>, decision: &mut Decision) {
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

fn submission(
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

fn decline(pending: &Pending, reason: String, note: Option<String>, actor: Actor) -> Decision {
    let message = format!("The human task was declined: {reason}");
    refuse_node(pending, "human_task_declined", message, json!({"reason": reason, "note": note}), actor)
}

/// Answers a node's question: the run goes on and the node runs again with the answer. Rejecting
/// the request (`approved: false`) declines to answer: the node and the run fail.
fn clarification(pending: &Pending, approved: bool, text: Option<String>, actor: Actor) -> Result<Decision, Refusal> {
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

fn replan(run: &Operated, feedback: Option<String>, actor: Actor) -> Result<Decision, Refusal> {
    let state = run.state;
    match state.status {
        RunStatus::AwaitingHitl | RunStatus::AwaitingHuman => {}
        RunStatus::Planning => return Err(Refusal::PlanningInProgress),
        status => {
            return Err(Refusal::NotWaiting {
                status,
                message: format!(
                    "run {} is {status}; only a run waiting on an operator can be replanned",
                    state.run_id
                ),
            });
        }
    }
    if run.replans_left() == 0 {
        return Err(Refusal::ReplanLimit { limit: run.limits.max_replans });
    }
    let feedback = feedback.filter(|f| !f.trim().is_empty());
    let info = ReplanInfo::operator(ReplanReason::OperatorReplan, feedback.clone());
    let mut events = Vec::new();
    if let Some(pending) = &run.pending {
        events.push(Event::HitlResolved(HitlResolved {
            request: closed(pending, RequestStatus::Superseded),
            decision: None,
            replan: None,
            budget: None,
        }));
    }
    events.push(Event::PolicyTriggered(PolicyTriggered {
        run_id: state.run_id.to_string(),
        trigger: Trigger {
            reason: ReplanReason::OperatorReplan,
            details: json!({"feedback": feedback, "operator": actor.operator, "note": actor.note}),
        },
        replan: info,
        usage: None,
    }));
    Ok(Decision::of(events))
}

fn cancel(run: &Operated, stopped: bool, actor: Actor) -> Result<Decision, Refusal> {
    let state = run.state;
    if state.status == RunStatus::Cancelled && stopped {
        // This process's coordinator committed the cancellation.
        return Ok(Decision::of(Vec::new()));
    }
    if state.status.is_terminal() {
        return Err(Refusal::InvalidState {
            status: state.status,
            message: format!("run {} already ended: it is {}", state.run_id, state.status),
        });
    }
    let mut events = Vec::new();
    if let Some(pending) = &run.pending {
        events.push(Event::HitlResolved(HitlResolved {
            request: closed(pending, RequestStatus::Cancelled),
            decision: None,
            replan: None,
            budget: None,
        }));
    }
    events.push(Event::Complete(Complete {
        status: CompleteStatus::Cancelled,
        output: Value::Null,
        goal_condition_results: None,
        error: Some(cancelled_error(&actor)),
        post_condition_results: Vec::new(),
        usage: None,
    }));
    Ok(Decision::of(events))
}

/// The error a cancelled run ends with.
pub fn cancelled_error(actor: &Actor) -> Value {
    json!({"code": CANCELLED, "message": "An operator cancelled the run", "operator": actor.operator, "note": actor.note})
}

/// The question a pending request asks, by subject.
pub fn question(subject: HitlSubject, plan_version: u32) -> String {
    match subject {
        HitlSubject::Plan => format!("Approve plan version {plan_version} before any of its steps runs?"),
        HitlSubject::Completion => "Approve the run's result before it completes?".into(),
        HitlSubject::Node => HUMAN_TASK_QUESTION.into(),
        HitlSubject::Policy => "A runtime policy asks for an operator's approval.".into(),
        HitlSubject::Budget => "The run reached its budget: raise it to go on?".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::FrameKind;
    use crate::run::decide::testing::*;

    const LIMITS: ReplanLimits = ReplanLimits { enabled: true, max_goal_condition_replans: 2, max_replans: 4 };

    /// A run waiting on request `q1` of `kind`, about node `review` unless it is a plan approval.
    fn waiting(kind: HitlKind) -> RunState {
        let review = plan(1, vec![node("review", "human.review", &["brief"], &["review"])]);
        let mut events = vec![run_started(), requested(1, None), generated(review, None)];
        match kind {
            HitlKind::Approval => events.push(request("q1", kind, HitlSubject::Plan, None, Value::Null)),
            HitlKind::HumanTask => {
                let assignment = json!({"taskId": "q1", "createdAt": "t", "capabilityId": "human.review",
                                        "label": "Review"});
                events.push(Event::NodeStart(NodeStart {
                    executor_type: ExecutorType::Human,
                    assignment: Some(assignment),
                    ..node_start_of("review")
                }));
                events.push(Event::Log(Log::paused(Log::PAUSES[1], "awaiting_human", vec!["review".into()])));
            }
            HitlKind::Clarify => {
                events.push(Event::NodeStart(node_start_of("review")));
                let context = json!({"capabilityId": "human.review", "label": "Review"});
                events.push(request("q1", kind, HitlSubject::Node, Some("review"), context));
                events.push(Event::Log(Log::paused(Log::PAUSES[2], "awaiting_hitl", vec!["review".into()])));
            }
            HitlKind::Budget => {
                let context = json!({"limit": "modelCalls", "max": 1, "spent": 1, "phase": "execution",
                                     "budget": {"maxModelCalls": 1}, "spentSoFar": {"modelCalls": 1, "totalTokens": 0, "costUsd": 0}});
                events.push(request("q1", kind, HitlSubject::Budget, None, context));
            }
        }
        Fixture::new(json!({})).fold(&events)
    }

    fn node_start_of(id: &str) -> NodeStart {
        match node_start(id, "human.review") {
            Event::NodeStart(start) => start,
            _ => unreachable!(),
        }
    }

    fn with_status(events: Vec<Event>) -> RunState {
        Fixture::new(json!({})).fold(&events)
    }

    fn resume(answer: Answer) -> Command {
        Command::Resume { expected_plan_version: None, answer, actor: Actor::default() }
    }

    fn decide_now(state: &RunState, command: Command) -> Result<Decision, Refusal> {
        decide(state, LIMITS, command, Utc::now(), |_, output: &Value| {
            if output.get("ok").is_some() {
                Vec::new()
            } else {
                vec![SchemaViolation { instance_path: "".into(), keyword: "required".into(), message: "ok".into() }]
            }
        })
    }

    fn kinds(decision: &Decision) -> Vec<FrameKind> {
        decision.events.iter().map(Event::kind).collect()
    }

    /// The run's state once the decision is recorded.
    fn after(state: &RunState, decision: &Decision) -> RunState {
        let mut state = state.clone();
        apply_all(&mut state, &decision.events);
        state
    }

    fn decide_answer(approved: bool, feedback: Option<&str>) -> Answer {
        Answer::Decide { request_id: Some("q1".into()), approved, feedback: feedback.map(String::from), budget: None }
    }

    #[test]
    fn approve_runs_on() {
        let state = waiting(HitlKind::Approval);
        let d = decide_now(&state, resume(decide_answer(true, None))).unwrap();
        assert_eq!(kinds(&d), [FrameKind::HitlResolved]);
        assert_eq!(after(&state, &d).status, RunStatus::Running);
        assert!(after(&state, &d).requests.is_empty());
        assert_eq!(d.record.as_ref().map(|r| r.decision), Some(Verdict::Approved));
    }

    #[test]
    fn reject_fails_or_replans_with_feedback_when_replans_are_left() {
        let state = waiting(HitlKind::Approval);
        let d = decide_now(&state, resume(decide_answer(false, None))).unwrap();
        assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::Complete]);
        let failed = after(&state, &d);
        assert_eq!(failed.status, RunStatus::Failed);
        assert_eq!(failed.end.unwrap().error_summary().0, "operator_rejected");

        let d = decide_now(&state, resume(decide_answer(false, Some("shorter")))).unwrap();
        let replanning = after(&state, &d);
        assert_eq!((replanning.status, replanning.replans.operator), (RunStatus::Planning, 1));
        let Event::HitlResolved(closed) = &d.events[0] else { panic!() };
        let expected = ReplanInfo::operator(ReplanReason::OperatorRejected, Some("shorter".into()));
        assert_eq!(closed.replan, Some(expected));

        let mut spent = waiting(HitlKind::Approval);
        spent.replans.total = 4;
        let d = decide_now(&spent, resume(decide_answer(false, Some("shorter")))).unwrap();
        let failed = after(&spent, &d);
        assert_eq!(failed.status, RunStatus::Failed);
        assert!(failed.end.unwrap().error_summary().1.contains("no replan is left"));
    }

    #[test]
    fn resume_checks_state_version_and_request() {
        let running = with_status(vec![run_started(), requested(1, None), generated(two_nodes(), None)]);
        assert!(matches!(
            decide_now(&running, resume(decide_answer(true, None))),
            Err(Refusal::InvalidState { status: RunStatus::Running, .. })
        ));
        let stale = Command::Resume {
            expected_plan_version: Some(2),
            answer: decide_answer(true, None),
            actor: Actor::default(),
        };
        let state = waiting(HitlKind::Approval);
        assert_eq!(decide_now(&state, stale).unwrap_err(), Refusal::StalePlanVersion { expected: 2, actual: 1 });
        let other = Answer::Decide { request_id: Some("q0".into()), approved: true, feedback: None, budget: None };
        assert!(matches!(decide_now(&state, resume(other)), Err(Refusal::StaleRequest { .. })));
        let output = Answer::Submit { node_id: "review".into(), output: json!({}) };
        assert!(matches!(
            decide_now(&state, resume(output)),
            Err(Refusal::Mismatch { code: ErrorCode::DecisionRequired, .. })
        ));
    }

    #[test]
    fn human_output_is_checked_then_completes_the_node() {
        let state = waiting(HitlKind::HumanTask);
        assert_eq!(state.status, RunStatus::AwaitingHuman);
        let bad = decide_now(&state, resume(Answer::Submit { node_id: "review".into(), output: json!({}) })).unwrap();
        assert_eq!(kinds(&bad), [FrameKind::ValidationError, FrameKind::NodeError]);
        assert_eq!(after(&state, &bad).status, RunStatus::AwaitingHuman, "the run keeps waiting");
        assert_eq!(bad.record, None);

        let ok = json!({"ok": true});
        let good = decide_now(&state, resume(Answer::Submit { node_id: "review".into(), output: ok.clone() })).unwrap();
        assert_eq!(kinds(&good), [FrameKind::HitlResolved, FrameKind::NodeComplete]);
        let done = after(&state, &good);
        assert_eq!(done.status, RunStatus::Running);
        assert_eq!(done.nodes["review"], crate::plan::NodeStatus::Completed);
        assert_eq!(done.output_of("review"), Some(&ok));

        let wrong = Answer::Submit { node_id: "other".into(), output: json!({"ok": 1}) };
        assert!(matches!(decide_now(&state, resume(wrong)), Err(Refusal::Mismatch { code: ErrorCode::WrongNode, .. })));
        let approve = decide_now(&state, resume(decide_answer(true, None)));
        assert!(matches!(approve, Err(Refusal::Mismatch { code: ErrorCode::HumanPayloadRequired, .. })));
    }

    #[test]
    fn a_tools_question_takes_an_answer_fitting_its_schema_and_gives_it_to_the_next_call() {
        let review = plan(1, vec![node("review", "human.review", &["brief"], &["review"])]);
        let question = json!({"inputKey": "k", "message": "Which warehouse?", "requestState": "s1",
                              "requestedSchema": {"type": "object", "required": ["warehouse"],
                                                  "properties": {"warehouse": {"type": "string", "minLength": 2}}}});
        let context = json!({"capabilityId": "shop.confirm", "label": "Confirm", "context": {"mcp": question}});
        let state = Fixture::new(json!({})).fold(&[
            run_started(),
            requested(1, None),
            generated(review, None),
            Event::NodeStart(node_start_of("review")),
            request("q1", HitlKind::Clarify, HitlSubject::Node, Some("review"), context),
            Event::Log(Log::paused(Log::PAUSES[2], "awaiting_hitl", vec!["review".into()])),
        ]);
        let unfit = decide_now(&state, resume(decide_answer(true, Some("n"))));
        let Err(Refusal::Mismatch { code: ErrorCode::AnswerInvalid, message }) = unfit else { panic!("{unfit:?}") };
        assert!(message.contains("/warehouse"), "{message}");

        let d = decide_now(&state, resume(decide_answer(true, Some("north")))).unwrap();
        let Event::HitlResolved(closed) = &d.events[0] else { panic!("{:?}", kinds(&d)) };
        assert_eq!(closed.decision.as_ref().unwrap().answer.as_deref(), Some(r#"{"warehouse":"north"}"#));
        let answered = after(&state, &d);
        let node = answered.plan().unwrap().node("review").unwrap().clone();
        let fixture = Fixture::new(json!({}));
        let answer = super::super::execution::bundle(&fixture.run(&answered), &node).tool_answer.expect("an answer");
        assert_eq!((answer.input_key.as_str(), answer.request_state.as_deref()), ("k", Some("s1")));
        assert_eq!(answer.content, json!({"warehouse": "north"}));
    }

    #[test]
    fn clarify_answer_runs_on_and_declining_fails_the_node() {
        let state = waiting(HitlKind::Clarify);
        let d = decide_now(&state, resume(decide_answer(true, Some("EU only")))).unwrap();
        let Event::HitlResolved(closed) = &d.events[0] else { panic!("{:?}", kinds(&d)) };
        assert_eq!(closed.decision.as_ref().unwrap().answer.as_deref(), Some("EU only"));
        assert_eq!(d.record.as_ref().map(|r| r.decision), Some(Verdict::Answered));
        let answered = after(&state, &d);
        assert_eq!(answered.status, RunStatus::Running);
        assert_eq!(answered.nodes["review"], crate::plan::NodeStatus::Pending, "it runs again with the answer");

        let empty = decide_now(&state, resume(decide_answer(true, Some("  "))));
        assert!(matches!(empty, Err(Refusal::Mismatch { code: ErrorCode::AnswerRequired, .. })));
        let submit = Answer::Submit { node_id: "review".into(), output: json!({"ok": 1}) };
        assert!(matches!(
            decide_now(&state, resume(submit)),
            Err(Refusal::Mismatch { code: ErrorCode::DecisionRequired, .. })
        ));

        let d = decide_now(&state, resume(decide_answer(false, Some("out of scope")))).unwrap();
        assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::NodeError, FrameKind::Complete]);
        let failed = after(&state, &d);
        assert_eq!(failed.status, RunStatus::Failed);
        assert_eq!(failed.end.unwrap().error_summary().0, "clarification_declined");
        let Event::NodeError(refused) = &d.events[1] else { panic!("{:?}", kinds(&d)) };
        assert_eq!((refused.node_id.as_str(), &refused.error.details["reason"]), ("review", &json!("out of scope")));
    }

    #[test]
    fn decline_fails_the_run() {
        let state = waiting(HitlKind::HumanTask);
        let answer = Answer::Decline { node_id: "review".into(), reason: "no time".into(), note: None };
        let d = decide_now(&state, resume(answer)).unwrap();
        assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::NodeError, FrameKind::Complete]);
        let failed = after(&state, &d);
        assert_eq!(failed.status, RunStatus::Failed);
        assert_eq!(failed.end.unwrap().error_summary().0, "human_task_declined");
    }

    #[test]
    fn replan_rules() {
        let command = || Command::Replan { feedback: Some("again".into()), actor: Actor::default() };
        let state = waiting(HitlKind::Approval);
        let d = decide_now(&state, command()).unwrap();
        assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::PolicyTriggered]);
        let replanning = after(&state, &d);
        assert_eq!((replanning.status, replanning.replans.operator), (RunStatus::Planning, 1));
        let planning = with_status(vec![run_started(), requested(1, None)]);
        assert_eq!(decide_now(&planning, command()).unwrap_err(), Refusal::PlanningInProgress);
        let running = with_status(vec![run_started(), requested(1, None), generated(two_nodes(), None)]);
        assert!(matches!(decide_now(&running, command()), Err(Refusal::NotWaiting { .. })));
        let mut spent = waiting(HitlKind::Approval);
        spent.replans.total = 4;
        assert_eq!(decide_now(&spent, command()).unwrap_err(), Refusal::ReplanLimit { limit: 4 });
    }

    #[test]
    fn cancel_rules() {
        let command = |stopped| Command::Cancel { stopped, actor: Actor::default() };
        let state = waiting(HitlKind::Approval);
        let d = decide_now(&state, command(false)).unwrap();
        assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::Complete]);
        let cancelled = after(&state, &d);
        assert_eq!(cancelled.status, RunStatus::Cancelled);
        assert!(cancelled.requests.is_empty());
        assert!(matches!(decide_now(&cancelled, command(false)), Err(Refusal::InvalidState { .. })));
        assert_eq!(decide_now(&cancelled, command(true)).unwrap().events, Vec::new());
    }

    /// A run of budget `maxModelCalls: 2, maxCostUsd: 0.01` paused on it in `phase` (2 calls
    /// spent), then `answer` decided and applied.
    fn budget_answered(phase: BudgetPhase, answer: Answer) -> Result<(RunState, Decision), Refusal> {
        use crate::budget::{Amount, Limit, Reached, Spent};
        let fixture = Fixture::new(json!({"policies": {"budget": {"maxModelCalls": 2, "maxCostUsd": 0.01}}}));
        let mut events = vec![run_started(), requested(1, None)];
        if phase == BudgetPhase::Execution {
            events.push(generated(two_nodes(), None));
        }
        let mut state = fixture.fold(&events);
        state.usage.spent = Spent { model_calls: 2, tokens: 300, cost_usd: crate::usage::Micros(4_000) };
        let reached = Reached { limit: Limit::ModelCalls, max: Amount::Count(2), spent: Amount::Count(2) };
        let spent = state.usage.spent;
        let (paused, _) = budget::exceeded(&fixture.run(&state), reached, phase, None, Vec::new(), spent);
        apply_all(&mut state, &paused);
        assert_eq!(state.status, RunStatus::AwaitingHitl);
        let decision = decide_now(&state, resume(answer))?;
        apply_all(&mut state, &decision.events);
        Ok((state, decision))
    }

    fn raise_calls(approved: bool, to: Option<u64>) -> Answer {
        let budget = to.map(|n| BudgetRaise { max_model_calls: Some(n), ..BudgetRaise::default() });
        Answer::Decide { request_id: None, approved, feedback: Some("too dear".into()), budget }
    }

    #[test]
    fn a_raised_budget_resumes_the_run_where_it_stopped_under_the_new_limits() {
        let (state, decision) = budget_answered(BudgetPhase::Planning, raise_calls(true, Some(5))).unwrap();
        assert_eq!(state.status, RunStatus::Planning);
        let limits = state.budget.unwrap();
        assert_eq!((limits.max_model_calls, limits.max_cost_usd), (Some(5), Some(crate::usage::Micros(10_000))));
        assert_eq!(decision.record.unwrap().payload.unwrap()["maxModelCalls"], 5);
        let (state, _) = budget_answered(BudgetPhase::Execution, raise_calls(true, Some(3))).unwrap();
        assert_eq!(state.status, RunStatus::Running);
    }

    #[test]
    fn an_approval_that_leaves_no_budget_room_is_refused() {
        for answer in [raise_calls(true, None), raise_calls(true, Some(2)), raise_calls(true, Some(1))] {
            let refused = budget_answered(BudgetPhase::Execution, answer).unwrap_err();
            assert_eq!(refused.code(), ErrorCode::BudgetNotRaised, "{refused}");
        }
    }

    #[test]
    fn a_rejected_budget_fails_the_run_with_budget_exceeded() {
        let (state, _) = budget_answered(BudgetPhase::Execution, raise_calls(false, None)).unwrap();
        assert_eq!(state.status, RunStatus::Failed);
        let end = state.end.unwrap();
        assert_eq!(end.error_summary().0, budget::BUDGET_EXCEEDED);
        let error = end.error.unwrap();
        assert_eq!((&error["feedback"], &error["limit"]), (&json!("too dear"), &json!("modelCalls")));
    }

    #[test]
    fn a_budget_sent_to_another_request_is_refused() {
        let refused = decide_now(&waiting(HitlKind::Approval), resume(raise_calls(true, Some(9))));
        assert_eq!(refused.unwrap_err().code(), ErrorCode::InvalidRequest);
    }
}
