//! The `run_events` table: the per-run event log.

use std::sync::Arc;

use diesel::prelude::*;

use super::prepared::prepared;
use super::schema::run_events;
use super::stamp::Stamp;
use super::{DbConn, StoreError};
use crate::events::{Frame, Seq};

/// A frame as inserted: borrowed, so a frame's JSON is not copied on its way to SQLite.
#[derive(Insertable)]
#[diesel(table_name = run_events)]
struct NewEvent<'a> {
    run_id: &'a str,
    seq: i64,
    event_type: &'a str,
    frame: &'a str,
    created_at: Stamp,
}

/// Appends frames; the primary key (run, seq) rejects a duplicate sequence number.
pub fn append(conn: &mut DbConn, run_id: &str, frames: &[Frame]) -> Result<(), StoreError> {
    for frame in frames {
        let row = NewEvent {
            run_id,
            seq: frame.seq.stored(),
            event_type: frame.kind.as_str(),
            frame: &frame.json,
            created_at: Stamp(frame.timestamp.naive_utc()),
        };
        let insert = prepared!(diesel::insert_into(run_events::table).values(&row));
        super::on_backend!(conn, |c| insert.execute(c))?;
    }
    Ok(())
}

/// A frame read back from the log.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedFrame {
    pub seq: Seq,
    pub event_type: String,
    pub json: Arc<str>,
    /// Whether a key of the frame may name a secret, when known without reading its text: for a
    /// frame delivered live, as judged when it was encoded (`Frame::secret_keys`); `None` for one
    /// read from the log.
    pub secret_keys: Option<bool>,
}

/// Up to `limit` frames after `after`, in order.
pub fn after(conn: &mut DbConn, run_id: &str, after: Seq, limit: i64) -> Result<Vec<LoggedFrame>, StoreError> {
    let rows: Vec<(i64, String, String)> = super::on_backend!(conn, |c| run_events::table
        .filter(run_events::run_id.eq(run_id))
        .filter(run_events::seq.gt(after.stored()))
        .order(run_events::seq)
        .limit(limit)
        .select((run_events::seq, run_events::event_type, run_events::frame))
        .load(c))?;
    rows.into_iter().map(|row| logged(run_id, row)).collect()
}

/// Up to `limit` frames before `before`, in order: the tail of a log, or the page before one.
pub fn before(conn: &mut DbConn, run_id: &str, before: Seq, limit: i64) -> Result<Vec<LoggedFrame>, StoreError> {
    let rows: Vec<(i64, String, String)> = super::on_backend!(conn, |c| run_events::table
        .filter(run_events::run_id.eq(run_id))
        .filter(run_events::seq.lt(before.stored()))
        .order(run_events::seq.desc())
        .limit(limit)
        .select((run_events::seq, run_events::event_type, run_events::frame))
        .load(c))?;
    rows.into_iter().rev().map(|row| logged(run_id, row)).collect()
}

/// Up to `limit` frames of one type, in order (`retry` frames, to count a node's retries).
pub fn of_type(conn: &mut DbConn, run_id: &str, event_type: &str, limit: i64) -> Result<Vec<LoggedFrame>, StoreError> {
    let rows: Vec<(i64, String, String)> = super::on_backend!(conn, |c| run_events::table
        .filter(run_events::run_id.eq(run_id))
        .filter(run_events::event_type.eq(event_type))
        .order(run_events::seq)
        .limit(limit)
        .select((run_events::seq, run_events::event_type, run_events::frame))
        .load(c))?;
    rows.into_iter().map(|row| logged(run_id, row)).collect()
}

fn logged(run_id: &str, (seq, event_type, frame): (i64, String, String)) -> Result<LoggedFrame, StoreError> {
    let seq = Seq::from_stored(seq).map_err(|e| StoreError::Corrupt(format!("run {run_id}: {e}")))?;
    Ok(LoggedFrame { seq, event_type, json: frame.into(), secret_keys: None })
}

/// The highest sequence number of a run's log (0 when empty).
pub fn last_seq(conn: &mut DbConn, run_id: &str) -> Result<Seq, StoreError> {
    let max: Option<i64> = super::on_backend!(conn, |c| run_events::table
        .filter(run_events::run_id.eq(run_id))
        .select(diesel::dsl::max(run_events::seq))
        .first(c))?;
    Seq::from_stored(max.unwrap_or(0)).map_err(|e| StoreError::Corrupt(format!("run {run_id}: {e}")))
}
