//! The `runs` table. A status change is a compare-and-set ([`transition`], [`end`]): it applies
//! only if the run is still in the status its writer expects, so of two writers only one wins.
//! Which changes are allowed is the run's state machine's to say (`run::status`), not the store's.

use chrono::NaiveDateTime;
use diesel::prelude::*;

use super::prepared::{prepared, update};
use super::schema::runs;
use super::stamp::Stamp;
use super::{DbConn, StoreError};
use flexrun_core::run::RunStatus;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = runs, treat_none_as_default_value = false)]
pub struct RunRow {
    pub run_id: String,
    pub status: RunStatus,
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
    /// The principal that started the run (`None` for runs stored before runs had owners).
    pub owner: Option<String>,
    /// The run this one was started again from (`metadata.rerunOf`).
    pub parent_run_id: Option<String>,
    /// The replan cap the run was started with (its `start` frame's); `None` for runs stored
    /// before `start` recorded it.
    pub max_replans: Option<i32>,
    /// The run's model usage in all (JSON); `None` for runs stored before it was recorded.
    pub usage: Option<String>,
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
    /// `row` with these counters.
    pub fn stamp(&self, row: RunRow) -> RunRow {
        RunRow {
            plan_version: self.plan_version,
            planner_attempts: self.planner_attempts,
            goal_condition_replans: self.goal_condition_replans,
            replans: self.replans,
            signal_replans: self.signal_replans,
            policy_replans: self.policy_replans,
            operator_replans: self.operator_replans,
            post_condition_replans: self.post_condition_replans,
            ..row
        }
    }
}

pub fn insert(conn: &mut DbConn, row: &RunRow) -> Result<(), StoreError> {
    let statement = prepared!(diesel::insert_into(runs::table).values(row));
    super::on_backend!(conn, |c| statement.execute(c))?;
    Ok(())
}

pub fn get(conn: &mut DbConn, run_id: &str) -> Result<RunRow, StoreError> {
    super::on_backend!(conn, |c| runs::table.find(run_id).select(RunRow::as_select()).get_result(c))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("run {run_id}")))
}

/// The run created with this (scoped) idempotency key: its id and request hash.
pub fn by_idempotency_key(conn: &mut DbConn, key: &str) -> Result<Option<(String, Option<String>)>, StoreError> {
    Ok(super::on_backend!(conn, |c| runs::table
        .filter(runs::idempotency_key.eq(key))
        .select((runs::run_id, runs::request_hash))
        .get_result(c))
    .optional()?)
}

/// The ids of runs in one of `statuses`, oldest first.
pub fn ids_with_status(conn: &mut DbConn, statuses: &[RunStatus]) -> Result<Vec<String>, StoreError> {
    Ok(super::on_backend!(conn, |c| runs::table
        .filter(runs::status.eq_any(statuses))
        .order(runs::created_at)
        .select(runs::run_id)
        .load(c))?)
}

// Every update below has a fixed shape, so SQLite prepares it once per connection.

pub fn save_progress(conn: &mut DbConn, run_id: &str, progress: &Progress, usage: &str) -> Result<(), StoreError> {
    let values = (progress, runs::usage.eq(usage), runs::updated_at.eq(Stamp::now()));
    let statement = prepared!(update(runs::table, values, runs::run_id.eq(run_id)));
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
        prepared!(update(runs::table, (runs::result.eq(result), runs::error.eq(error)), runs::run_id.eq(run_id)));
    super::on_backend!(conn, |c| statement.execute(c))?;
    Ok(())
}

/// How a run ended: its final output (JSON) when it completed, its error (JSON) when it did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Result(String),
    Error(String),
}

/// Moves a run from status `from` to `to` (saving `progress` in the same statement, if given,
/// and its `usage` in all) if it is still in `from`; otherwise nothing changes and the error says
/// where it is.
pub fn transition(
    conn: &mut DbConn,
    run_id: &str,
    from: RunStatus,
    to: RunStatus,
    progress: Option<&Progress>,
    usage: &str,
) -> Result<(), StoreError> {
    let run = runs::run_id.eq(run_id).and(runs::status.eq(from));
    let status = (runs::status.eq(to), runs::usage.eq(usage), runs::updated_at.eq(Stamp::now()));
    let updated = match progress {
        Some(progress) => {
            let statement = prepared!(update(runs::table, (status, progress), run));
            super::on_backend!(conn, |c| statement.execute(c))?
        }
        None => {
            let statement = prepared!(update(runs::table, status, run));
            super::on_backend!(conn, |c| statement.execute(c))?
        }
    };
    moved(conn, run_id, from, updated)
}

/// [`transition`] to the status a run ends in, storing its `outcome` and its final `usage` in the
/// same statement.
pub fn end(
    conn: &mut DbConn,
    run_id: &str,
    from: RunStatus,
    to: RunStatus,
    outcome: &Outcome,
    usage: &str,
) -> Result<(), StoreError> {
    let (result, error) = match outcome {
        Outcome::Result(result) => (Some(result.as_str()), None),
        Outcome::Error(error) => (None, Some(error.as_str())),
    };
    let run = runs::run_id.eq(run_id).and(runs::status.eq(from));
    let values = (
        runs::status.eq(to),
        runs::updated_at.eq(Stamp::now()),
        runs::result.eq(result),
        runs::error.eq(error),
        runs::usage.eq(usage),
    );
    let statement = prepared!(update(runs::table, values, run));
    let updated = super::on_backend!(conn, |c| statement.execute(c))?;
    moved(conn, run_id, from, updated)
}

/// Whether the compare-and-set update of a run in `from` found it there.
fn moved(conn: &mut DbConn, run_id: &str, from: RunStatus, updated: usize) -> Result<(), StoreError> {
    if updated == 1 {
        return Ok(());
    }
    let actual = get(conn, run_id)?.status;
    Err(StoreError::Conflict(format!("run {run_id} is {actual}, not {from}")))
}

/// Which runs a page shows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Filter<'a> {
    pub status: Option<RunStatus>,
    /// Only the runs this principal started.
    pub owner: Option<&'a str>,
    /// Only the runs whose objective contains this text (ASCII letters in any case).
    pub objective_contains: Option<&'a str>,
    /// Only the runs created at or after this time.
    pub created_from: Option<NaiveDateTime>,
    /// Only the runs created before this time.
    pub created_before: Option<NaiveDateTime>,
    /// Only this run (does it pass the other filters?).
    pub run_id: Option<&'a str>,
}

/// The runs started again (or forked) from `run_id`, oldest first, at most `limit` — with
/// `owner`, only that principal's. The owner is filtered here, before the limit: any caller may
/// name any run as the one its run starts again (`metadata.rerunOf`), and runs filtered after
/// the limit could crowd the reader's own out of it.
pub fn reruns_of(conn: &mut DbConn, run_id: &str, owner: Option<&str>, limit: i64) -> Result<Vec<String>, StoreError> {
    Ok(super::on_backend!(conn, |c| {
        let mut query =
            runs::table.filter(runs::parent_run_id.eq(run_id)).order(runs::run_id).limit(limit).into_boxed();
        if let Some(owner) = owner {
            query = query.filter(runs::owner.eq(owner));
        }
        query.select(runs::run_id).load(c)
    })?)
}

/// The objectives of the runs `ids`, by run id.
pub fn objectives(conn: &mut DbConn, ids: &[String]) -> Result<Vec<(String, String)>, StoreError> {
    Ok(super::on_backend!(conn, |c| {
        runs::table.filter(runs::run_id.eq_any(ids)).select((runs::run_id, runs::objective)).load(c)
    })?)
}

/// A `LIKE` pattern matching any text that contains `text` (its `%`, `_` and `\\` taken
/// literally).
fn like_pattern(text: &str) -> String {
    let escaped = text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
    format!("%{escaped}%")
}

/// A page of runs, newest first: at most `limit` created before the run `before` (run ids are
/// UUIDv7, ordered by creation time), those `filter` keeps.
pub fn page(
    conn: &mut DbConn,
    filter: Filter<'_>,
    before: Option<&str>,
    limit: i64,
) -> Result<Vec<RunRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| {
        let mut query = runs::table.select(RunRow::as_select()).order(runs::run_id.desc()).limit(limit).into_boxed();
        if let Some(status) = filter.status {
            query = query.filter(runs::status.eq(status));
        }
        if let Some(owner) = filter.owner {
            query = query.filter(runs::owner.eq(owner));
        }
        if let Some(before) = before {
            query = query.filter(runs::run_id.lt(before));
        }
        if let Some(text) = filter.objective_contains {
            query = query.filter(runs::objective.like(like_pattern(text)).escape('\\'));
        }
        if let Some(from) = filter.created_from {
            query = query.filter(runs::created_at.ge(from));
        }
        if let Some(before) = filter.created_before {
            query = query.filter(runs::created_at.lt(before));
        }
        if let Some(run_id) = filter.run_id {
            query = query.filter(runs::run_id.eq(run_id));
        }
        query.load(c)
    })?)
}
