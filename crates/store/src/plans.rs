//! The nodes of every plan version with their execution state, and goal evaluations. (The plans
//! themselves are on the log's `plan_generated` frames, which is where readers take them from.)

use chrono::NaiveDateTime;
use diesel::prelude::*;
use flexrun_core::plan::StoredNodeStatus;
use flexrun_core::run::decide::goals::EvaluationStatus;

use super::prepared::{prepared, update, upsert};
use super::schema::{plan_nodes, run_outputs};
use super::stamp::Stamp;
use super::{DbConn, StoreError};

#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Insertable)]
#[diesel(table_name = plan_nodes, treat_none_as_default_value = false)]
pub struct PlanNodeRow {
    pub run_id: String,
    pub plan_version: i32,
    pub node_id: String,
    pub position: i32,
    pub capability_id: String,
    pub status: StoredNodeStatus,
    pub output: Option<String>,
    pub error: Option<String>,
    pub started_at: Option<NaiveDateTime>,
    pub completed_at: Option<NaiveDateTime>,
    /// The capability's post-condition results on the node's output (JSON array).
    pub post_condition_results: Option<String>,
}

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

/// Stores the nodes of a new plan version.
pub fn insert_nodes(conn: &mut DbConn, nodes: &[PlanNodeRow]) -> Result<(), StoreError> {
    for node in nodes {
        let statement = prepared!(diesel::insert_into(plan_nodes::table).values(node));
        super::on_backend!(conn, |c| statement.execute(c))?;
    }
    Ok(())
}

/// Marks a node started: `running`, or `awaiting_human` for a human node.
pub fn node_started(
    conn: &mut DbConn,
    (run_id, plan_version, node_id): (&str, i32, &str),
    status: StoredNodeStatus,
    at: NaiveDateTime,
) -> Result<(), StoreError> {
    let values = (plan_nodes::status.eq(status), plan_nodes::started_at.eq(Some(Stamp(at))));
    let statement = prepared!(update(plan_nodes::table, values, node(run_id, plan_version, node_id)));
    let updated = super::on_backend!(conn, |c| statement.execute(c))?;
    found(updated, node_id, plan_version)
}

/// Moves a started node to another unfinished status (`awaiting_hitl`: it asked a question).
pub fn node_waiting(
    conn: &mut DbConn,
    (run_id, plan_version, node_id): (&str, i32, &str),
    status: StoredNodeStatus,
) -> Result<(), StoreError> {
    let statement =
        prepared!(update(plan_nodes::table, plan_nodes::status.eq(status), node(run_id, plan_version, node_id)));
    let updated = super::on_backend!(conn, |c| statement.execute(c))?;
    found(updated, node_id, plan_version)
}

/// Stores a completed node's post-condition results (JSON).
pub fn node_post_conditions(
    conn: &mut DbConn,
    (run_id, plan_version, node_id): (&str, i32, &str),
    results: &str,
) -> Result<(), StoreError> {
    let statement = prepared!(update(
        plan_nodes::table,
        plan_nodes::post_condition_results.eq(Some(results)),
        node(run_id, plan_version, node_id)
    ));
    let updated = super::on_backend!(conn, |c| statement.execute(c))?;
    found(updated, node_id, plan_version)
}

/// Records how a node ended: `completed` with its output, or `failed` (or `cancelled`) with its
/// error (JSON).
pub fn node_finished(
    conn: &mut DbConn,
    (run_id, plan_version, node_id): (&str, i32, &str),
    status: StoredNodeStatus,
    output: Option<&str>,
    error: Option<&str>,
    at: NaiveDateTime,
) -> Result<(), StoreError> {
    let values = (
        plan_nodes::status.eq(status),
        plan_nodes::output.eq(output),
        plan_nodes::error.eq(error),
        plan_nodes::completed_at.eq(Some(Stamp(at))),
    );
    let statement = prepared!(update(plan_nodes::table, values, node(run_id, plan_version, node_id)));
    let updated = super::on_backend!(conn, |c| statement.execute(c))?;
    found(updated, node_id, plan_version)
}

type RunAndVersion<'a> =
    diesel::dsl::And<diesel::dsl::Eq<plan_nodes::run_id, &'a str>, diesel::dsl::Eq<plan_nodes::plan_version, i32>>;
type NodeRow<'a> = diesel::dsl::And<RunAndVersion<'a>, diesel::dsl::Eq<plan_nodes::node_id, &'a str>>;

/// The predicate selecting one node row.
fn node<'a>(run_id: &'a str, plan_version: i32, node_id: &'a str) -> NodeRow<'a> {
    plan_nodes::run_id.eq(run_id).and(plan_nodes::plan_version.eq(plan_version)).and(plan_nodes::node_id.eq(node_id))
}

fn found(updated: usize, node_id: &str, plan_version: i32) -> Result<(), StoreError> {
    if updated == 1 { Ok(()) } else { Err(StoreError::NotFound(format!("node {node_id} of plan v{plan_version}"))) }
}

pub fn nodes(conn: &mut DbConn, run_id: &str) -> Result<Vec<PlanNodeRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| plan_nodes::table
        .filter(plan_nodes::run_id.eq(run_id))
        .order((plan_nodes::plan_version, plan_nodes::position))
        .select(PlanNodeRow::as_select())
        .load(c))?)
}

/// The capability a node of a plan version runs, if the node exists.
pub fn capability_of(
    conn: &mut DbConn,
    (run_id, plan_version, node_id): (&str, i32, &str),
) -> Result<Option<String>, StoreError> {
    Ok(super::on_backend!(conn, |c| plan_nodes::table
        .find((run_id, plan_version, node_id))
        .select(plan_nodes::capability_id)
        .get_result(c))
    .optional()?)
}

/// Records one goal evaluation (replacing an earlier one of the same plan version).
pub fn record_output(conn: &mut DbConn, row: &RunOutputRow) -> Result<(), StoreError> {
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

pub fn outputs(conn: &mut DbConn, run_id: &str) -> Result<Vec<RunOutputRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| run_outputs::table
        .filter(run_outputs::run_id.eq(run_id))
        .order(run_outputs::plan_version)
        .select(RunOutputRow::as_select())
        .load(c))?)
}

/// Marks the nodes of a plan version that had not finished as `discarded` (an operator replan
/// dropped them); the version itself stays, as history.
pub fn discard_unfinished(conn: &mut DbConn, run_id: &str, plan_version: i32) -> Result<(), StoreError> {
    let unfinished = plan_nodes::run_id
        .eq(run_id)
        .and(plan_nodes::plan_version.eq(plan_version))
        .and(plan_nodes::status.eq_any(StoredNodeStatus::UNFINISHED));
    super::on_backend!(conn, |c| diesel::update(plan_nodes::table.filter(unfinished))
        .set(plan_nodes::status.eq(StoredNodeStatus::Discarded))
        .execute(c))?;
    Ok(())
}
