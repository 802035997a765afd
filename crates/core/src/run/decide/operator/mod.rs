//! What operators do to a run that waits for them: approve or reject a request, submit or decline
//! a human task, answer a question, replan, cancel. [`decide`] works out what a command does from
//! the run's state (pure: no I/O, unit-tested here); the caller records the [`Decision`] through
//! the run's log, whose state then says where the run went.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::contract::SchemaViolation;
use crate::error_code::ErrorCode;
use crate::events::Event;
use crate::events::payload::*;
use crate::replan_budget::ReplanLimits;
use crate::run::operator::{Actor, Answer, Command};
use crate::run::state::RunState;
use crate::run::status::RunStatus;

mod answer;
mod whole_run;

use answer::{accept_candidate, approval, budget_answer, clarification, decline, submission};
use whole_run::{cancel, replan};

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
        self.limits.replans_left(&self.state.replans)
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
        (HitlKind::HumanTask, Answer::Submit { request_id, node_id, output }) => {
            same_request(pending, request_id)?;
            same_node(pending, &node_id)?;
            Ok(submission(pending, output, actor, now, violations))
        }
        (HitlKind::HumanTask, Answer::Decline { request_id, node_id, reason, note }) => {
            same_request(pending, request_id)?;
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
mod tests;
