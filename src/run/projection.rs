//! The tables that follow a run's log: which rows an event changes. Pure: [`project`] turns an
//! event (and the run's state before it) into [`RowWrite`]s, which the log writer executes in
//! the transaction that appends the event. So every writer of a run — its coordinator, an
//! operator's command — changes the same rows for the same event, and the rows never disagree
//! with the log.
//!
//! The run row itself (status, counters, outcome) follows the state, not single events: see
//! [`RunLog`](super::log::RunLog). What no frame carries — a goal evaluation's full results, an
//! operator's decision record, a declined task's details — is written by the caller alongside
//! (`RunLog::stage_rows`).

use chrono::NaiveDateTime;
use serde_json::json;

use super::decide::goals::Evaluation;
use super::state::{At, RunState};
use crate::events::Event;
use crate::events::payload::*;
use crate::plan::{NodeStatus, Plan, StoredNodeStatus};
use crate::store::hitl::{self, DecisionRow, RequestRow};
use crate::store::plans::{self, PlanNodeRow, RunOutputRow};
use crate::store::{DbConn, StoreError};

/// One change to a run's rows.
#[derive(Debug, Clone, PartialEq)]
pub enum RowWrite {
    /// The nodes of a new plan version (the plan itself is on its `plan_generated` frame).
    Plan {
        nodes: Vec<PlanNodeRow>,
    },
    NodeStarted {
        version: i32,
        node_id: String,
        status: NodeStatus,
        at: NaiveDateTime,
    },
    /// A started node goes back to waiting (`awaiting_hitl`: it asked; `pending`: it runs again).
    NodeWaiting {
        version: i32,
        node_id: String,
        status: NodeStatus,
    },
    NodeCompleted {
        version: i32,
        node_id: String,
        output: String,
        post_conditions: Option<String>,
        at: NaiveDateTime,
    },
    /// `status`: `failed`, or `cancelled` when the run was cancelled under it.
    NodeEnded {
        version: i32,
        node_id: String,
        status: StoredNodeStatus,
        error: String,
        at: NaiveDateTime,
    },
    /// A replan drops the unfinished nodes of a version.
    DiscardUnfinished {
        version: i32,
    },
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
    let version = stored(state.plan_version());
    match event {
        Event::PlanGenerated(generated) => vec![plan_rows(state, &generated.plan.plan, now)],
        Event::NodeStart(start) => {
            let task = start.task(state.plan_version());
            let status = if task.is_some() { NodeStatus::AwaitingHuman } else { NodeStatus::Running };
            let mut rows = vec![RowWrite::NodeStarted { version, node_id: start.node_id.clone(), status, at: now }];
            rows.extend(task.map(|task| RowWrite::OpenRequest(request_row(state.run_id.as_str(), &task, now))));
            rows
        }
        Event::NodeComplete(complete) => vec![RowWrite::NodeCompleted {
            version,
            node_id: complete.node_id.clone(),
            output: complete.output.to_string(),
            post_conditions: (!complete.post_condition_results.is_empty())
                .then(|| to_json(&complete.post_condition_results)),
            at: now,
        }],
        Event::NodeError(error) if error.error.code != HUMAN_OUTPUT_INVALID => vec![RowWrite::NodeEnded {
            version,
            node_id: error.node_id.clone(),
            status: if error.error.code == CANCELLED { StoredNodeStatus::Cancelled } else { NodeStatus::Failed.into() },
            error: json!({"code": error.error.code, "message": error.error.message}).to_string(),
            at: now,
        }],
        Event::HitlRequest(request) => {
            let info = &request.request;
            let mut rows = vec![RowWrite::OpenRequest(request_row(state.run_id.as_str(), info, now))];
            if let (HitlKind::Clarify, Some(node_id)) = (info.kind, &info.node_id) {
                rows.push(RowWrite::NodeWaiting {
                    version,
                    node_id: node_id.clone(),
                    status: NodeStatus::AwaitingHitl,
                });
            }
            rows
        }
        Event::HitlResolved(resolved) => {
            let mut rows = vec![RowWrite::CloseRequest {
                request_id: resolved.request.id.clone(),
                status: resolved.request.status,
                at: now,
            }];
            if resolved.replan.is_some() {
                rows.push(RowWrite::DiscardUnfinished { version });
            }
            rows
        }
        Event::PolicyTriggered(_) => {
            let mut rows = vec![RowWrite::DiscardUnfinished { version }];
            rows.extend(close_open(state, RequestStatus::Superseded, now));
            rows
        }
        Event::PolicyUpdate(update) => update
            .reset_nodes
            .iter()
            .map(|node_id| RowWrite::NodeWaiting { version, node_id: node_id.clone(), status: NodeStatus::Pending })
            .collect(),
        Event::BudgetExceeded(exceeded) => exceeded
            .held_nodes
            .iter()
            .map(|node_id| RowWrite::NodeWaiting { version, node_id: node_id.clone(), status: NodeStatus::Pending })
            .collect(),
        // Nobody answers a request of a run that ended.
        Event::Complete(_) => close_open(state, RequestStatus::Cancelled, now).into_iter().collect(),
        // No row follows them (a human task's invalid output leaves the node waiting).
        Event::Start(_)
        | Event::PlanRequested(_)
        | Event::PlanRejected(_)
        | Event::PlanUpdated(_)
        | Event::NodeError(_)
        | Event::ValidationError(_)
        | Event::GoalConditionFailed(_)
        | Event::Log(_)
        | Event::Retry(_) => Vec::new(),
    }
}

/// Every request still open leaves `pending` (nothing to write when none is).
fn close_open(state: &RunState, status: RequestStatus, at: NaiveDateTime) -> Option<RowWrite> {
    (!state.requests.is_empty()).then_some(RowWrite::CloseAll { status, at })
}

/// The nodes of a new plan version; a node carried over completed keeps its output.
fn plan_rows(state: &RunState, plan: &Plan, now: NaiveDateTime) -> RowWrite {
    let nodes = plan
        .nodes
        .iter()
        .enumerate()
        .map(|(position, node)| {
            let carried = state.output_of(&node.id).filter(|_| node.status == NodeStatus::Completed);
            PlanNodeRow {
                run_id: state.run_id.to_string(),
                plan_version: stored(plan.version),
                node_id: node.id.to_string(),
                position: i32::try_from(position).unwrap_or(i32::MAX),
                capability_id: node.capability_id.clone(),
                status: node.status.into(),
                output: carried.map(|output| output.to_string()),
                error: None,
                started_at: None,
                completed_at: carried.map(|_| now),
                post_condition_results: None,
            }
        })
        .collect();
    RowWrite::Plan { nodes }
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
            Self::Plan { nodes } => plans::insert_nodes(conn, nodes),
            Self::NodeStarted { version, node_id, status, at } => {
                plans::node_started(conn, (run_id, *version, node_id), (*status).into(), *at)
            }
            Self::NodeWaiting { version, node_id, status } => {
                plans::node_waiting(conn, (run_id, *version, node_id), (*status).into())
            }
            Self::NodeCompleted { version, node_id, output, post_conditions, at } => {
                let key = (run_id, *version, node_id.as_str());
                plans::node_finished(conn, key, NodeStatus::Completed.into(), Some(output), None, *at)?;
                match post_conditions {
                    Some(results) => plans::node_post_conditions(conn, key, results),
                    None => Ok(()),
                }
            }
            Self::NodeEnded { version, node_id, status, error, at } => {
                plans::node_finished(conn, (run_id, *version, node_id), *status, None, Some(error), *at)
            }
            Self::DiscardUnfinished { version } => plans::discard_unfinished(conn, run_id, *version),
            Self::OpenRequest(row) => hitl::insert(conn, row),
            Self::CloseRequest { request_id, status, at } => hitl::close(conn, request_id, *status, *at),
            Self::CloseAll { status, at } => hitl::close_all(conn, run_id, *status, *at),
            Self::Decision(row) => hitl::decide(conn, row),
            Self::Evaluation(row) => plans::record_output(conn, row),
        }
    }
}
