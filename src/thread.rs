//! Threads: a thread groups the runs started on it — a LangGraph thread, or the flex API's
//! `constraints.threadId`. A thread belongs to the caller that made it, and so does every run on
//! it, whichever API starts the run: a run's history (a chat's earlier messages) goes into the
//! next run's prompt, so a thread shared across callers would let one write into another's
//! conversation. Another caller's thread is answered as one that does not exist (404), and an id
//! in use is refused to everyone alike (409), so nobody learns whose a thread is.

use std::fmt;

use serde_json::{Map, Value};

use crate::caller::Caller;
use crate::store::runs::RunRow;
use crate::store::threads::{self as rows, ThreadRow};
use crate::store::{DbConn, Store, StoreError};

/// Whether a run may start on a thread that has one in progress, and what its start does to the
/// thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadRule {
    /// It may (the flex API: runs on a thread share its history, nothing more).
    Shared,
    /// It may not: one active run per thread (LangGraph's `multitask_strategy: reject`). The
    /// run's first commit checks it under a lock on the thread's row, so it holds across nodes.
    /// The same commit checks that the thread is still `owner`'s (whom the start took it for:
    /// [`StoreError::ThreadNotFound`] if not, so a start needs no read of the thread before), sets
    /// `metadata` (keys and canonical JSON values) in the thread's metadata and marks the thread
    /// updated: LangGraph's threads name the graph their runs ran, and a commit of its own for
    /// that would cost every start a second round to the database.
    ///
    /// With `create` (`if_not_exists: create`, or a stateless run's new thread) the same commit
    /// first makes the thread for `owner` if it does not exist yet, named with the graph — not in
    /// a commit of its own before: the start then writes the thread's row once, and a start
    /// refused leaves no thread behind.
    OneActiveRun { metadata: &'static [(&'static str, &'static str)], owner: Option<String>, create: bool },
}

impl ThreadRule {
    /// What the rule does in the first commit of a run on `thread_id`, before the run is
    /// inserted: [`StoreError::ThreadBusy`] if the thread has a run in progress and may not.
    pub fn hold(&self, conn: &mut DbConn, thread_id: &str) -> Result<(), StoreError> {
        match self {
            Self::Shared => Ok(()),
            Self::OneActiveRun { metadata, owner, create } => {
                // A thread made here is made marked: the caller's, with the graph's metadata.
                let made = if *create {
                    let row = new_row(owner.clone(), thread_id.to_string(), rows::metadata_of(metadata)?);
                    rows::insert_missing(conn, &row)?
                } else {
                    false
                };
                if !made {
                    // The owner first: whether another's thread is busy is not the caller's to learn.
                    rows::mark(conn, thread_id, owner.as_deref(), metadata, crate::store::now())?;
                }
                // Even on a thread made here: runs stored before threads had rows may name it.
                rows::hold_idle(conn, thread_id, crate::run::RunStatus::ACTIVE)
            }
        }
    }
}

/// The longest thread id.
pub const MAX_LEN: usize = 200;

/// What a thread id may be, for messages.
pub const RULE: &str = "1 to 200 characters: letters, digits, '.', '_', ':' and '-', starting with a letter or digit";

/// A thread id every client can put in a URL path as it is: letters, digits, `.`, `_`, `:`, `-`,
/// starting with a letter or digit (so never `.` or `..`), at most [`MAX_LEN`] characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ThreadId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a thread id must be {RULE}")]
pub struct InvalidThreadId;

impl ThreadId {
    pub fn parse(id: &str) -> Result<Self, InvalidThreadId> {
        let mut bytes = id.bytes();
        let first = bytes.next().ok_or(InvalidThreadId)?;
        let safe = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-');
        if id.len() <= MAX_LEN && first.is_ascii_alphanumeric() && bytes.all(safe) {
            Ok(Self(id.to_string()))
        } else {
            Err(InvalidThreadId)
        }
    }

    /// A new thread's id, chosen by the server.
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a thread could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ThreadError {
    /// No such thread, or another caller's.
    #[error("thread {0} not found")]
    NotFound(String),
    /// A new thread's id is in use (by whomever).
    #[error("thread {0} already exists")]
    InUse(String),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for ThreadError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound(what) => Self::NotFound(what.trim_start_matches("thread ").to_string()),
            StoreError::ThreadNotFound(id) => Self::NotFound(id),
            other => Self::Store(other),
        }
    }
}

/// The thread `id`, if `caller` may use it.
pub async fn visible(store: &Store, caller: &Caller, id: &str) -> Result<ThreadRow, ThreadError> {
    let lookup = id.to_string();
    let row = store.read(move |conn| rows::get(conn, &lookup)).await?;
    mine(caller, row, id)
}

/// The thread `id`, if `caller` may use it, and its newest run (`None` before its first): one trip
/// to the read pool for what a thread and its state show. The run of a thread `caller` may not
/// see is read and dropped, never answered.
pub async fn visible_with_newest(
    store: &Store,
    caller: &Caller,
    id: &str,
) -> Result<(ThreadRow, Option<RunRow>), ThreadError> {
    let lookup = id.to_string();
    let (row, newest) = store
        .read(move |conn| {
            let row = rows::get(conn, &lookup)?;
            Ok((row, rows::newest_run(conn, &lookup)?))
        })
        .await?;
    Ok((mine(caller, row, id)?, newest))
}

/// Makes a thread for `caller`, with `id` or a new one; [`ThreadError::InUse`] if `id` is taken.
pub async fn create(
    store: &Store,
    caller: &Caller,
    id: Option<ThreadId>,
    metadata: Map<String, Value>,
) -> Result<ThreadRow, ThreadError> {
    let id = id.unwrap_or_else(ThreadId::generate);
    let row = new_row(Some(caller.principal.clone()), id.0, Value::Object(metadata).to_string());
    let insert = row.clone();
    match store.write(move |conn| rows::insert(conn, &insert)).await {
        Ok(()) => Ok(row),
        Err(StoreError::Conflict(_)) => Err(ThreadError::InUse(row.thread_id)),
        Err(error) => Err(error.into()),
    }
}

/// The thread `id` for a run `caller` starts on it: made for `caller` if it does not exist yet,
/// [`ThreadError::NotFound`] if it is another caller's.
pub async fn enter(store: &Store, caller: &Caller, id: &ThreadId) -> Result<ThreadRow, ThreadError> {
    let row = new_row(Some(caller.principal.clone()), id.0.clone(), Value::Object(Map::new()).to_string());
    let found = store.write(move |conn| get_or_insert(conn, &row)).await?;
    mine(caller, found, id.as_str())
}

fn get_or_insert(conn: &mut DbConn, row: &ThreadRow) -> Result<ThreadRow, StoreError> {
    match rows::get(conn, &row.thread_id) {
        Err(StoreError::NotFound(_)) => match rows::insert(conn, row) {
            Ok(()) => Ok(row.clone()),
            // Made meanwhile by another node sharing the database.
            Err(StoreError::Conflict(_)) => rows::get(conn, &row.thread_id),
            Err(error) => Err(error),
        },
        found => found,
    }
}

/// A new thread's row: made and updated now, `metadata` a JSON object's text.
fn new_row(owner: Option<String>, thread_id: String, metadata: String) -> ThreadRow {
    let now = crate::store::now();
    ThreadRow { thread_id, owner, metadata, created_at: now, updated_at: now }
}

fn mine(caller: &Caller, row: ThreadRow, id: &str) -> Result<ThreadRow, ThreadError> {
    if caller.may_see(row.owner.as_deref()) { Ok(row) } else { Err(ThreadError::NotFound(id.to_string())) }
}

/// Who owns the runs started by `caller` on a thread of `thread_owner`: the thread's owner (an
/// operator may start a run on anyone's thread; the run is still the thread owner's).
pub fn run_owner(thread_owner: Option<&str>, caller: &Caller) -> String {
    thread_owner.unwrap_or(&caller.principal).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_are_safe_in_a_url_path() {
        for id in ["t", "0190b2d4-0000-7000-8000-000000000000", "chat.1:a_b-c", &"x".repeat(MAX_LEN)] {
            assert!(ThreadId::parse(id).is_ok(), "{id}");
        }
        for id in ["", ".", "..", "-x", "x?y=1", "a/b", "a b", "a%2Fb", "é", "a#b", &"x".repeat(MAX_LEN + 1)] {
            assert_eq!(ThreadId::parse(id), Err(InvalidThreadId), "{id}");
        }
    }
}
