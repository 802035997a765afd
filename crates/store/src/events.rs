//! The `run_events` table: the per-run event log.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use diesel::prelude::*;

use super::prepared::prepared;
use super::schema::run_events;
use super::stamp::Stamp;
use super::{DbConn, StoreError};
use flexrun_core::events::{Event, Frame, Seq};

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
    /// For a frame delivered live, what the process that encoded it knows of it without reading
    /// its text; `None` for one read from the log.
    pub live: Option<Live>,
}

/// What is known of a frame delivered live besides its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Live {
    /// Whether a key of the frame may name a secret, as judged when it was encoded
    /// (`Frame::secret_keys`).
    pub secret_keys: bool,
    pub timestamp: DateTime<Utc>,
    /// The event the text encodes (`Frame::event`).
    pub event: Arc<Event>,
}

impl From<&Frame> for LoggedFrame {
    fn from(frame: &Frame) -> Self {
        Self {
            seq: frame.seq,
            event_type: frame.kind.as_str().to_string(),
            json: frame.json.clone(),
            live: Some(Live { secret_keys: frame.secret_keys, timestamp: frame.timestamp, event: frame.event.clone() }),
        }
    }
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

/// A page of a log: how many frames at most, and about how many bytes of frame text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub frames: i64,
    /// The frames' text together stays within this, but for a page's first frame, which is
    /// always read (a frame is never split).
    pub bytes: u64,
}

impl Page {
    /// Of frames' `(seq, size)` in the order a page takes them (up to one more than it holds):
    /// the seq of the last one it takes, and whether any is left out.
    fn fitting(self, sizes: &[(i64, i32)]) -> (Option<i64>, bool) {
        let mut total = 0u64;
        let taken = sizes
            .iter()
            .take(usize::try_from(self.frames).unwrap_or_default())
            .enumerate()
            .take_while(|(index, (_, size))| {
                total = total.saturating_add(u64::try_from(*size).unwrap_or_default());
                *index == 0 || total <= self.bytes
            })
            .count();
        let last = taken.checked_sub(1).and_then(|i| sizes.get(i)).map(|(seq, _)| *seq);
        (last, sizes.len() > taken)
    }
}

diesel::define_sql_function! {
    /// The size of a text in bytes, read from the stored value's header where the database can
    /// (PostgreSQL does not detoast it; SQLite does not load it).
    fn octet_length(text: diesel::sql_types::Text) -> diesel::sql_types::Integer;
}

/// Frames of a log read a page at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct LogPage {
    pub frames: Vec<LoggedFrame>,
    /// Whether the log has frames after these.
    pub more: bool,
}

/// The frames after `after`, in order, as many as fit in `page`: a reader of a log holds at most
/// a page of it in memory, however long the log and however large its frames. The sizes are
/// read first (a small query), then the frames that fit.
pub fn page_after(conn: &mut DbConn, run_id: &str, after: Seq, page: Page) -> Result<LogPage, StoreError> {
    let sizes: Vec<(i64, i32)> = super::on_backend!(conn, |c| run_events::table
        .filter(run_events::run_id.eq(run_id))
        .filter(run_events::seq.gt(after.stored()))
        .order(run_events::seq)
        .limit(page.frames.saturating_add(1))
        .select((run_events::seq, octet_length(run_events::frame)))
        .load(c))?;
    let (last, more) = match page.fitting(&sizes) {
        (Some(last), more) => (last, more),
        (None, more) => return Ok(LogPage { frames: Vec::new(), more }),
    };
    let rows: Vec<(i64, String, String)> = super::on_backend!(conn, |c| run_events::table
        .filter(run_events::run_id.eq(run_id))
        .filter(run_events::seq.gt(after.stored()))
        .filter(run_events::seq.le(last))
        .order(run_events::seq)
        .select((run_events::seq, run_events::event_type, run_events::frame))
        .load(c))?;
    let frames = rows.into_iter().map(|row| logged(run_id, row)).collect::<Result<_, _>>()?;
    Ok(LogPage { frames, more })
}

/// The newest frames before `before` — only those of type `kind`, when given — in order, as many
/// as fit in `page` (`more`: older ones exist), read as [`page_after`] reads: the tail of a log or
/// the page before one, a run's `retry` frames or its `node_start` ones. (Read by pages, not by
/// runs' streams: the queries are built per call, where [`page_after`]'s are prepared once.)
pub fn page_before(
    conn: &mut DbConn,
    run_id: &str,
    before: Seq,
    kind: Option<&str>,
    page: Page,
) -> Result<LogPage, StoreError> {
    let sizes: Vec<(i64, i32)> = super::on_backend!(conn, |c| {
        let mut query = run_events::table
            .filter(run_events::run_id.eq(run_id))
            .filter(run_events::seq.lt(before.stored()))
            .into_boxed();
        if let Some(kind) = kind {
            query = query.filter(run_events::event_type.eq(kind));
        }
        query
            .order(run_events::seq.desc())
            .limit(page.frames.saturating_add(1))
            .select((run_events::seq, octet_length(run_events::frame)))
            .load(c)
    })?;
    let (first, more) = match page.fitting(&sizes) {
        (Some(first), more) => (first, more),
        (None, more) => return Ok(LogPage { frames: Vec::new(), more }),
    };
    let rows: Vec<(i64, String, String)> = super::on_backend!(conn, |c| {
        let mut query = run_events::table
            .filter(run_events::run_id.eq(run_id))
            .filter(run_events::seq.lt(before.stored()))
            .filter(run_events::seq.ge(first))
            .into_boxed();
        if let Some(kind) = kind {
            query = query.filter(run_events::event_type.eq(kind));
        }
        query.order(run_events::seq).select((run_events::seq, run_events::event_type, run_events::frame)).load(c)
    })?;
    let frames = rows.into_iter().map(|row| logged(run_id, row)).collect::<Result<_, _>>()?;
    Ok(LogPage { frames, more })
}

/// The seq and type of each `plan_generated` and `node_complete` of a run, in order, then of its
/// last frame when it is neither — the run's checkpoints as the LangGraph surface lists them —
/// read without the frames' text.
pub fn checkpoints(conn: &mut DbConn, run_id: &str) -> Result<Vec<(Seq, String)>, StoreError> {
    let kinds = ["plan_generated", "node_complete"];
    let rows: Vec<(i64, String)> = super::on_backend!(conn, |c| run_events::table
        .filter(run_events::run_id.eq(run_id))
        .filter(run_events::event_type.eq_any(kinds))
        .order(run_events::seq)
        .select((run_events::seq, run_events::event_type))
        .load(c))?;
    let last: Option<(i64, String)> = super::on_backend!(conn, |c| run_events::table
        .filter(run_events::run_id.eq(run_id))
        .order(run_events::seq.desc())
        .select((run_events::seq, run_events::event_type))
        .get_result(c)
        .optional())?;
    let mut rows = rows;
    if let Some(last) = last.filter(|(_, kind)| !kinds.contains(&kind.as_str())) {
        rows.push(last);
    }
    rows.into_iter()
        .map(|(seq, kind)| {
            Seq::from_stored(seq).map(|seq| (seq, kind)).map_err(|e| StoreError::Corrupt(format!("run {run_id}: {e}")))
        })
        .collect()
}

fn logged(run_id: &str, (seq, event_type, frame): (i64, String, String)) -> Result<LoggedFrame, StoreError> {
    let seq = Seq::from_stored(seq).map_err(|e| StoreError::Corrupt(format!("run {run_id}: {e}")))?;
    Ok(LoggedFrame { seq, event_type, json: frame.into(), live: None })
}

/// The highest sequence number of a run's log (0 when empty).
pub fn last_seq(conn: &mut DbConn, run_id: &str) -> Result<Seq, StoreError> {
    let max: Option<i64> = super::on_backend!(conn, |c| run_events::table
        .filter(run_events::run_id.eq(run_id))
        .select(diesel::dsl::max(run_events::seq))
        .get_result(c))?;
    Seq::from_stored(max.unwrap_or(0)).map_err(|e| StoreError::Corrupt(format!("run {run_id}: {e}")))
}
