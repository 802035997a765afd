//! A run as stored — its row and its log — read back: its state is the fold of its log.

use super::id::RunId;
use super::nodes::NodeTable;
use super::state::{self, ApplyError, RunState};
use crate::config::ReplanSettings;
use crate::envelope::{self, EnvelopeError, TaskEnvelope};
use crate::events::{Event, Frame, Seq};
use crate::services::Services;
use crate::store::StoreError;
use crate::store::events::{self, LoggedFrame};
use crate::store::runs::{self, RunRow};

/// Why a stored run cannot be picked up again.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("its stored envelope no longer validates: {0}")]
    Envelope(String),
    #[error("its event log cannot be replayed: {0}")]
    Log(#[from] ApplyError),
    #[error("a frame of its log is unreadable: {0}")]
    Frame(#[from] crate::events::DecodeError),
    #[error("its stored data is unreadable: {0}")]
    Json(#[from] serde_json::Error),
    /// Its log has no `start` (a row whose first commit was not flexrun's).
    #[error("its event log has no `start` frame")]
    NotStarted,
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

/// A run as stored: its row and its log.
pub struct Stored {
    pub id: RunId,
    pub row: RunRow,
    pub log: Vec<LoggedFrame>,
    legacy: Option<LegacyStart>,
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
        let (id, run_id) = (run_id.to_string(), run_id.clone());
        let settings = services.settings.replan.clone();
        services
            .store
            .read(move |conn| {
                let row = runs::get(conn, &id)?;
                let log = events::after(conn, &id, Seq::ZERO, i64::MAX)?;
                Ok(Self { id: run_id, legacy: LegacyStart::of(&row, &settings), row, log })
            })
            .await
    }

    /// The run's state: the fold of its log.
    pub fn state(&self) -> Result<RunState, ResumeError> {
        let mut state = RunState::new(&self.id, &self.row.correlation_id);
        fold(&mut state, &self.log, self.legacy.as_ref(), &mut ())?;
        Ok(state)
    }

    /// The run's envelope, validated again (against today's capabilities) as a stored one.
    pub fn envelope(&self, services: &Services) -> Result<TaskEnvelope, ResumeError> {
        Ok(envelope::from_stored(serde_json::from_str(&self.row.envelope)?, &services.registry.catalog())?)
    }
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
