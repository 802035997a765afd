//! What operators do to a run that waits for them: approve or reject a request, submit or decline
//! a human task, replan, cancel. [`decide`] works out what a command does from the run's state
//! (pure: no I/O, unit-tested here); the caller applies the [`Decision`] in one transaction.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::status::RunStatus;
use crate::contract::SchemaViolation;
use crate::events::Event;
use crate::events::payload::{
    ClosedRequest, Complete, CompleteStatus, DecisionInfo, ErrorInfo, HitlKind, HitlRequestInfo, HitlResolved,
    HitlSubject, NodeComplete, NodeError, PolicyTriggered, ReplanInfo, Trigger, ValidationError,
};

/// Who acted, and why, as the operator said (recorded with the decision).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Actor {
    /// `{id?, displayName?, email?}` as sent.
    pub operator: Option<Value>,
    pub note: Option<String>,
}

/// What an operator asks of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `run.resume`: answer the pending request.
    Resume { expected_plan_version: Option<u32>, answer: Answer, actor: Actor },
    /// `runs/{id}/replan`: drop the waiting plan and plan again.
    Replan { feedback: Option<String>, actor: Actor },
    /// `runs/{id}/cancel`. `stopped` when this process's coordinator has just stopped the run.
    Cancel { stopped: bool, actor: Actor },
}

/// An answer to the pending request.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Approve (or, with `approved: false`, reject) an approval request. A rejection with
    /// `feedback` asks for another plan when replans are left.
    Decide { request_id: Option<String>, approved: bool, feedback: Option<String> },
    /// A human node's output.
    Submit { node_id: String, output: Value },
    /// A human node's task refused.
    Decline { node_id: String, reason: String, note: Option<String> },
}

/// A pending request, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub info: HitlRequestInfo,
    /// For a human task: its capability and label (from the node's assignment).
    pub capability_id: String,
    pub label: String,
}

/// The run as the operator finds it.
#[derive(Debug, Clone)]
pub struct RunState {
    pub run_id: String,
    pub status: RunStatus,
    pub plan_version: u32,
    pub pending: Option<Pending>,
    /// Replans the budget still allows (`maxReplans` minus those made).
    pub replans_left: u32,
    pub max_replans: u32,
}

/// What a command does.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The run's next status; `None` leaves it where it is.
    pub to: Option<RunStatus>,
    /// Frames to commit, in order.
    pub events: Vec<Event>,
    /// Which requests leave `pending`.
    pub close: Option<Close>,
    /// The operator's decision, recorded with the request it answers.
    pub record: Option<Record>,
    /// One replan is counted and the current plan's unfinished nodes are discarded.
    pub replan: bool,
    /// A human node finished: completed with its output, or failed with its error.
    pub node: Option<NodeOutcome>,
    /// The run ends: its error (JSON), stored with the run.
    pub error: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Close {
    /// The pending request was answered.
    Resolved(String),
    /// Every pending request of the run is dropped: `superseded` (a replan) or `cancelled`.
    All(&'static str),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub request_id: String,
    /// `approved`, `rejected`, `submitted` or `declined`.
    pub decision: &'static str,
    pub feedback: Option<String>,
    /// A human task's output, or its decline.
    pub payload: Option<Value>,
    pub actor: Actor,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NodeOutcome {
    Completed { node_id: String, output: Value },
    Failed { node_id: String, error: Value },
}

/// Why a command cannot be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("run {0} not found")]
    NotFound(String),
    /// 409: the run is not in a status the command applies to.
    #[error("{message}")]
    InvalidState { status: RunStatus, message: String },
    /// 409: the caller saw another plan version.
    #[error("stale plan version: the run is at plan version {actual}, not {expected}")]
    StalePlanVersion { expected: u32, actual: u32 },
    /// 409: the request answered is not the pending one.
    #[error("request {request_id} is not pending; the run waits on {pending}")]
    StaleRequest { request_id: String, pending: String },
    /// 400: the body does not fit what the run waits for.
    #[error("{message}")]
    Mismatch { code: &'static str, message: String },
    /// 422: no replan is left.
    #[error("the run used all {limit} replans it is allowed")]
    ReplanLimit { limit: u32 },
    /// 409: the run is already planning.
    #[error("a planning task is already running for this run")]
    PlanningInProgress,
    /// 422 for replan: the status does not wait on an operator.
    #[error("{message}")]
    NotWaiting { status: RunStatus, message: String },
}

/// Works out what `command` does to the run in `state`. `violations` checks a human node's
/// submitted output against its contracts.
pub fn decide(
    state: &RunState,
    command: Command,
    now: DateTime<Utc>,
    violations: impl Fn(&str, &Value) -> Vec<SchemaViolation>,
) -> Result<Decision, Refusal> {
    match command {
        Command::Resume { expected_plan_version, answer, actor } => {
            resume(state, expected_plan_version, answer, actor, now, violations)
        }
        Command::Replan { feedback, actor } => replan(state, feedback, actor),
        Command::Cancel { stopped, actor } => cancel(state, stopped, actor),
    }
}

impl Decision {
    fn to(status: RunStatus) -> Self {
        Self { to: Some(status), ..Self::stay() }
    }

    /// Changes nothing yet: the run stays in its status.
    fn stay() -> Self {
        Self { to: None, events: Vec::new(), close: None, record: None, replan: false, node: None, error: None }
    }
}

fn resume(
    state: &RunState,
    expected_plan_version: Option<u32>,
    answer: Answer,
    actor: Actor,
    now: DateTime<Utc>,
    violations: impl Fn(&str, &Value) -> Vec<SchemaViolation>,
) -> Result<Decision, Refusal> {
    let waiting = matches!(state.status, RunStatus::AwaitingHitl | RunStatus::AwaitingHuman);
    let pending = state.pending.as_ref().filter(|_| waiting).ok_or_else(|| Refusal::InvalidState {
        status: state.status,
        message: format!("run {} is {}, not awaiting operator input", state.run_id, state.status),
    })?;
    if let Some(expected) = expected_plan_version.filter(|v| *v != state.plan_version) {
        return Err(Refusal::StalePlanVersion { expected, actual: state.plan_version });
    }
    match (pending.info.kind, answer) {
        (HitlKind::Approval, Answer::Decide { request_id, approved, feedback }) => {
            if let Some(request_id) = request_id.filter(|id| *id != pending.info.id) {
                return Err(Refusal::StaleRequest { request_id, pending: pending.info.id.clone() });
            }
            let mut decision = approval(state, pending, approved, feedback, actor);
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
        (HitlKind::Clarify, Answer::Decide { request_id, approved, feedback }) => {
            if let Some(request_id) = request_id.filter(|id| *id != pending.info.id) {
                return Err(Refusal::StaleRequest { request_id, pending: pending.info.id.clone() });
            }
            clarification(pending, approved, feedback, actor)
        }
        (HitlKind::Approval | HitlKind::Clarify, _) => Err(Refusal::Mismatch {
            code: "decision_required",
            message: format!("the run waits for a decision on request {}: send `decision`", pending.info.id),
        }),
        (HitlKind::HumanTask, _) => Err(Refusal::Mismatch {
            code: "human_payload_required",
            message: format!(
                "the run waits for the output of human node \"{}\": send `payload` with `output` or `decline`",
                pending.info.node_id.as_deref().unwrap_or_default()
            ),
        }),
    }
}

fn same_node(pending: &Pending, node_id: &str) -> Result<(), Refusal> {
    match pending.info.node_id.as_deref() {
        Some(waiting) if waiting == node_id => Ok(()),
        waiting => Err(Refusal::Mismatch {
            code: "wrong_node",
            message: format!("the run waits for human node \"{}\", not \"{node_id}\"", waiting.unwrap_or_default()),
        }),
    }
}

fn closed(pending: &Pending, status: &'static str) -> ClosedRequest {
    ClosedRequest { id: pending.info.id.clone(), kind: pending.info.kind, subject: pending.info.subject, status }
}

fn record(
    pending: &Pending,
    decision: &'static str,
    feedback: Option<String>,
    payload: Option<Value>,
    actor: &Actor,
) -> Record {
    Record { request_id: pending.info.id.clone(), decision, feedback, payload, actor: actor.clone() }
}

fn decision_info(decision: &'static str, feedback: Option<String>, actor: &Actor) -> DecisionInfo {
    DecisionInfo { decision, feedback, answer: None, operator: actor.operator.clone(), note: actor.note.clone() }
}

/// The `complete {status:"failed"}` frame and the stored error of a run an operator ended.
fn failed(code: &str, message: String, extra: Value) -> (Event, Value) {
    let mut error = json!({"code": code, "message": message});
    if let (Some(error), Some(extra)) = (error.as_object_mut(), extra.as_object()) {
        error.extend(extra.clone());
    }
    let complete = Event::Complete(Complete {
        status: CompleteStatus::Failed,
        output: Value::Null,
        goal_condition_results: None,
        error: Some(error.clone()),
        post_condition_results: Vec::new(),
    });
    (complete, error)
}

fn approval(state: &RunState, pending: &Pending, approved: bool, feedback: Option<String>, actor: Actor) -> Decision {
    let feedback = feedback.filter(|f| !f.trim().is_empty());
    let verdict = if approved { "approved" } else { "rejected" };
    // A policy's `rejectAction` decides what a rejection does; the coordinator carries it out.
    let follows_up = pending.info.subject == HitlSubject::Policy && !pending.info.context["rejectAction"].is_null();
    let replan = (!approved && !follows_up && feedback.is_some() && state.replans_left > 0)
        .then(|| ReplanInfo::operator("operator_rejected", feedback.clone()));
    let resolved = Event::HitlResolved(HitlResolved {
        request: closed(pending, "resolved"),
        decision: Some(decision_info(verdict, feedback.clone(), &actor)),
        replan: replan.clone(),
    });
    let mut decision = Decision::to(RunStatus::Running);
    decision.close = Some(Close::Resolved(pending.info.id.clone()));
    decision.record = Some(record(pending, verdict, feedback.clone(), None, &actor));
    decision.events.push(resolved);
    if approved || follows_up {
        return decision;
    }
    if replan.is_some() {
        decision.to = Some(RunStatus::Planning);
        decision.replan = true;
        return decision;
    }
    let why = match (&feedback, state.replans_left) {
        (Some(_), 0) => format!(" (no replan is left of {}, so the feedback cannot be planned for)", state.max_replans),
        _ => String::new(),
    };
    let subject = pending.info.subject.as_str();
    let (complete, error) = failed(
        "operator_rejected",
        format!("An operator rejected the {subject}{why}"),
        json!({"requestId": pending.info.id, "feedback": feedback, "note": actor.note}),
    );
    decision.to = Some(RunStatus::Failed);
    decision.events.push(complete);
    decision.error = Some(error);
    decision
}

/// An operator approved a policy request about an output that failed its capability's
/// post-conditions (`context.candidateOutput`): the node completes with that output.
fn accept_candidate(pending: &Pending, now: DateTime<Utc>, decision: &mut Decision) {
    let context = &pending.info.context;
    let (Some(output), Some(node_id)) = (context.get("candidateOutput"), pending.info.node_id.clone()) else {
        return;
    };
    let results = serde_json::from_value(context["postConditionResults"].clone()).unwrap_or_default();
    decision.events.push(Event::NodeComplete(NodeComplete {
        node_id: node_id.clone(),
        capability_id: pending.capability_id.clone(),
        label: pending.label.clone(),
        completed_at: now.to_rfc3339_opts(SecondsFormat::Millis, true),
        output: output.clone(),
        executor_type: None,
        post_condition_results: results,
    }));
    decision.node = Some(NodeOutcome::Completed { node_id, output: output.clone() });
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
        let mut decision = Decision::stay();
        decision.events = vec![
            Event::ValidationError(ValidationError {
                node_id: Some(node_id.clone()),
                scope: "capability_output",
                errors: problems,
            }),
            Event::NodeError(NodeError {
                node_id,
                capability_id: pending.capability_id.clone(),
                label: pending.label.clone(),
                error: ErrorInfo { code: HUMAN_OUTPUT_INVALID.into(), message },
            }),
        ];
        return decision;
    }
    let mut decision = Decision::to(RunStatus::Running);
    decision.close = Some(Close::Resolved(pending.info.id.clone()));
    decision.record = Some(record(pending, "submitted", None, Some(output.clone()), &actor));
    decision.events = vec![
        Event::HitlResolved(HitlResolved {
            request: closed(pending, "resolved"),
            decision: Some(decision_info("submitted", None, &actor)),
            replan: None,
        }),
        Event::NodeComplete(NodeComplete {
            node_id: node_id.clone(),
            capability_id: pending.capability_id.clone(),
            label: pending.label.clone(),
            completed_at: now.to_rfc3339_opts(SecondsFormat::Millis, true),
            output: output.clone(),
            executor_type: Some("human"),
            post_condition_results: Vec::new(),
        }),
    ];
    decision.node = Some(NodeOutcome::Completed { node_id, output });
    decision
}

/// The `node_error` code of a human submission that broke its contract: the run keeps waiting,
/// and a resumed run does not count it as the node's failure.
pub const HUMAN_OUTPUT_INVALID: &str = "human_output_invalid";

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
        code: "answer_required",
        message: format!(
            "request {} asks a question: send the answer as `decision.freeformText` (or `approved: false` to decline)",
            pending.info.id
        ),
    })?;
    let mut decision = Decision::to(RunStatus::Running);
    decision.close = Some(Close::Resolved(pending.info.id.clone()));
    decision.record = Some(record(pending, "answered", None, Some(json!({"answer": answer})), &actor));
    let info = DecisionInfo { answer: Some(answer), ..decision_info("answered", None, &actor) };
    decision.events.push(Event::HitlResolved(HitlResolved {
        request: closed(pending, "resolved"),
        decision: Some(info),
        replan: None,
    }));
    Ok(decision)
}

/// A human task declined, or a node's question left unanswered: the node fails, and the run.
fn refuse_node(pending: &Pending, code: &'static str, message: String, details: Value, actor: Actor) -> Decision {
    let node_id = pending.info.node_id.clone().unwrap_or_default();
    let mut node_error = json!({"code": code, "message": message});
    let mut run_error = json!({"nodeId": node_id, "capabilityId": pending.capability_id});
    for error in [&mut node_error, &mut run_error] {
        if let (Some(error), Some(details)) = (error.as_object_mut(), details.as_object()) {
            error.extend(details.clone());
        }
    }
    let (complete, error) = failed(code, format!("Node \"{node_id}\" failed: {message}"), run_error);
    let mut decision = Decision::to(RunStatus::Failed);
    decision.close = Some(Close::Resolved(pending.info.id.clone()));
    decision.record = Some(record(pending, "declined", None, Some(details), &actor));
    decision.events = vec![
        Event::HitlResolved(HitlResolved {
            request: closed(pending, "resolved"),
            decision: Some(decision_info("declined", None, &actor)),
            replan: None,
        }),
        Event::NodeError(NodeError {
            node_id: node_id.clone(),
            capability_id: pending.capability_id.clone(),
            label: pending.label.clone(),
            error: ErrorInfo { code: code.into(), message },
        }),
        complete,
    ];
    decision.node = Some(NodeOutcome::Failed { node_id, error: node_error });
    decision.error = Some(error);
    decision
}

fn replan(state: &RunState, feedback: Option<String>, actor: Actor) -> Result<Decision, Refusal> {
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
    if state.replans_left == 0 {
        return Err(Refusal::ReplanLimit { limit: state.max_replans });
    }
    let feedback = feedback.filter(|f| !f.trim().is_empty());
    let info = ReplanInfo::operator("operator_replan", feedback.clone());
    let mut decision = Decision::to(RunStatus::Planning);
    decision.replan = true;
    decision.close = Some(Close::All("superseded"));
    if let Some(pending) = &state.pending {
        decision.events.push(Event::HitlResolved(HitlResolved {
            request: closed(pending, "superseded"),
            decision: None,
            replan: None,
        }));
    }
    decision.events.push(Event::PolicyTriggered(PolicyTriggered {
        run_id: state.run_id.clone(),
        trigger: Trigger {
            reason: "operator_replan".into(),
            details: json!({"feedback": feedback, "operator": actor.operator, "note": actor.note}),
        },
        replan: info,
    }));
    Ok(decision)
}

fn cancel(state: &RunState, stopped: bool, actor: Actor) -> Result<Decision, Refusal> {
    if state.status == RunStatus::Cancelled && stopped {
        // This process's coordinator committed the cancellation.
        return Ok(Decision::stay());
    }
    if state.status.is_terminal() {
        return Err(Refusal::InvalidState {
            status: state.status,
            message: format!("run {} already ended: it is {}", state.run_id, state.status),
        });
    }
    let mut decision = Decision::to(RunStatus::Cancelled);
    decision.close = Some(Close::All("cancelled"));
    if let Some(pending) = &state.pending {
        decision.events.push(Event::HitlResolved(HitlResolved {
            request: closed(pending, "cancelled"),
            decision: None,
            replan: None,
        }));
    }
    let error = cancelled_error(&actor);
    decision.events.push(Event::Complete(Complete {
        status: CompleteStatus::Cancelled,
        output: Value::Null,
        goal_condition_results: None,
        error: Some(error.clone()),
        post_condition_results: Vec::new(),
    }));
    decision.error = Some(error);
    Ok(decision)
}

/// The error a cancelled run ends with.
pub fn cancelled_error(actor: &Actor) -> Value {
    json!({"code": "cancelled", "message": "An operator cancelled the run", "operator": actor.operator, "note": actor.note})
}

/// The question a pending request asks, by subject.
pub fn question(subject: HitlSubject, plan_version: u32) -> String {
    match subject {
        HitlSubject::Plan => format!("Approve plan version {plan_version} before any of its steps runs?"),
        HitlSubject::Completion => "Approve the run's result before it completes?".into(),
        HitlSubject::Node => "Submit this node's output, or decline the task.".into(),
        HitlSubject::Policy => "A runtime policy asks for an operator's approval.".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::FrameKind;

    fn pending(kind: HitlKind, subject: HitlSubject) -> Pending {
        Pending {
            info: HitlRequestInfo {
                id: "q1".into(),
                kind,
                subject,
                question: "?".into(),
                plan_version: 1,
                created_at: "t".into(),
                node_id: (kind != HitlKind::Approval).then(|| "review".to_string()),
                context: Value::Null,
            },
            capability_id: "human.review".into(),
            label: "Review".into(),
        }
    }

    fn state(status: RunStatus, pending: Option<Pending>, replans_left: u32) -> RunState {
        RunState { run_id: "r".into(), status, plan_version: 1, pending, replans_left, max_replans: 4 }
    }

    fn approval_state() -> RunState {
        state(RunStatus::AwaitingHitl, Some(pending(HitlKind::Approval, HitlSubject::Plan)), 2)
    }

    fn resume(answer: Answer) -> Command {
        Command::Resume { expected_plan_version: None, answer, actor: Actor::default() }
    }

    fn decide_now(state: &RunState, command: Command) -> Result<Decision, Refusal> {
        decide(state, command, Utc::now(), |_, output: &Value| {
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

    fn decide_answer(approved: bool, feedback: Option<&str>) -> Answer {
        Answer::Decide { request_id: Some("q1".into()), approved, feedback: feedback.map(String::from) }
    }

    #[test]
    fn approve_runs_on() {
        let d = decide_now(&approval_state(), resume(decide_answer(true, None))).unwrap();
        assert_eq!(d.to, Some(RunStatus::Running));
        assert_eq!(kinds(&d), [FrameKind::HitlResolved]);
        assert_eq!(d.close, Some(Close::Resolved("q1".into())));
        assert_eq!(d.record.as_ref().map(|r| r.decision), Some("approved"));
        assert!(!d.replan);
    }

    #[test]
    fn reject_fails_or_replans_with_feedback_when_replans_are_left() {
        let d = decide_now(&approval_state(), resume(decide_answer(false, None))).unwrap();
        assert_eq!(d.to, Some(RunStatus::Failed));
        assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::Complete]);
        assert_eq!(d.error.as_ref().unwrap()["code"], "operator_rejected");

        let d = decide_now(&approval_state(), resume(decide_answer(false, Some("shorter")))).unwrap();
        assert_eq!((d.to, d.replan), (Some(RunStatus::Planning), true));
        let Event::HitlResolved(resolved) = &d.events[0] else { panic!() };
        assert_eq!(resolved.replan, Some(ReplanInfo::operator("operator_rejected", Some("shorter".into()))));

        let spent = state(RunStatus::AwaitingHitl, Some(pending(HitlKind::Approval, HitlSubject::Plan)), 0);
        let d = decide_now(&spent, resume(decide_answer(false, Some("shorter")))).unwrap();
        assert_eq!(d.to, Some(RunStatus::Failed));
        assert!(d.error.unwrap()["message"].as_str().unwrap().contains("no replan is left"));
    }

    #[test]
    fn resume_checks_state_version_and_request() {
        let running = state(RunStatus::Running, None, 2);
        assert!(matches!(
            decide_now(&running, resume(decide_answer(true, None))),
            Err(Refusal::InvalidState { status: RunStatus::Running, .. })
        ));
        let stale = Command::Resume {
            expected_plan_version: Some(2),
            answer: decide_answer(true, None),
            actor: Actor::default(),
        };
        assert_eq!(
            decide_now(&approval_state(), stale).unwrap_err(),
            Refusal::StalePlanVersion { expected: 2, actual: 1 }
        );
        let other = Answer::Decide { request_id: Some("q0".into()), approved: true, feedback: None };
        assert!(matches!(decide_now(&approval_state(), resume(other)), Err(Refusal::StaleRequest { .. })));
        let output = Answer::Submit { node_id: "review".into(), output: json!({}) };
        assert!(matches!(
            decide_now(&approval_state(), resume(output)),
            Err(Refusal::Mismatch { code: "decision_required", .. })
        ));
    }

    #[test]
    fn human_output_is_checked_then_completes_the_node() {
        let waiting = state(RunStatus::AwaitingHuman, Some(pending(HitlKind::HumanTask, HitlSubject::Node)), 2);
        let bad = decide_now(&waiting, resume(Answer::Submit { node_id: "review".into(), output: json!({}) })).unwrap();
        assert_eq!((bad.to, bad.close.clone()), (None, None));
        assert_eq!(kinds(&bad), [FrameKind::ValidationError, FrameKind::NodeError]);

        let ok = json!({"ok": true});
        let good =
            decide_now(&waiting, resume(Answer::Submit { node_id: "review".into(), output: ok.clone() })).unwrap();
        assert_eq!(good.to, Some(RunStatus::Running));
        assert_eq!(kinds(&good), [FrameKind::HitlResolved, FrameKind::NodeComplete]);
        assert_eq!(good.node, Some(NodeOutcome::Completed { node_id: "review".into(), output: ok }));

        let wrong = Answer::Submit { node_id: "other".into(), output: json!({"ok": 1}) };
        assert!(matches!(decide_now(&waiting, resume(wrong)), Err(Refusal::Mismatch { code: "wrong_node", .. })));
        let approve = decide_now(&waiting, resume(decide_answer(true, None)));
        assert!(matches!(approve, Err(Refusal::Mismatch { code: "human_payload_required", .. })));
    }

    #[test]
    fn clarify_answer_runs_on_and_declining_fails_the_node() {
        let asked = state(RunStatus::AwaitingHitl, Some(pending(HitlKind::Clarify, HitlSubject::Node)), 2);
        let d = decide_now(&asked, resume(decide_answer(true, Some("EU only")))).unwrap();
        assert_eq!((d.to, d.replan, d.node.clone()), (Some(RunStatus::Running), false, None));
        let Event::HitlResolved(resolved) = &d.events[0] else { panic!("{:?}", kinds(&d)) };
        assert_eq!((resolved.decision.as_ref().unwrap().answer.as_deref()), Some("EU only"));
        assert_eq!(d.record.as_ref().map(|r| r.decision), Some("answered"));

        let empty = decide_now(&asked, resume(decide_answer(true, Some("  "))));
        assert!(matches!(empty, Err(Refusal::Mismatch { code: "answer_required", .. })));
        let submit = Answer::Submit { node_id: "review".into(), output: json!({"ok": 1}) };
        assert!(matches!(decide_now(&asked, resume(submit)), Err(Refusal::Mismatch { code: "decision_required", .. })));

        let d = decide_now(&asked, resume(decide_answer(false, Some("out of scope")))).unwrap();
        assert_eq!(d.to, Some(RunStatus::Failed));
        assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::NodeError, FrameKind::Complete]);
        assert_eq!(d.error.as_ref().unwrap()["code"], "clarification_declined");
        assert!(matches!(d.node, Some(NodeOutcome::Failed { .. })));
    }

    #[test]
    fn decline_fails_the_run() {
        let waiting = state(RunStatus::AwaitingHuman, Some(pending(HitlKind::HumanTask, HitlSubject::Node)), 2);
        let answer = Answer::Decline { node_id: "review".into(), reason: "no time".into(), note: None };
        let d = decide_now(&waiting, resume(answer)).unwrap();
        assert_eq!(d.to, Some(RunStatus::Failed));
        assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::NodeError, FrameKind::Complete]);
        assert_eq!(d.error.unwrap()["code"], "human_task_declined");
    }

    #[test]
    fn replan_rules() {
        let command = || Command::Replan { feedback: Some("again".into()), actor: Actor::default() };
        let d = decide_now(&approval_state(), command()).unwrap();
        assert_eq!((d.to, d.replan), (Some(RunStatus::Planning), true));
        assert_eq!(d.close, Some(Close::All("superseded")));
        assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::PolicyTriggered]);
        let planning = state(RunStatus::Planning, None, 2);
        assert_eq!(decide_now(&planning, command()).unwrap_err(), Refusal::PlanningInProgress);
        for status in [RunStatus::Running, RunStatus::Completed, RunStatus::Pending] {
            assert!(matches!(decide_now(&state(status, None, 2), command()), Err(Refusal::NotWaiting { .. })));
        }
        let spent = state(RunStatus::AwaitingHitl, Some(pending(HitlKind::Approval, HitlSubject::Plan)), 0);
        assert_eq!(decide_now(&spent, command()).unwrap_err(), Refusal::ReplanLimit { limit: 4 });
    }

    #[test]
    fn cancel_rules() {
        let command = |stopped| Command::Cancel { stopped, actor: Actor::default() };
        let d = decide_now(&approval_state(), command(false)).unwrap();
        assert_eq!(d.to, Some(RunStatus::Cancelled));
        assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::Complete]);
        assert_eq!(d.close, Some(Close::All("cancelled")));
        let completed = state(RunStatus::Completed, None, 2);
        assert!(matches!(decide_now(&completed, command(false)), Err(Refusal::InvalidState { .. })));
        let cancelled = state(RunStatus::Cancelled, None, 2);
        assert_eq!(decide_now(&cancelled, command(true)).unwrap().to, None);
        assert!(decide_now(&cancelled, command(false)).is_err());
    }
}
