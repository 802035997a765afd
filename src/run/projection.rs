//! The rows that follow a run's log: which operator requests an event opens or closes. Pure:
//! [`project`] turns an event (and the run's state before it) into [`RowWrite`]s, which the log
//! writer executes in the transaction that appends the event. So every writer of a run — its
//! coordinator, an operator's command — changes the same rows for the same event, and the rows
//! never disagree with the log. The requests have rows of their own because the inbox lists the
//! open ones across runs; a run's nodes are read from its log alone
//! (`flexrun_core::run::nodes`).
//!
//! The run row itself (status, counters, outcome) follows the state, not single events: see
//! [`RunLog`](super::log::RunLog). What no frame carries — a goal evaluation's full results, an
//! operator's decision record — is written by the caller alongside (`RunLog::stage_rows`).

use chrono::NaiveDateTime;

use super::decide::goals::Evaluation;
use super::state::{At, RunState};
use crate::events::Event;
use crate::events::payload::*;
use crate::store::evaluations::{self, RunOutputRow};
use crate::store::hitl::{self, DecisionRow, RequestRow};
use crate::store::{DbConn, StoreError};

/// One change to a run's rows.
#[derive(Debug, Clone, PartialEq)]
pub enum RowWrite {
    OpenRequest(RequestRow),
    CloseRequest {
        request_id: String,
        status: RequestStatus,
        at: NaiveDateTime,
    },
    /// Every request still pending leaves `pending`.
    CloseAll {
        status: RequestStatus,
        at: NaiveDateTime,
    },
    Decision(DecisionRow),
    Evaluation(RunOutputRow),
}

/// The rows `event` (at `at`) changes, given the run's state before it.
pub fn project(state: &RunState, at: At, event: &Event) -> Vec<RowWrite> {
    let now = at.timestamp.naive_utc();
    match event {
        Event::NodeStart(start) => start
            .task(state.plan_version())
            .map(|task| RowWrite::OpenRequest(request_row(state.run_id.as_str(), &task, now)))
            .into_iter()
            .collect(),
        Event::HitlRequest(request) => {
            vec![RowWrite::OpenRequest(request_row(state.run_id.as_str(), &request.request, now))]
        }
        Event::HitlResolved(resolved) => vec![RowWrite::CloseRequest {
            request_id: resolved.request.id.clone(),
            status: resolved.request.status,
            at: now,
        }],
        Event::PolicyTriggered(_) => close_open(state, RequestStatus::Superseded, now).into_iter().collect(),
        // Nobody answers a request of a run that ended.
        Event::Complete(_) => close_open(state, RequestStatus::Cancelled, now).into_iter().collect(),
        // No row follows them: the run's nodes are read from its log (`flexrun_core::run::nodes`).
        Event::Start(_)
        | Event::PlanRequested(_)
        | Event::PlanGenerated(_)
        | Event::PlanRejected(_)
        | Event::PlanUpdated(_)
        | Event::NodeComplete(_)
        | Event::NodeError(_)
        | Event::ValidationError(_)
        | Event::GoalConditionFailed(_)
        | Event::PolicyUpdate(_)
        | Event::BudgetExceeded(_)
        | Event::Log(_)
        | Event::Retry(_) => Vec::new(),
    }
}

/// Every request still open leaves `pending` (nothing to write when none is).
fn close_open(state: &RunState, status: RequestStatus, at: NaiveDateTime) -> Option<RowWrite> {
    (!state.requests.is_empty()).then_some(RowWrite::CloseAll { status, at })
}

/// The stored form of a request a run makes.
pub fn request_row(run_id: &str, info: &HitlRequestInfo, now: NaiveDateTime) -> RequestRow {
    RequestRow {
        request_id: info.id.clone(),
        run_id: run_id.to_string(),
        kind: info.kind,
        subject: info.subject.as_str().into(),
        plan_version: stored(info.plan_version),
        node_id: info.node_id.clone(),
        question: info.question.clone(),
        details: to_json(info),
        status: RequestStatus::Pending,
        created_at: now,
        closed_at: None,
    }
}

/// A count or version as the database's 32-bit columns hold it (versions and counts of a run
/// never come near the limit; should one, it is stored as the largest number, not wrapped).
pub fn stored(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl RowWrite {
    /// A goal evaluation of run `run_id`, as `run_outputs` keeps it.
    pub fn evaluation(run_id: &str, evaluation: Evaluation) -> Self {
        Self::Evaluation(RunOutputRow {
            run_id: run_id.to_string(),
            plan_version: stored(evaluation.plan_version),
            status: evaluation.status,
            output: evaluation.output_json,
            goal_condition_results: evaluation.results_json,
            recorded_at: evaluation.at.naive_utc(),
        })
    }
}

/// A value's JSON text, fields in their declared order.
fn to_json(value: &impl serde::Serialize) -> String {
    // Serialising fails only for maps with non-string keys, which these types do not have.
    serde_json::to_string(value).unwrap_or_default()
}

impl RowWrite {
    /// Applies this change to run `run_id`'s rows.
    pub fn execute(&self, conn: &mut DbConn, run_id: &str) -> Result<(), StoreError> {
        match self {
            Self::OpenRequest(row) => hitl::insert(conn, row),
            Self::CloseRequest { request_id, status, at } => hitl::close(conn, request_id, *status, *at),
            Self::CloseAll { status, at } => hitl::close_all(conn, run_id, *status, *at),
            Self::Decision(row) => hitl::decide(conn, row),
            Self::Evaluation(row) => evaluations::record(conn, row),
        }
    }
}
