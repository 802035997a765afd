//! The `runs` table. Status changes go through [`transition`], which asks the state machine in
//! [`crate::run::RunStatus`] and applies the change only if the run is still in the expected status.

use chrono::NaiveDateTime;
use diesel::prelude::*;

use super::schema::runs;
use super::{DbConn, StoreError};
use crate::run::RunStatus;

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
    pub context: String,
    pub result: Option<String>,
    pub error: Option<String>,
    pub created_at: NaiveDateTime,
    pub updated_at: NaiveDateTime,
}

impl RunRow {
    pub fn status(&self) -> Result<RunStatus, StoreError> {
        self.status.parse().map_err(|e: crate::run::UnknownStatus| StoreError::Conflict(e.to_string()))
    }
}

/// Columns a coordinator updates as a run progresses; `None` leaves a column unchanged.
#[derive(Debug, Clone, Default, PartialEq, AsChangeset)]
#[diesel(table_name = runs)]
pub struct RunChange {
    pub plan_version: Option<i32>,
    pub planner_attempts: Option<i32>,
    pub goal_condition_replans: Option<i32>,
    pub replans: Option<i32>,
    pub context: Option<String>,
    pub result: Option<String>,
    pub error: Option<String>,
}

pub fn insert(conn: &mut DbConn, row: &RunRow) -> Result<(), StoreError> {
    diesel::insert_into(runs::table).values(row).execute(conn)?;
    Ok(())
}

pub fn get(conn: &mut DbConn, run_id: &str) -> Result<RunRow, StoreError> {
    runs::table
        .find(run_id)
        .select(RunRow::as_select())
        .first(conn)
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("run {run_id}")))
}

/// Applies `change` without touching the status.
pub fn update(conn: &mut DbConn, run_id: &str, change: &RunChange) -> Result<(), StoreError> {
    diesel::update(runs::table.find(run_id)).set((change, runs::updated_at.eq(super::now()))).execute(conn)?;
    Ok(())
}

/// Moves a run from `from` to `to` (and applies `change`) if the state machine allows it and the
/// run is still in `from`; otherwise nothing changes and the error says why.
pub fn transition(
    conn: &mut DbConn,
    run_id: &str,
    from: RunStatus,
    to: RunStatus,
    change: &RunChange,
) -> Result<(), StoreError> {
    if !from.can_become(to) {
        return Err(StoreError::Conflict(format!("a run cannot go from {from} to {to}")));
    }
    let updated = diesel::update(runs::table.find(run_id).filter(runs::status.eq(from.as_str())))
        .set((runs::status.eq(to.as_str()), change, runs::updated_at.eq(super::now())))
        .execute(conn)?;
    if updated == 1 {
        return Ok(());
    }
    let actual = get(conn, run_id)?.status;
    Err(StoreError::Conflict(format!("run {run_id} is {actual}, not {from}")))
}
