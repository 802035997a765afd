//! A run as stored — its row and its log — read back: its state is the fold of its log.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::id::RunId;
use super::state::{self, ApplyError, RunState};
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
}

impl Stored {
    /// Reads run `run_id` (`NotFound` if there is none).
    pub async fn read(services: &Services, run_id: &RunId) -> Result<Self, StoreError> {
        let (id, run_id) = (run_id.to_string(), run_id.clone());
        services
            .store
            .read(move |conn| {
                Ok(Self { id: run_id, row: runs::get(conn, &id)?, log: events::after(conn, &id, Seq::ZERO, i64::MAX)? })
            })
            .await
    }

    /// The run's state: the fold of its log.
    pub fn state(&self) -> Result<RunState, ResumeError> {
        let mut state = Self::initial(&self.id, &self.row)?;
        fold(&mut state, &self.log, &|_, _| {})?;
        Ok(state)
    }

    /// The state of the run of `row` before its first frame.
    pub fn initial(id: &RunId, row: &RunRow) -> Result<RunState, ResumeError> {
        let inputs = serde_json::from_str::<StoredEnvelope>(&row.envelope)?.inputs;
        Ok(RunState::new(id, &row.correlation_id, &inputs))
    }

    /// The run's envelope, validated again (against today's capabilities).
    pub fn envelope(&self, services: &Services) -> Result<TaskEnvelope, ResumeError> {
        Ok(envelope::from_value(serde_json::from_str(&self.row.envelope)?, &services.registry.catalog())?)
    }
}

/// Applies `frames` of a run's log to its `state`, each event passed through `adapt` (with its
/// frame's seq) first: a reader that does not need some of what an event carries drops it there.
pub fn fold(state: &mut RunState, frames: &[LoggedFrame], adapt: &impl Fn(Seq, &mut Event)) -> Result<(), ResumeError> {
    for frame in frames {
        let mut decoded = Frame::decode(&frame.json)?;
        adapt(decoded.seq, &mut decoded.event);
        state.apply(state::At { seq: decoded.seq, timestamp: decoded.timestamp }, &decoded.event)?;
    }
    Ok(())
}

/// What a run's state needs of its stored envelope.
#[derive(Deserialize)]
struct StoredEnvelope {
    #[serde(default)]
    inputs: Map<String, Value>,
}
