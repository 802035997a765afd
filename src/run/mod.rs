//! Runs: their status state machine, context, replan budget, and the coordinator that drives each
//! run from its first plan to `complete`.

pub mod budget;
pub mod context;
mod coordinator;
mod recorder;
pub mod status;

pub use status::{RunStatus, UnknownStatus};

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use uuid::Uuid;

use crate::envelope::TaskEnvelope;
use crate::events::payload::Start;
use crate::events::{Event, FollowError, Frame, FrameHeader, follow_new};
use crate::services::Services;
use crate::store::StoreError;
use crate::store::events::{self, LoggedFrame};
use crate::store::runs::{self, RunRow};
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
    let coordinator = Coordinator::new(services.clone(), Arc::new(envelope), recorder, started_at);
    services.runtime.spawn(coordinator.drive());
    let frames = follow_new(services.store.clone(), live, run_id.clone(), logged).boxed();
    Ok(StartedRun { run_id, frames })
}
