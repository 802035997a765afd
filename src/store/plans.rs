//! Plan versions (every version kept), their nodes' execution state, and goal evaluations.

use chrono::NaiveDateTime;
use diesel::prelude::*;

use super::schema::{plan_nodes, plan_versions, run_outputs};
use super::{DbConn, StoreError};

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = plan_versions)]
pub struct PlanVersionRow {
    pub run_id: String,
    pub version: i32,
    pub plan: String,
    pub replan_trigger: Option<String>,
    pub created_at: NaiveDateTime,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = plan_nodes)]
pub struct PlanNodeRow {
    pub run_id: String,
    pub plan_version: i32,
    pub node_id: String,
    pub position: i32,
    pub capability_id: String,
    pub status: String,
    pub output: Option<String>,
    pub error: Option<String>,
    pub started_at: Option<NaiveDateTime>,
    pub completed_at: Option<NaiveDateTime>,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = run_outputs)]
pub struct RunOutputRow {
    pub run_id: String,
    pub plan_version: i32,
    pub status: String,
    pub output: String,
    pub goal_condition_results: String,
    pub recorded_at: NaiveDateTime,
}

/// Stores a new plan version with its nodes.
pub fn insert_version(conn: &mut DbConn, version: &PlanVersionRow, nodes: &[PlanNodeRow]) -> Result<(), StoreError> {
    diesel::insert_into(plan_versions::table).values(version).execute(conn)?;
    for node in nodes {
        diesel::insert_into(plan_nodes::table).values(node).execute(conn)?;
    }
    Ok(())
}

/// Execution-state columns of one node; `None` leaves a column unchanged.
#[derive(Debug, Clone, Default, AsChangeset)]
#[diesel(table_name = plan_nodes)]
pub struct NodeChange {
    pub status: Option<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub started_at: Option<NaiveDateTime>,
    pub completed_at: Option<NaiveDateTime>,
}

pub fn update_node(
    conn: &mut DbConn,
    run_id: &str,
    plan_version: i32,
    node_id: &str,
    change: &NodeChange,
) -> Result<(), StoreError> {
    let updated = diesel::update(plan_nodes::table.find((run_id, plan_version, node_id))).set(change).execute(conn)?;
    if updated == 1 { Ok(()) } else { Err(StoreError::NotFound(format!("node {node_id} of plan v{plan_version}"))) }
}

pub fn versions(conn: &mut DbConn, run_id: &str) -> Result<Vec<PlanVersionRow>, StoreError> {
    Ok(plan_versions::table
        .filter(plan_versions::run_id.eq(run_id))
        .order(plan_versions::version)
        .select(PlanVersionRow::as_select())
        .load(conn)?)
}

pub fn nodes(conn: &mut DbConn, run_id: &str) -> Result<Vec<PlanNodeRow>, StoreError> {
    Ok(plan_nodes::table
        .filter(plan_nodes::run_id.eq(run_id))
        .order((plan_nodes::plan_version, plan_nodes::position))
        .select(PlanNodeRow::as_select())
        .load(conn)?)
}

/// Records one goal evaluation (replacing an earlier one of the same plan version).
pub fn record_output(conn: &mut DbConn, row: &RunOutputRow) -> Result<(), StoreError> {
    diesel::delete(run_outputs::table.find((&row.run_id, row.plan_version))).execute(conn)?;
    diesel::insert_into(run_outputs::table).values(row).execute(conn)?;
    Ok(())
}

pub fn outputs(conn: &mut DbConn, run_id: &str) -> Result<Vec<RunOutputRow>, StoreError> {
    Ok(run_outputs::table
        .filter(run_outputs::run_id.eq(run_id))
        .order(run_outputs::plan_version)
        .select(RunOutputRow::as_select())
        .load(conn)?)
}
