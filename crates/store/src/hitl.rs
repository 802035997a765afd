//! Operator requests (`hitl_requests`) and the decisions that answered them (`hitl_decisions`).
//! A request leaves `pending` only through [`close`], a conditional update, so of two operators
//! answering the same request exactly one succeeds.

use chrono::NaiveDateTime;
use diesel::prelude::*;

use flexrun_core::events::payload::{HitlKind, RequestStatus, Verdict};

use super::schema::{hitl_decisions, hitl_requests, runs};
use super::{DbConn, StoreError};

#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Insertable)]
#[diesel(table_name = hitl_requests)]
pub struct RequestRow {
    pub request_id: String,
    pub run_id: String,
    pub kind: HitlKind,
    pub subject: String,
    pub plan_version: i32,
    pub node_id: Option<String>,
    pub question: String,
    pub details: String,
    pub status: RequestStatus,
    pub created_at: NaiveDateTime,
    pub closed_at: Option<NaiveDateTime>,
}

#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Insertable)]
#[diesel(table_name = hitl_decisions)]
pub struct DecisionRow {
    pub request_id: String,
    pub run_id: String,
    pub decision: Verdict,
    pub operator: Option<String>,
    pub note: Option<String>,
    pub feedback: Option<String>,
    pub payload: Option<String>,
    pub decided_at: NaiveDateTime,
    /// Who decided, as authenticated.
    pub principal: Option<String>,
}

pub fn insert(conn: &mut DbConn, row: &RequestRow) -> Result<(), StoreError> {
    super::on_backend!(conn, |c| diesel::insert_into(hitl_requests::table).values(row).execute(c))?;
    Ok(())
}

/// The run's pending request, if it has one.
pub fn pending(conn: &mut DbConn, run_id: &str) -> Result<Option<RequestRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| hitl_requests::table
        .filter(hitl_requests::run_id.eq(run_id).and(hitl_requests::status.eq(RequestStatus::Pending)))
        .order(hitl_requests::created_at.desc())
        .select(RequestRow::as_select())
        .get_result(c))
    .optional()?)
}

pub fn get(conn: &mut DbConn, request_id: &str) -> Result<RequestRow, StoreError> {
    super::on_backend!(conn, |c| hitl_requests::table.find(request_id).select(RequestRow::as_select()).get_result(c))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("request {request_id}")))
}

/// Moves a pending request to `status` (`resolved`, `superseded` or `cancelled`); a request that
/// is no longer pending is a conflict.
pub fn close(conn: &mut DbConn, request_id: &str, status: RequestStatus, at: NaiveDateTime) -> Result<(), StoreError> {
    let pending = hitl_requests::request_id.eq(request_id).and(hitl_requests::status.eq(RequestStatus::Pending));
    let updated = super::on_backend!(conn, |c| diesel::update(hitl_requests::table.filter(pending))
        .set((hitl_requests::status.eq(status), hitl_requests::closed_at.eq(Some(at))))
        .execute(c))?;
    if updated == 1 { Ok(()) } else { Err(StoreError::Conflict(format!("request {request_id} is not pending"))) }
}

/// Records the decision that answered a request (at most one per request).
pub fn decide(conn: &mut DbConn, row: &DecisionRow) -> Result<(), StoreError> {
    super::on_backend!(conn, |c| diesel::insert_into(hitl_decisions::table).values(row).execute(c))?;
    Ok(())
}

/// Every request of a run and every decision, oldest first.
pub fn for_run(conn: &mut DbConn, run_id: &str) -> Result<(Vec<RequestRow>, Vec<DecisionRow>), StoreError> {
    let requests = super::on_backend!(conn, |c| hitl_requests::table
        .filter(hitl_requests::run_id.eq(run_id))
        .order(hitl_requests::created_at)
        .select(RequestRow::as_select())
        .load(c))?;
    let decisions = super::on_backend!(conn, |c| hitl_decisions::table
        .filter(hitl_decisions::run_id.eq(run_id))
        .order(hitl_decisions::decided_at)
        .select(DecisionRow::as_select())
        .load(c))?;
    Ok((requests, decisions))
}

/// Pending requests, oldest first: of one `kind` if given (`human_task`: the open human tasks),
/// of the runs `owner` started if given.
pub fn open(
    conn: &mut DbConn,
    limit: i64,
    kind: Option<HitlKind>,
    owner: Option<&str>,
) -> Result<Vec<RequestRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| {
        let mut query = hitl_requests::table
            .filter(hitl_requests::status.eq(RequestStatus::Pending))
            .order(hitl_requests::created_at)
            .limit(limit)
            .select(RequestRow::as_select())
            .into_boxed();
        if let Some(kind) = kind {
            query = query.filter(hitl_requests::kind.eq(kind));
        }
        if let Some(owner) = owner {
            query = query
                .filter(hitl_requests::run_id.eq_any(runs::table.filter(runs::owner.eq(owner)).select(runs::run_id)));
        }
        query.load(c)
    })?)
}

/// Moves every pending request of a run to `status` (`superseded` or `cancelled`).
pub fn close_all(conn: &mut DbConn, run_id: &str, status: RequestStatus, at: NaiveDateTime) -> Result<(), StoreError> {
    let pending = hitl_requests::run_id.eq(run_id).and(hitl_requests::status.eq(RequestStatus::Pending));
    super::on_backend!(conn, |c| diesel::update(hitl_requests::table.filter(pending))
        .set((hitl_requests::status.eq(status), hitl_requests::closed_at.eq(Some(at))))
        .execute(c))?;
    Ok(())
}
