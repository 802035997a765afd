//! Goal evaluations: one per plan version (the latest kept), with every condition's result and
//! observed value — what no frame carries whole (`goal_condition_failed` lists only the failing
//! conditions). A run's plans and nodes are on its frames, and read from there.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use flexrun_core::run::decide::goals::EvaluationStatus;

use super::prepared::{prepared, upsert};
use super::schema::run_outputs;
use super::stamp::Stamp;
use super::{DbConn, StoreError};

#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Insertable)]
#[diesel(table_name = run_outputs)]
pub struct RunOutputRow {
    pub run_id: String,
    pub plan_version: i32,
    pub status: EvaluationStatus,
    pub output: String,
    pub goal_condition_results: String,
    pub recorded_at: NaiveDateTime,
}

/// Records one goal evaluation (replacing an earlier one of the same plan version).
pub fn record(conn: &mut DbConn, row: &RunOutputRow) -> Result<(), StoreError> {
    let evaluation = (
        run_outputs::status.eq(row.status),
        run_outputs::output.eq(&row.output),
        run_outputs::goal_condition_results.eq(&row.goal_condition_results),
        run_outputs::recorded_at.eq(Stamp(row.recorded_at)),
    );
    let insert = diesel::insert_into(run_outputs::table).values(row);
    let key = &[run_outputs::run_id::NAME, run_outputs::plan_version::NAME];
    let upsert = prepared!(upsert(insert, key, evaluation));
    super::on_backend!(conn, |c| upsert.execute(c))?;
    Ok(())
}

pub fn of_run(conn: &mut DbConn, run_id: &str) -> Result<Vec<RunOutputRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| run_outputs::table
        .filter(run_outputs::run_id.eq(run_id))
        .order(run_outputs::plan_version)
        .select(RunOutputRow::as_select())
        .load(c))?)
}
