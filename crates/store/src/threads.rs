//! The `threads` table: the threads of the LangGraph-compatible API. A thread's runs are the
//! `runs` whose `thread_id` it is; the table keeps what exists before any run (the thread, its
//! owner, its metadata).

use chrono::NaiveDateTime;
use diesel::prelude::*;
use serde_json::Value;

use super::prepared::{prepared, update, upsert};
use super::runs::RunRow;
use super::schema::{runs, thread_metadata, threads};
use super::stamp::Stamp;
use super::{DbConn, StoreError};
use flexrun_core::run::RunStatus;

#[derive(Debug, Clone, PartialEq, Queryable, Selectable, Insertable)]
#[diesel(table_name = threads, treat_none_as_default_value = false)]
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
    let statement = prepared!(diesel::insert_into(threads::table).values(row));
    match super::on_backend!(conn, |c| statement.execute(c)) {
        Ok(_) => index(conn, &row.thread_id, &row.metadata),
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

/// Stores `row` unless a thread has its id already, which is left as it is (whose it is, the
/// caller checks after: [`mark`]); whether it stored it.
pub fn insert_missing(conn: &mut DbConn, row: &ThreadRow) -> Result<bool, StoreError> {
    let inserted = super::on_backend!(conn, |c| diesel::insert_into(threads::table)
        .values(row)
        .on_conflict_do_nothing()
        .execute(c))?;
    if inserted == 0 {
        return Ok(false);
    }
    index(conn, &row.thread_id, &row.metadata)?;
    Ok(true)
}

/// A thread's metadata made of `entries` (keys and canonical JSON values) as [`mark`] would
/// leave an empty one: canonical JSON text, keys sorted.
pub fn metadata_of(entries: &[(&str, &str)]) -> Result<String, StoreError> {
    let mut metadata = serde_json::Map::new();
    for &(key, text) in entries {
        metadata.insert(key.into(), serde_json::from_str(text)?);
    }
    Ok(Value::Object(metadata).to_string())
}

/// Holds the thread's "one active run" rule for a run about to be inserted on it: fails with
/// [`StoreError::ThreadBusy`] if a run of the thread is in one of the `active` statuses.
///
/// Called in the transaction that inserts the run, after [`mark`] (which locks the thread's row
/// on PostgreSQL, so a start on another node waits for this transaction and then sees its run:
/// two nodes cannot both find the thread idle). On SQLite one writer makes every commit in turn.
///
/// The statuses are a fixed number, compared one by one rather than with `IN (…)`: the statement
/// then has one SQL text, prepared once per connection instead of at every start.
pub fn hold_idle(conn: &mut DbConn, thread_id: &str, active: [RunStatus; 3]) -> Result<(), StoreError> {
    let [a, b, c] = active;
    let in_progress = runs::status.eq(a).or(runs::status.eq(b)).or(runs::status.eq(c));
    let busy = super::on_backend!(conn, |c| diesel::select(diesel::dsl::exists(
        runs::table.filter(runs::thread_id.eq(thread_id)).filter(in_progress)
    ))
    .get_result::<bool>(c))?;
    if busy { Err(StoreError::ThreadBusy(thread_id.to_string())) } else { Ok(()) }
}

/// A thread's metadata key and its value as canonical JSON text (`serde_json` writes an
/// object's keys sorted), as the `thread_metadata` index holds them.
#[derive(Debug, Clone, PartialEq, Eq, Insertable)]
#[diesel(table_name = thread_metadata)]
struct Entry {
    thread_id: String,
    key: String,
    value: String,
}

/// Writes a thread's metadata (a JSON object, as stored) into the index.
fn index(conn: &mut DbConn, thread_id: &str, metadata: &str) -> Result<(), StoreError> {
    let entries: Vec<Entry> = match serde_json::from_str::<Value>(metadata) {
        Ok(Value::Object(map)) => map
            .into_iter()
            .map(|(key, value)| Entry { thread_id: thread_id.to_string(), key, value: value.to_string() })
            .collect(),
        _ => return Ok(()),
    };
    for entry in &entries {
        super::on_backend!(conn, |c| diesel::insert_into(thread_metadata::table)
            .values(entry)
            .on_conflict_do_nothing()
            .execute(c))?;
    }
    Ok(())
}

/// Indexes the metadata of threads stored before the index existed; how many it indexed.
pub fn index_unindexed(conn: &mut DbConn) -> Result<usize, StoreError> {
    let unindexed: Vec<(String, String)> = super::on_backend!(conn, |c| threads::table
        .filter(threads::metadata.ne("{}"))
        .filter(diesel::dsl::not(diesel::dsl::exists(
            thread_metadata::table.filter(thread_metadata::thread_id.eq(threads::thread_id)),
        )))
        .select((threads::thread_id, threads::metadata))
        .load(c))?;
    for (thread_id, metadata) in &unindexed {
        index(conn, thread_id, metadata)?;
    }
    Ok(unindexed.len())
}

/// A metadata key and the value it must have, as canonical JSON text.
pub fn metadata_entry(key: &str, value: &Value) -> (String, String) {
    (key.to_string(), value.to_string())
}

/// Which threads a search finds. The query holds a variable per id and a nested condition per
/// metadata key: callers bound both (the LangGraph surface refuses more than 64 keys or 1,000 ids),
/// or the database refuses the query, or building it overflows the stack.
#[derive(Debug, Clone, Default)]
pub struct Search<'a> {
    /// Only this principal's threads.
    pub owner: Option<&'a str>,
    /// Only these threads.
    pub ids: Option<&'a [String]>,
    /// Threads whose metadata has each key with that value ([`metadata_entry`]).
    pub metadata: &'a [(String, String)],
}

/// The threads `search` finds, most recently updated first, after `after` (the last of the
/// previous batch: its update time and id), at most `limit`.
pub fn search(
    conn: &mut DbConn,
    search: &Search<'_>,
    after: Option<(NaiveDateTime, &str)>,
    limit: i64,
) -> Result<Vec<ThreadRow>, StoreError> {
    Ok(super::on_backend!(conn, |c| {
        let mut query = threads::table
            .select(ThreadRow::as_select())
            .order((threads::updated_at.desc(), threads::thread_id.desc()))
            .limit(limit)
            .into_boxed();
        if let Some(owner) = search.owner {
            query = query.filter(threads::owner.eq(owner));
        }
        if let Some(ids) = search.ids {
            query = query.filter(threads::thread_id.eq_any(ids));
        }
        for (key, value) in search.metadata {
            let matching = thread_metadata::table
                .filter(thread_metadata::key.eq(key))
                .filter(thread_metadata::value.eq(value))
                .select(thread_metadata::thread_id);
            query = query.filter(threads::thread_id.eq_any(matching));
        }
        if let Some((at, id)) = after {
            query =
                query.filter(threads::updated_at.lt(at).or(threads::updated_at.eq(at).and(threads::thread_id.lt(id))));
        }
        query.load(c)
    })?)
}

/// The thread `thread_id` (`NotFound` if there is none).
pub fn get(conn: &mut DbConn, thread_id: &str) -> Result<ThreadRow, StoreError> {
    super::on_backend!(conn, |c| threads::table.find(thread_id).select(ThreadRow::as_select()).get_result(c))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("thread {thread_id}")))
}

/// Sets `entries` (keys and their values as canonical JSON text, [`metadata_entry`]) in a
/// thread's metadata and marks it updated at `at`, if the thread is still `owner`'s:
/// [`StoreError::ThreadNotFound`] if it is not (or no longer exists).
///
/// Meant for a transaction that also does something else (a run's first commit): the metadata
/// is read and written in it — under a lock on the thread's row on PostgreSQL — so a change made
/// meanwhile is not lost, and only the keys whose value changes are written to the index. The
/// owner is checked here rather than by a read before the transaction: a run's start then needs
/// no read of its own, and a thread deleted (and made again by someone else) in between is not
/// taken for the one the caller was allowed.
pub fn mark(
    conn: &mut DbConn,
    thread_id: &str,
    owner: Option<&str>,
    entries: &[(&str, &str)],
    at: NaiveDateTime,
) -> Result<(), StoreError> {
    let (stored, stored_owner) = locked(conn, thread_id)?;
    if stored_owner.as_deref() != owner {
        return Err(StoreError::ThreadNotFound(thread_id.to_string()));
    }
    // Metadata flexrun did not write as an object is replaced, as it never was indexed.
    let mut metadata: serde_json::Map<String, Value> = serde_json::from_str(&stored).unwrap_or_default();
    let mut changed = Vec::new();
    for &(key, text) in entries {
        let value: Value = serde_json::from_str(text)?;
        if metadata.get(key) != Some(&value) {
            changed.push(Entry { thread_id: thread_id.into(), key: key.into(), value: text.into() });
            metadata.insert(key.into(), value);
        }
    }
    // Prepared: a LangGraph run's first commit marks its thread, once a run.
    let thread = threads::thread_id.eq(thread_id);
    if changed.is_empty() {
        let statement = prepared!(update(threads::table, threads::updated_at.eq(Stamp(at)), thread));
        super::on_backend!(conn, |c| statement.execute(c))?;
        return Ok(());
    }
    let values = (threads::metadata.eq(Value::Object(metadata).to_string()), threads::updated_at.eq(Stamp(at)));
    let statement = prepared!(update(threads::table, values, thread));
    super::on_backend!(conn, |c| statement.execute(c))?;
    for entry in &changed {
        let insert = diesel::insert_into(thread_metadata::table).values(entry);
        let key = &[thread_metadata::thread_id::NAME, thread_metadata::key::NAME];
        let upsert = prepared!(upsert(insert, key, thread_metadata::value.eq(&entry.value)));
        super::on_backend!(conn, |c| upsert.execute(c))?;
    }
    Ok(())
}

/// A thread's metadata and owner, its row locked on PostgreSQL until the transaction ends;
/// [`StoreError::ThreadNotFound`] if there is no such thread.
fn locked(conn: &mut DbConn, thread_id: &str) -> Result<(String, Option<String>), StoreError> {
    let row = threads::table.find(thread_id).select((threads::metadata, threads::owner));
    let found = match conn {
        DbConn::Sqlite(c) => row.get_result(c).optional()?,
        #[cfg(feature = "postgres")]
        DbConn::Pg(c) => row.for_update().get_result(c).optional()?,
    };
    found.ok_or_else(|| StoreError::ThreadNotFound(thread_id.to_string()))
}

/// The newest run of `thread_id`, if it has one: what the thread's status and state show.
pub fn newest_run(conn: &mut DbConn, thread_id: &str) -> Result<Option<RunRow>, StoreError> {
    Ok(runs(conn, thread_id, 1)?.into_iter().next())
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
