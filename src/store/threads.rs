//! The `threads` table: the threads of the LangGraph-compatible API. A thread's runs are the
//! `runs` whose `thread_id` it is; the table keeps what exists before any run (the thread, its
//! owner, its metadata).

use chrono::NaiveDateTime;
use diesel::prelude::*;

use super::runs::RunRow;
use super::schema::{runs, threads};
use super::stamp::Stamp;
use super::{DbConn, StoreError};

#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Insertable)]
#[diesel(table_name = threads)]
pub struct ThreadRow {
    pub thread_id: String,
    /// The principal that made the thread (`None`: the anonymous operator of an open server).
    pub owner: Option<String>,
    /// A JSON object.
    pub metadata: String,
    pub created_at: NaiveDateTime,
    pub updated_at: NaiveDateTime,
}

/// Stores a new thread; `Conflict` if one has its id already.
pub fn insert(conn: &mut DbConn, row: &ThreadRow) -> Result<(), StoreError> {
    match super::on_backend!(conn, |c| diesel::insert_into(threads::table).values(row).execute(c)) {
        Ok(_) => Ok(()),
        Err(error) => {
            let error = StoreError::from(error);
            if error.is_unique_violation() {
                Err(StoreError::Conflict(format!("thread {}", row.thread_id)))
            } else {
                Err(error)
            }
        }
    }
}

/// The thread `thread_id` (`NotFound` if there is none).
pub fn get(conn: &mut DbConn, thread_id: &str) -> Result<ThreadRow, StoreError> {
    super::on_backend!(conn, |c| threads::table.find(thread_id).select(ThreadRow::as_select()).first(c))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("thread {thread_id}")))
}

/// Replaces a thread's metadata and marks it updated now.
pub fn touch(conn: &mut DbConn, thread_id: &str, metadata: &str, at: NaiveDateTime) -> Result<(), StoreError> {
    let values = (threads::metadata.eq(metadata), threads::updated_at.eq(Stamp(at)));
    super::on_backend!(conn, |c| diesel::update(threads::table.find(thread_id)).set(values).execute(c))?;
    Ok(())
}

/// The most recently updated threads (of `owner`, if given), at most `limit`.
pub fn recent(conn: &mut DbConn, owner: Option<&str>, limit: i64) -> Result<Vec<ThreadRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| {
        let mut query = threads::table
            .select(ThreadRow::as_select())
            .order((threads::updated_at.desc(), threads::thread_id.desc()))
            .limit(limit)
            .into_boxed();
        if let Some(owner) = owner {
            query = query.filter(threads::owner.eq(owner));
        }
        query.load(c)
    })?)
}

/// The runs of `thread_id`, newest first (at most `limit`).
pub fn runs(conn: &mut DbConn, thread_id: &str, limit: i64) -> Result<Vec<RunRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| runs::table
        .filter(runs::thread_id.eq(thread_id))
        .order((runs::created_at.desc(), runs::run_id.desc()))
        .limit(limit)
        .select(RunRow::as_select())
        .load(c))?)
}
