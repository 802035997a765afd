//! The `runs` table. Status changes go through [`transition`], which asks the state machine in
//! [`crate::run::RunStatus`] and applies the change only if the run is still in the expected status.

use chrono::NaiveDateTime;
use diesel::prelude::*;

use super::fixed::{fixed, update};
use super::schema::runs;
use super::{DbConn, StoreError};
use crate::run::RunStatus;
use crate::run::budget::ReplanCounts;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = runs)]
pub struct RunRow {
    pub run_id: String,
    pub status: String,
    pub objective: String,
    pub envelope: String,
    pub thread_id: Option<String>,
    pub correlation_id: String,
    pub plan_version: i32,
    pub planner_attempts: i32,
    pub goal_condition_replans: i32,
    pub replans: i32,
    pub result: Option<String>,
    pub error: Option<String>,
    pub created_at: NaiveDateTime,
    pub updated_at: NaiveDateTime,
    /// `Idempotency-Key` of the request that created the run, scoped to its caller.
    pub idempotency_key: Option<String>,
    /// SHA-256 of that request's body (hex).
    pub request_hash: Option<String>,
    pub signal_replans: i32,
    pub policy_replans: i32,
    pub operator_replans: i32,
    pub post_condition_replans: i32,
}

impl RunRow {
    /// The run's replans, in total and by reason.
    pub fn replan_counts(&self) -> ReplanCounts {
        ReplanCounts {
            total: self.replans as u32,
            goal_condition: self.goal_condition_replans as u32,
            capability_signal: self.signal_replans as u32,
            runtime_policy: self.policy_replans as u32,
            operator: self.operator_replans as u32,
            post_condition: self.post_condition_replans as u32,
        }
    }

    pub fn status(&self) -> Result<RunStatus, StoreError> {
        self.status.parse().map_err(|e: crate::run::UnknownStatus| StoreError::Conflict(e.to_string()))
    }
}

/// The counters and plan version of a run, saved together whenever one of them changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, AsChangeset)]
#[diesel(table_name = runs)]
pub struct Progress {
    pub plan_version: i32,
    pub planner_attempts: i32,
    pub goal_condition_replans: i32,
    pub replans: i32,
    pub signal_replans: i32,
    pub policy_replans: i32,
    pub operator_replans: i32,
    pub post_condition_replans: i32,
}

impl Progress {
    pub fn new(plan_version: u32, planner_attempts: u32, replans: &ReplanCounts) -> Self {
        Self {
            plan_version: plan_version as i32,
            planner_attempts: planner_attempts as i32,
            goal_condition_replans: replans.goal_condition as i32,
            replans: replans.total as i32,
            signal_replans: replans.capability_signal as i32,
            policy_replans: replans.runtime_policy as i32,
            operator_replans: replans.operator as i32,
            post_condition_replans: replans.post_condition as i32,
        }
    }
}

pub fn insert(conn: &mut DbConn, row: &RunRow) -> Result<(), StoreError> {
    super::on_backend!(conn, |c| diesel::insert_into(runs::table).values(row).execute(c))?;
    Ok(())
}

pub fn get(conn: &mut DbConn, run_id: &str) -> Result<RunRow, StoreError> {
    super::on_backend!(conn, |c| runs::table.find(run_id).select(RunRow::as_select()).first(c))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("run {run_id}")))
}

/// The run created with this (scoped) idempotency key: its id and request hash.
pub fn by_idempotency_key(conn: &mut DbConn, key: &str) -> Result<Option<(String, Option<String>)>, StoreError> {
    Ok(super::on_backend!(conn, |c| runs::table
        .filter(runs::idempotency_key.eq(key))
        .select((runs::run_id, runs::request_hash))
        .first(c))
    .optional()?)
}

/// The runs a coordinator should be driving (`pending`, `planning`, `running`), oldest first.
pub fn active_ids(conn: &mut DbConn) -> Result<Vec<String>, StoreError> {
    let active: Vec<&str> = RunStatus::ALL.iter().filter(|s| s.is_active()).map(|s| s.as_str()).collect();
    Ok(super::on_backend!(conn, |c| runs::table
        .filter(runs::status.eq_any(&active))
        .order(runs::created_at)
        .select(runs::run_id)
        .load(c))?)
}

// Every update below has a fixed shape, so SQLite prepares it once per connection.

pub fn save_progress(conn: &mut DbConn, run_id: &str, progress: &Progress) -> Result<(), StoreError> {
    let statement = fixed!(update(runs::table, (progress, runs::updated_at.eq(super::now())), runs::run_id.eq(run_id)));
    super::on_backend!(conn, |c| statement.execute(c))?;
    Ok(())
}

/// Stores how a run ended: its final output and/or its error (JSON).
pub fn save_outcome(
    conn: &mut DbConn,
    run_id: &str,
    result: Option<&str>,
    error: Option<&str>,
) -> Result<(), StoreError> {
    let statement =
        fixed!(update(runs::table, (runs::result.eq(result), runs::error.eq(error)), runs::run_id.eq(run_id)));
    super::on_backend!(conn, |c| statement.execute(c))?;
    Ok(())
}

/// How a run ended: its final output (JSON) when it completed, its error (JSON) when it did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Result(String),
    Error(String),
}

/// Moves a run from `from` to `to` (saving `progress` in the same statement, if given) when the
/// state machine allows it and the run is still in `from`; otherwise nothing changes and the
/// error says why.
pub fn transition(
    conn: &mut DbConn,
    run_id: &str,
    from: RunStatus,
    to: RunStatus,
    progress: Option<&Progress>,
) -> Result<(), StoreError> {
    allowed(from, to)?;
    let run = runs::run_id.eq(run_id).and(runs::status.eq(from.as_str()));
    let status = (runs::status.eq(to.as_str()), runs::updated_at.eq(super::now()));
    let updated = match progress {
        Some(progress) => {
            let statement = fixed!(update(runs::table, (status, progress), run));
            super::on_backend!(conn, |c| statement.execute(c))?
        }
        None => {
            let statement = fixed!(update(runs::table, status, run));
            super::on_backend!(conn, |c| statement.execute(c))?
        }
    };
    moved(conn, run_id, from, updated)
}

/// [`transition`] to a terminal status, storing the run's `outcome` in the same statement.
pub fn end(
    conn: &mut DbConn,
    run_id: &str,
    from: RunStatus,
    to: RunStatus,
    outcome: &Outcome,
) -> Result<(), StoreError> {
    allowed(from, to)?;
    if !to.is_terminal() {
        return Err(StoreError::Conflict(format!("a run does not end in {to}")));
    }
    let (result, error) = match outcome {
        Outcome::Result(result) => (Some(result.as_str()), None),
        Outcome::Error(error) => (None, Some(error.as_str())),
    };
    let run = runs::run_id.eq(run_id).and(runs::status.eq(from.as_str()));
    let values = (
        runs::status.eq(to.as_str()),
        runs::updated_at.eq(super::now()),
        runs::result.eq(result),
        runs::error.eq(error),
    );
    let statement = fixed!(update(runs::table, values, run));
    let updated = super::on_backend!(conn, |c| statement.execute(c))?;
    moved(conn, run_id, from, updated)
}

fn allowed(from: RunStatus, to: RunStatus) -> Result<(), StoreError> {
    if from.can_become(to) { Ok(()) } else { Err(StoreError::Conflict(format!("a run cannot go from {from} to {to}"))) }
}

/// Whether the compare-and-set update of a run in `from` found it there.
fn moved(conn: &mut DbConn, run_id: &str, from: RunStatus, updated: usize) -> Result<(), StoreError> {
    if updated == 1 {
        return Ok(());
    }
    let actual = get(conn, run_id)?.status;
    Err(StoreError::Conflict(format!("run {run_id} is {actual}, not {from}")))
}

/// A page of runs, newest first: at most `limit` created before the run `before` (run ids are
/// UUIDv7, ordered by creation time), with `status` if given.
pub fn page(
    conn: &mut DbConn,
    status: Option<RunStatus>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<RunRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| {
        let mut query = runs::table.select(RunRow::as_select()).order(runs::run_id.desc()).limit(limit).into_boxed();
        if let Some(status) = status {
            query = query.filter(runs::status.eq(status.as_str()));
        }
        if let Some(before) = before {
            query = query.filter(runs::run_id.lt(before));
        }
        query.load(c)
    })?)
}
