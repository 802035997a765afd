//! Runs: their status state machine, context, replan budget, and the coordinator that drives each
//! run from its first plan to `complete`.

pub mod budget;
pub mod checkpoint;
pub mod context;
mod coordinator;
mod recorder;
pub mod status;

pub use status::{RunStatus, UnknownStatus};

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use uuid::Uuid;

use crate::envelope::{self, EnvelopeError, TaskEnvelope};
use crate::events::payload::{Complete, CompleteStatus, Start};
use crate::events::{Event, FollowError, Frame, FrameHeader, follow_new};
use crate::services::Services;
use crate::store::StoreError;
use crate::store::events::{self, LoggedFrame};
use crate::store::runs::{self, RunRow};
use checkpoint::{Checkpoint, CheckpointError, Counters, Resume};
use coordinator::Coordinator;
use recorder::Recorder;

/// A run that was just created.
pub struct StartedRun {
    pub run_id: String,
    /// Its frames from `start` on, live (subscribed before the coordinator started).
    pub frames: BoxStream<'static, Result<LoggedFrame, FollowError>>,
}

/// Creates a run for a validated envelope and starts its coordinator in the background.
///
/// Returns once the run row and its `start` frame (seq 1) are committed together; the run then
/// proceeds whether or not anyone reads `frames`.
pub async fn start(
    services: &Arc<Services>,
    envelope: TaskEnvelope,
    correlation_id: Option<String>,
) -> Result<StartedRun, StoreError> {
    let run_id = Uuid::now_v7().to_string();
    let correlation_id =
        correlation_id.or_else(|| envelope.correlation_id.clone()).unwrap_or_else(|| Uuid::now_v7().to_string());
    let header = FrameHeader {
        run_id: run_id.as_str().into(),
        correlation_id: correlation_id.as_str().into(),
        plan_version: None,
    };
    let start = Frame::encode(
        &header,
        1,
        &Event::Start(Start {
            run_id: run_id.clone(),
            thread_id: envelope.thread_id.clone(),
            correlation_id: correlation_id.clone(),
        }),
    );
    let now = crate::store::now();
    let row = RunRow {
        run_id: run_id.clone(),
        status: RunStatus::Pending.as_str().to_string(),
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
    };
    let started_at = start.timestamp;
    let logged = LoggedFrame { seq: start.seq, event_type: start.kind.as_str().to_string(), json: start.json.clone() };
    let id = run_id.clone();
    services
        .store
        .write(move |conn| {
            runs::insert(conn, &row)?;
            events::append(conn, &id, &[start])
        })
        .await?;
    let live = services.bus.subscribe(&run_id);
    metrics::counter!("flexrun_runs_started_total").increment(1);
    let recorder = Recorder::new(header, 1, services.store.clone(), services.bus.clone());
    let checkpoint = Checkpoint::fresh(&envelope.inputs, started_at);
    let coordinator = Coordinator::new(services.clone(), Arc::new(envelope), recorder, checkpoint);
    services.runtime.spawn(coordinator.drive(Resume::Plan(None)));
    let frames = follow_new(services.store.clone(), live, run_id.clone(), logged).boxed();
    Ok(StartedRun { run_id, frames })
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
        match resume(services, &run_id).await {
            Ok(true) => resumed += 1,
            Ok(false) => {}
            Err(error) => tracing::error!(%run_id, %error, "could not recover the run"),
        }
    }
    Ok(resumed)
}

/// Resumes one run; `false` when it had to be failed instead.
async fn resume(services: &Arc<Services>, run_id: &str) -> Result<bool, StoreError> {
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
            tracing::info!(%run_id, %status, interrupted = ?checkpoint.interrupted, "resuming run");
            metrics::counter!("flexrun_runs_resumed_total").increment(1);
            let (next, interrupted) = (checkpoint.next.clone(), checkpoint.interrupted.clone());
            let coordinator = Coordinator::new(services.clone(), Arc::new(envelope), recorder, checkpoint);
            services.runtime.spawn(coordinator.resume(next, interrupted));
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
    let counters = Counters {
        planner_attempts: row.planner_attempts as u32,
        goal_condition_replans: row.goal_condition_replans as u32,
        replans: row.replans as u32,
    };
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
    });
    let run_id = recorder.run_id().to_string();
    let result = recorder
        .record(vec![complete], move |conn| {
            runs::transition(conn, &run_id, status, RunStatus::Failed, None)?;
            runs::save_outcome(conn, &run_id, None, Some(&error.to_string()))
        })
        .await;
    recorder.settle();
    result
}
