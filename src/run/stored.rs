//! A run as stored — its row and its log — read back: its state is the fold of its log.

use super::id::RunId;
use super::nodes::NodeTable;
use super::state::{self, ApplyError, RunState};
use crate::config::ReplanSettings;
use crate::envelope::{self, EnvelopeError, TaskEnvelope};
use crate::events::{Event, Frame, Seq};
use crate::services::Services;
use crate::store::events::{self, LoggedFrame};
use crate::store::runs::{self, RunRow};
use crate::store::{DbConn, StoreError};
use flexrun_core::run::fork::ParentLog;

/// Why a stored run cannot be picked up again.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResumeError {
    #[error("its stored envelope no longer validates: {0}")]
    Envelope(String),
    #[error("its event log cannot be replayed: {0}")]
    Log(#[from] ApplyError),
    #[error("a frame of its log is unreadable: {0}")]
    Frame(#[from] crate::events::DecodeError),
    /// serde's message.
    #[error("its stored data is unreadable: {0}")]
    Json(String),
    /// Its log has no `start` (a row whose first commit was not flexrun's).
    #[error("its event log has no `start` frame")]
    NotStarted,
}

impl From<serde_json::Error> for ResumeError {
    fn from(error: serde_json::Error) -> Self {
        Self::Json(error.to_string())
    }
}

impl From<EnvelopeError> for ResumeError {
    fn from(error: EnvelopeError) -> Self {
        let problems = match &error {
            EnvelopeError::NotJson(_) => Vec::new(),
            EnvelopeError::Invalid(errors) | EnvelopeError::InvalidConditionDsl(errors) => {
                errors.iter().map(|e| format!("{}: {}", e.path, e.message)).collect()
            }
        };
        Self::Envelope(if problems.is_empty() { error.to_string() } else { problems.join("; ") })
    }
}

/// A run as stored: its row, and its state — the fold of its log, read a page at a time, so
/// reading a run back holds its state and one page of its log, never the whole log.
pub struct Stored {
    pub id: RunId,
    pub row: RunRow,
    /// Its state, or why its log cannot be folded.
    folded: Result<RunState, ResumeError>,
    /// The seq of its log's last frame.
    pub last_seq: Seq,
}

/// How to complete the `start` of a run stored before `start` recorded the run's inputs and
/// replan caps — a row without `max_replans` — from the run's stored envelope
/// ([`crate::run::legacy`]). `None` for every run stored since.
#[derive(Clone)]
pub struct LegacyStart {
    envelope: String,
    settings: ReplanSettings,
}

impl LegacyStart {
    pub fn of(row: &RunRow, settings: &ReplanSettings) -> Option<Self> {
        row.max_replans.is_none().then(|| Self { envelope: row.envelope.clone(), settings: settings.clone() })
    }
}

impl Stored {
    /// Reads run `run_id` (`NotFound` if there is none).
    pub async fn read(services: &Services, run_id: &RunId) -> Result<Self, StoreError> {
        Ok(Self::read_with(services, run_id, ()).await?.0)
    }

    /// Run `run_id`'s row alone (`NotFound` if there is none): for what the row says without
    /// folding the log (its status).
    pub async fn row(services: &Services, run_id: &RunId) -> Result<RunRow, StoreError> {
        let id = run_id.to_string();
        services.store.read(move |conn| runs::get(conn, &id)).await
    }

    /// [`Stored::read`], each event of the log passed to `reader` first; the reader is handed
    /// back unless the log cannot be folded.
    pub async fn read_with<R: LogReader + Send + 'static>(
        services: &Services,
        run_id: &RunId,
        reader: R,
    ) -> Result<(Self, Option<R>), StoreError> {
        let (id, run_id) = (run_id.to_string(), run_id.clone());
        let settings = services.settings.replan.clone();
        let page = fold_page(services);
        services
            .store
            .read(move |conn| {
                let row = runs::get(conn, &id)?;
                let legacy = LegacyStart::of(&row, &settings);
                let folded =
                    fold_pages(conn, (&run_id, &row.correlation_id), Seq::MAX, (page, legacy.as_ref()), reader)?;
                let (folded, reader, last_seq) = match folded {
                    Ok((state, reader)) => {
                        let last_seq = state.last_seq;
                        (Ok(state), Some(reader), last_seq)
                    }
                    Err(reason) => (Err(reason), None, events::last_seq(conn, &id)?),
                };
                Ok((Self { id: run_id, row, folded, last_seq }, reader))
            })
            .await
    }

    /// The run's state: the fold of its log.
    pub fn state(&self) -> Result<RunState, ResumeError> {
        self.folded.clone()
    }

    /// The run's envelope, validated again (against today's capabilities) as a stored one.
    pub fn envelope(&self, services: &Services) -> Result<TaskEnvelope, ResumeError> {
        Ok(envelope::from_stored(serde_json::from_str(&self.row.envelope)?, &services.registry.catalog())?)
    }
}

/// The most a fold reads of a log at once: the page of the API's streams.
pub fn fold_page(services: &Services) -> events::Page {
    events::Page { frames: 500, bytes: services.settings.limits.stream_page_bytes }
}

/// The state of run `id` (with its correlation id) after its frame `upto`, its log read a page
/// at a time and each event passed to `reader` first (which is handed back with the state).
pub fn fold_pages<R: LogReader>(
    conn: &mut DbConn,
    (id, correlation_id): (&RunId, &str),
    upto: Seq,
    (page, legacy): (events::Page, Option<&LegacyStart>),
    mut reader: R,
) -> Result<Result<(RunState, R), ResumeError>, StoreError> {
    let mut state = RunState::new(id, correlation_id);
    while state.last_seq < upto {
        let mut read = events::page_after(conn, id.as_str(), state.last_seq, page)?;
        read.frames.retain(|frame| frame.seq <= upto);
        let done = !read.more || read.frames.is_empty();
        if let Err(error) = fold(&mut state, &read.frames, legacy, &mut reader) {
            return Ok(Err(error));
        }
        if done {
            break;
        }
    }
    Ok(Ok((state, reader)))
}

/// What a reader of a run's log does with each of its events before the run's state takes it.
pub trait LogReader {
    /// Reads `event` (at `at`), the run's state `before` it: a reader may drop what it does not
    /// need of the event, or follow it into a table of its own.
    fn read(&mut self, before: &RunState, at: state::At, event: &mut Event);
}

/// Reads nothing: only the state is folded.
impl LogReader for () {
    fn read(&mut self, _: &RunState, _: state::At, _: &mut Event) {}
}

/// Follows the run's plan versions' nodes.
impl LogReader for NodeTable {
    fn read(&mut self, before: &RunState, at: state::At, event: &mut Event) {
        self.apply(before, at, event);
    }
}

/// Gathers what a fork needs of its parent's log.
impl LogReader for ParentLog {
    fn read(&mut self, _: &RunState, at: state::At, event: &mut Event) {
        self.push(at.seq, event);
    }
}

/// Applies `frames` of a run's log to its `state`, each event passed to `reader` first. The
/// `start` of a run stored before it said all a reader needs is completed by `legacy`.
pub fn fold(
    state: &mut RunState,
    frames: &[LoggedFrame],
    legacy: Option<&LegacyStart>,
    reader: &mut impl LogReader,
) -> Result<(), ResumeError> {
    for frame in frames {
        let mut decoded = Frame::decode(&frame.json)?;
        if let (Event::Start(start), Some(legacy)) = (&mut decoded.event, legacy) {
            crate::run::legacy::complete_start(start, &legacy.envelope, &legacy.settings)?;
        }
        let at = state::At { seq: decoded.seq, timestamp: decoded.timestamp };
        reader.read(state, at, &mut decoded.event);
        state.apply(at, &decoded.event)?;
    }
    Ok(())
}
