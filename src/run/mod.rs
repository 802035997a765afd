//! Runs: their status state machine, context, replan budget, and the coordinator that drives each
//! run from its first plan to `complete`.

pub mod budget;
pub mod checkpoint;
pub mod context;
pub mod control;
mod coordinator;
pub mod operator;
mod recorder;
pub mod status;

pub use control::{Applied, ControlError, Coordinators, apply};
pub use status::{RunStatus, UnknownStatus};

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use uuid::Uuid;

use crate::envelope::{self, EnvelopeError, TaskEnvelope};
use crate::events::payload::{Complete, CompleteStatus, Start};
use crate::events::{Event, FollowError, FrameHeader, follow, follow_new};
use crate::services::Services;
use crate::store::StoreError;
use crate::store::events::{self, LoggedFrame};
use crate::store::runs::{self, RunRow};
use checkpoint::{Checkpoint, CheckpointError, Counters, Resume};
use coordinator::Coordinator;
use recorder::Recorder;

/// A run that was just created (or, for a repeated idempotency key, found again).
pub struct StartedRun {
    pub run_id: String,
    /// Its frames from `start` on, live (subscribed before the coordinator started).
    pub frames: BoxStream<'static, Result<LoggedFrame, FollowError>>,
    /// The run existed already: the request repeated an idempotency key.
    pub replayed: bool,
}

/// An `Idempotency-Key` as stored with a run: scoped to the caller that sent it, with a hash of
/// the request body it came with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    pub key: String,
    pub request_hash: String,
}

/// Why no run was started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("this Idempotency-Key was already used, for run {run_id}, with a different request body")]
    KeyReused { run_id: String },
}

/// Creates a run for a validated envelope and starts its coordinator in the background.
///
/// Returns once the run row, its `start` frame (seq 1) and its first `plan_requested` are committed
/// together; the run then proceeds whether or not anyone reads `frames`. With an `idempotency` key that already made a
/// run, that run's stream is returned instead (from `start`), if the request body is the same.
pub async fn start(
    services: &Arc<Services>,
    envelope: TaskEnvelope,
    correlation_id: Option<String>,
    idempotency: Option<Idempotency>,
) -> Result<StartedRun, StartError> {
    let run_id = Uuid::now_v7().to_string();
    let correlation_id =
        correlation_id.or_else(|| envelope.correlation_id.clone()).unwrap_or_else(|| Uuid::now_v7().to_string());
    if let Some(idempotency) = &idempotency {
        let key = idempotency.key.clone();
        if let Some(existing) = services.store.read(move |conn| runs::by_idempotency_key(conn, &key)).await? {
            return rejoin(services, idempotency, existing);
        }
    }
    let header = FrameHeader {
        run_id: run_id.as_str().into(),
        correlation_id: correlation_id.as_str().into(),
        plan_version: None,
    };
    let start =
        Start { run_id: run_id.clone(), thread_id: envelope.thread_id.clone(), correlation_id: correlation_id.clone() };
    let started_at = chrono::Utc::now();
    let now = started_at.naive_utc();
    let row = RunRow {
        run_id: run_id.clone(),
        // Committed with the first plan request (`Coordinator::open`).
        status: RunStatus::Planning.as_str().to_string(),
        objective: envelope.objective.clone(),
        envelope: envelope.raw.to_string(),
        thread_id: envelope.thread_id.clone(),
        correlation_id,
        plan_version: 0,
        planner_attempts: 0,
        goal_condition_replans: 0,
        replans: 0,
        result: None,
        error: None,
        created_at: now,
        updated_at: now,
        idempotency_key: idempotency.as_ref().map(|i| i.key.clone()),
        request_hash: idempotency.as_ref().map(|i| i.request_hash.clone()),
        signal_replans: 0,
        policy_replans: 0,
        operator_replans: 0,
        post_condition_replans: 0,
    };
    // Subscribed before the first commit: the stream gets every frame, `start` first.
    let live = services.bus.subscribe(&run_id);
    let recorder = Recorder::new(header, 0, services.store.clone(), services.bus.clone());
    let checkpoint = Checkpoint::fresh(&envelope.inputs, started_at);
    let mut coordinator = Coordinator::new(services.clone(), Arc::new(envelope), recorder, checkpoint);
    if let Err(error) = coordinator.open(start, row).await {
        coordinator.abandon();
        return match &idempotency {
            // Another request (or a server sharing the database) made a run with this key first.
            Some(idempotency) if error.is_unique_violation() => {
                let key = idempotency.key.clone();
                let existing = services.store.read(move |conn| runs::by_idempotency_key(conn, &key)).await?;
                rejoin(services, idempotency, existing.ok_or(error)?)
            }
            _ => Err(error.into()),
        };
    }
    metrics::counter!("flexrun_runs_started_total").increment(1);
    services.runtime.spawn(coordinator.drive(Resume::Requested));
    let frames = follow_new(services.store.clone(), live, run_id.clone()).boxed();
    Ok(StartedRun { run_id, frames, replayed: false })
}

/// The stream of the run an idempotency key already made, if the request body is the same.
fn rejoin(
    services: &Services,
    idempotency: &Idempotency,
    (run_id, request_hash): (String, Option<String>),
) -> Result<StartedRun, StartError> {
    if request_hash.as_deref() != Some(idempotency.request_hash.as_str()) {
        return Err(StartError::KeyReused { run_id });
    }
    let frames = follow(services.store.clone(), &services.bus, run_id.clone(), 0).boxed();
    Ok(StartedRun { run_id, frames, replayed: true })
}

/// Why a run left active by an earlier process cannot be picked up again.
#[derive(Debug, thiserror::Error)]
enum ResumeError {
    #[error("its stored envelope no longer validates: {0}")]
    Envelope(String),
    #[error("its event log cannot be replayed: {0}")]
    Checkpoint(#[from] CheckpointError),
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

/// Picks up every run an earlier process left `pending`, `planning` or `running` (it stopped or
/// crashed), from its last committed state; see [`Checkpoint`]. A run that cannot be resumed is
/// failed with `resume_failed` rather than left active. Returns how many runs were resumed.
///
/// Call once at start-up, before other processes could work on the same database: runs are not
/// leased, so two servers recovering the same database would both drive its runs.
pub async fn recover(services: &Arc<Services>) -> Result<usize, StoreError> {
    let run_ids = services.store.read(runs::active_ids).await?;
    let mut resumed = 0;
    for run_id in run_ids {
        match resume(services, &run_id, true).await {
            Ok(true) => resumed += 1,
            Ok(false) => {}
            Err(error) => tracing::error!(%run_id, %error, "could not recover the run"),
        }
    }
    Ok(resumed)
}

/// Starts a coordinator for an active run from its committed state (after a restart, with a `log`
/// frame saying so when `announce`, or after an operator's decision); `false` when the run had
/// to be failed instead.
async fn resume(services: &Arc<Services>, run_id: &str, announce: bool) -> Result<bool, StoreError> {
    let id = run_id.to_string();
    let (row, log) =
        services.store.read(move |c| Ok((runs::get(c, &id)?, events::after(c, &id, 0, i64::MAX)?))).await?;
    let status = row.status()?;
    let last_seq = log.last().map_or(0, |f| f.seq);
    let header = FrameHeader {
        run_id: run_id.into(),
        correlation_id: row.correlation_id.as_str().into(),
        plan_version: (row.plan_version > 0).then_some(row.plan_version as u32),
    };
    let recorder = Recorder::new(header, last_seq, services.store.clone(), services.bus.clone());
    match checkpoint(services, &row, status, &log) {
        Ok((envelope, checkpoint)) => {
            tracing::info!(%run_id, %status, interrupted = ?checkpoint.interrupted, announce, "resuming run");
            let (next, interrupted) = (checkpoint.next.clone(), checkpoint.interrupted.clone());
            let coordinator = Coordinator::new(services.clone(), Arc::new(envelope), recorder, checkpoint);
            if announce {
                metrics::counter!("flexrun_runs_resumed_total").increment(1);
                services.runtime.spawn(coordinator.resume(next, interrupted));
            } else {
                services.runtime.spawn(coordinator.drive(next));
            }
            Ok(true)
        }
        Err(reason) => {
            tracing::error!(%run_id, %reason, "run cannot be resumed; failing it");
            abandon(recorder, status, &reason).await.map(|()| false)
        }
    }
}

/// The envelope and committed state of a run, read back.
fn checkpoint(
    services: &Services,
    row: &RunRow,
    status: RunStatus,
    log: &[LoggedFrame],
) -> Result<(TaskEnvelope, Checkpoint), ResumeError> {
    let envelope = envelope::from_value(serde_json::from_str(&row.envelope)?, &services.registry.catalog())?;
    let frames = log.iter().map(|f| serde_json::from_str(&f.json)).collect::<Result<Vec<serde_json::Value>, _>>()?;
    let counters = Counters { planner_attempts: row.planner_attempts as u32, replans: row.replan_counts() };
    let checkpoint = Checkpoint::replay(status, counters, &envelope.inputs, &frames)?;
    Ok((envelope, checkpoint))
}

/// Fails a run that cannot be resumed, with its reason on `complete`.
async fn abandon(mut recorder: Recorder, status: RunStatus, reason: &ResumeError) -> Result<(), StoreError> {
    let error = serde_json::json!({"code": "resume_failed", "message": format!("The run cannot be resumed: {reason}")});
    let complete = Event::Complete(Complete {
        status: CompleteStatus::Failed,
        output: serde_json::Value::Null,
        goal_condition_results: None,
        error: Some(error.clone()),
        post_condition_results: Vec::new(),
    });
    let run_id = recorder.run_id().to_string();
    let result = recorder
        .record(vec![complete], move |conn| {
            runs::end(conn, &run_id, status, RunStatus::Failed, &runs::Outcome::Error(error.to_string()))
        })
        .await;
    recorder.settle();
    result
}
