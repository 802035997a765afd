//! Operator control of stored runs: applies an [`operator`](super::operator) command in one
//! transaction, starts the run's coordinator again when the run goes on, and stops a coordinator
//! of this process when its run is cancelled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use super::budget::ReplanLimits;
use super::operator::{self, Actor, Close, Command, Decision, NodeOutcome, Pending, Refusal, RunState};
use super::status::RunStatus;
use crate::capability::check_output;
use crate::events::payload::HitlRequestInfo;
use crate::events::{BusMessage, FollowError, Frame, FrameHeader, follow};
use crate::services::Services;
use crate::store::events::{self, LoggedFrame};
use crate::store::hitl::{self, DecisionRow, RequestRow};
use crate::store::runs::{self, Progress, RunRow};
use crate::store::{DbConn, StoreError, plans};

/// How long a cancel waits for the run's coordinator to stop.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// A registered coordinator: its registration number and the sender that stops it.
type Entry = (u64, watch::Sender<Option<Actor>>);

/// The coordinators running in this process, by run: how a cancel reaches one.
#[derive(Default)]
pub struct Coordinators {
    running: Mutex<HashMap<String, Entry>>,
    next_id: std::sync::atomic::AtomicU64,
}

/// A coordinator's entry in [`Coordinators`].
pub(super) struct Registration {
    id: u64,
    /// Becomes `Some` (who cancelled) when the run is cancelled.
    pub stop: watch::Receiver<Option<Actor>>,
}

impl Coordinators {
    pub(super) fn register(&self, run_id: &str) -> Registration {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (sender, stop) = watch::channel(None);
        self.lock().insert(run_id.to_string(), (id, sender));
        Registration { id, stop }
    }

    /// Forgets a coordinator that finished (unless another one has taken the run over since).
    pub(super) fn deregister(&self, run_id: &str, registration: &Registration) {
        let mut running = self.lock();
        if running.get(run_id).is_some_and(|(id, _)| *id == registration.id) {
            running.remove(run_id);
        }
    }

    /// Asks the run's coordinator to stop; `false` when none runs here.
    fn stop(&self, run_id: &str, actor: &Actor) -> bool {
        self.lock().get(run_id).is_some_and(|(_, sender)| sender.send(Some(actor.clone())).is_ok())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Why an operator command was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A command applied.
pub struct Applied {
    /// The run's status right after the command.
    pub status: RunStatus,
    /// The run's frames from the first one the command committed, until the run ends or waits
    /// for an operator again.
    pub frames: BoxStream<'static, Result<LoggedFrame, FollowError>>,
}

/// What the transaction committed.
struct Committed {
    status: RunStatus,
    frames: Vec<Frame>,
    /// The last seq before the command's frames.
    after: u64,
}

/// Applies `command` to the run: checks it against the run's stored state and commits its
/// effect with its frames in one transaction, then lets the run go on when it should.
pub async fn apply(services: &Arc<Services>, run_id: &str, command: Command) -> Result<Applied, ControlError> {
    let command = match command {
        Command::Cancel { actor, .. } => Command::Cancel { stopped: stop(services, run_id, &actor).await, actor },
        other => other,
    };
    let (shared, id) = (services.clone(), run_id.to_string());
    // A refusal writes nothing; a failed write rolls the whole command back.
    let committed = services
        .store
        .write(move |conn| match commit(conn, &shared, &id, command.clone()) {
            Ok(committed) => Ok(Ok(committed)),
            Err(ControlError::Refused(refusal)) => Ok(Err(refusal)),
            Err(ControlError::Store(error)) => Err(error),
        })
        .await??;
    let frames = follow(services.store.clone(), &services.bus, run_id.to_string(), committed.after).boxed();
    if !committed.frames.is_empty() {
        services.bus.publish(run_id, BusMessage::Frames(committed.frames.into()));
    }
    if committed.status.is_active() {
        super::resume(services, run_id, false).await?;
    } else {
        services.bus.settle(run_id);
    }
    Ok(Applied { status: committed.status, frames })
}

/// Asks this process's coordinator of the run to stop, and waits until it has.
async fn stop(services: &Services, run_id: &str, actor: &Actor) -> bool {
    let mut live = services.bus.subscribe(run_id);
    if !services.coordinators.stop(run_id, actor) {
        return false;
    }
    let settled = async {
        loop {
            match live.recv().await {
                Ok(BusMessage::Settled) | Err(RecvError::Closed) => return,
                Ok(BusMessage::Frames(_)) | Err(RecvError::Lagged(_)) => {}
            }
        }
    };
    tokio::time::timeout(STOP_WAIT, settled).await.is_ok()
}

/// The transaction: reads the run, decides, writes.
fn commit(conn: &mut DbConn, services: &Services, run_id: &str, command: Command) -> Result<Committed, ControlError> {
    let row = match runs::get(conn, run_id) {
        Err(StoreError::NotFound(_)) => return Err(Refusal::NotFound(run_id.to_string()).into()),
        row => row?,
    };
    let status = row.status()?;
    let state = run_state(conn, services, &row, status)?;
    let capabilities = services.registry.snapshot();
    let decision = operator::decide(&state, command, Utc::now(), |capability_id, output| {
        let Some(capability) = capabilities.get(capability_id) else { return Vec::new() };
        let mut problems = match check_output(&capability.output_contract, output) {
            Err(crate::capability::CapabilityError::Contract(violations)) => violations,
            _ => Vec::new(),
        };
        problems.extend(services.facets.output_violations(&capability.output_facets, output));
        problems
    })?;
    write(conn, &row, status, &decision)?;
    let after = events::last_seq(conn, run_id)?;
    let header = FrameHeader {
        run_id: run_id.into(),
        correlation_id: row.correlation_id.as_str().into(),
        plan_version: (row.plan_version > 0).then_some(row.plan_version as u32),
    };
    let frames: Vec<Frame> =
        decision.events.iter().zip(after + 1..).map(|(event, seq)| Frame::encode(&header, seq, event)).collect();
    events::append(conn, run_id, &frames)?;
    Ok(Committed { status: decision.to.unwrap_or(status), frames, after })
}

/// The run as [`operator::decide`] sees it.
fn run_state(conn: &mut DbConn, services: &Services, row: &RunRow, status: RunStatus) -> Result<RunState, StoreError> {
    let envelope: Value = serde_json::from_str(&row.envelope)?;
    let limits = ReplanLimits::of_stored(&envelope, &services.settings.replan)?;
    let pending = hitl::pending(conn, &row.run_id)?.map(|r| pending_request(&r)).transpose()?;
    Ok(RunState {
        run_id: row.run_id.clone(),
        status,
        plan_version: row.plan_version as u32,
        pending,
        replans_left: limits.max_replans.saturating_sub(row.replans as u32),
        max_replans: limits.max_replans,
    })
}

/// A stored request: its details are the request as its frame showed it.
pub fn pending_request(row: &RequestRow) -> Result<Pending, StoreError> {
    let info: HitlRequestInfo = serde_json::from_str(&row.details)?;
    let text = |key: &str| info.context[key].as_str().unwrap_or_default().to_string();
    Ok(Pending { capability_id: text("capabilityId"), label: text("label"), info })
}

/// Applies a decision's changes to the run's rows.
fn write(conn: &mut DbConn, row: &RunRow, status: RunStatus, decision: &Decision) -> Result<(), StoreError> {
    let (run_id, version, now) = (row.run_id.as_str(), row.plan_version, crate::store::now());
    if let Some(to) = decision.to {
        let progress = decision.replan.then(|| {
            let mut counts = row.replan_counts();
            counts.operator += 1;
            counts.total += 1;
            Progress::new(row.plan_version as u32, row.planner_attempts as u32, &counts)
        });
        runs::transition(conn, run_id, status, to, progress.as_ref())?;
    }
    match &decision.close {
        Some(Close::Resolved(request_id)) => hitl::close(conn, request_id, "resolved", now)?,
        Some(Close::All(status)) => hitl::close_all(conn, run_id, status, now)?,
        None => {}
    }
    if let Some(record) = &decision.record {
        hitl::decide(
            conn,
            &DecisionRow {
                request_id: record.request_id.clone(),
                run_id: run_id.to_string(),
                decision: record.decision.to_string(),
                operator: record.actor.operator.as_ref().map(Value::to_string),
                note: record.actor.note.clone(),
                feedback: record.feedback.clone(),
                payload: record.payload.as_ref().map(Value::to_string),
                decided_at: now,
            },
        )?;
    }
    if decision.replan {
        plans::discard_unfinished(conn, run_id, version)?;
    }
    match &decision.node {
        Some(NodeOutcome::Completed { node_id, output }) => {
            plans::node_finished(conn, (run_id, version, node_id), "completed", Some(&output.to_string()), None, now)?
        }
        Some(NodeOutcome::Failed { node_id, error }) => {
            plans::node_finished(conn, (run_id, version, node_id), "failed", None, Some(&error.to_string()), now)?
        }
        None => {}
    }
    if let Some(error) = &decision.error {
        runs::save_outcome(conn, run_id, None, Some(&error.to_string()))?;
    }
    Ok(())
}
