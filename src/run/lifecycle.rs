//! A run's life on this node: started from an envelope ([`start`]), or picked up again from its
//! stored log ([`drive_claimed`]) — by recovery, by a node taking it over, or after an operator's
//! command — and failed when it cannot go on ([`fail_stored`]). Each hands the run's log to a
//! coordinator spawned on the coordinators' runtime.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use uuid::Uuid;

use super::coordinator::{Coordinator, Resume};
use super::decide;
use super::follow::{FollowError, follow, follow_new};
use super::id::RunId;
use super::lease::claims::Claim;
use super::log::{self, RunLog};
use super::state::RunState;
use super::status::RunStatus;
use super::stored::Stored;
use crate::budget::BudgetLimits;
use crate::envelope::{EnvelopeError, TaskEnvelope};
use crate::events::payload::Start;
use crate::events::{Event, Seq};
use crate::replan_budget::ReplanLimits;
use crate::services::Services;
use crate::store::StoreError;
use crate::store::events::LoggedFrame;
use crate::store::runs::{self, RunRow};
use crate::thread::ThreadRule;
use flexrun_core::run::fork::ForkPlan;
use flexrun_core::trace::TraceParent;

/// A run that was just created (or, for a repeated idempotency key, found again).
pub struct StartedRun {
    pub run_id: RunId,
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
    /// The envelope asks for what this server does not allow (a budget above its ceiling).
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
}

/// Who starts a run, and how: what the request said besides the envelope.
pub struct Origin<'a> {
    pub correlation_id: Option<String>,
    pub idempotency: Option<Idempotency>,
    /// The principal the run belongs to.
    pub owner: &'a str,
    pub thread_rule: ThreadRule,
    /// The caller's span (`traceparent`): the run's trace is its child.
    pub trace_parent: Option<TraceParent>,
}

/// Creates a run for a validated envelope and starts its coordinator in the background.
///
/// With [`ThreadRule::OneActiveRun`] the first commit fails with [`StoreError::ThreadBusy`] if
/// the envelope's thread has a run in progress.
///
/// Returns once the run row, its `start` frame (seq 1) and its first `plan_requested` are committed
/// together; the run then proceeds whether or not anyone reads `frames`. With an `idempotency` key that already made a
/// run, that run's stream is returned instead (from `start`), if the request body is the same.
pub async fn start(
    services: &Arc<Services>,
    envelope: TaskEnvelope,
    origin: Origin<'_>,
) -> Result<StartedRun, StartError> {
    create(services, envelope, origin, None).await
}

/// Creates a fork of another run, as [`start`] creates a run: its first commit holds the row, the
/// `start` frame (with `forkedFrom`), the parent's plan version `fork` installs and a
/// `node_complete` for each node it reuses; its coordinator then executes what is left.
pub(super) async fn start_fork(
    services: &Arc<Services>,
    envelope: TaskEnvelope,
    fork: ForkPlan,
    origin: Origin<'_>,
) -> Result<StartedRun, StartError> {
    create(services, envelope, origin, Some(fork)).await
}

async fn create(
    services: &Arc<Services>,
    mut envelope: TaskEnvelope,
    origin: Origin<'_>,
    fork: Option<ForkPlan>,
) -> Result<StartedRun, StartError> {
    let Origin { correlation_id, idempotency, owner, thread_rule, trace_parent } = origin;
    let run_id = RunId::generate();
    let correlation_id =
        correlation_id.or_else(|| envelope.correlation_id.clone()).unwrap_or_else(|| Uuid::now_v7().to_string());
    if let Some(idempotency) = &idempotency {
        let key = idempotency.key.clone();
        if let Some(existing) = services.store.read(move |conn| runs::by_idempotency_key(conn, &key)).await? {
            return rejoin(services, idempotency, existing);
        }
    }
    let mut claim = services.claims.try_claim(&run_id).ok_or_else(|| StoreError::Conflict(format!("run {run_id}")))?;
    if services.claims.leasing().is_some() {
        // A new run's first lease, taken by its first commit.
        claim = claim.leased(crate::store::leases::FIRST_EPOCH);
    }
    let replan_limits = ReplanLimits::resolve(&envelope.replan, &services.settings.replan);
    let budget = BudgetLimits::resolve(&envelope.budget, &services.budget)
        .map_err(|problem| StartError::Envelope(EnvelopeError::Invalid(vec![problem])))?;
    // A run's own model chains name only what this server serves.
    let models = &envelope.models;
    let mut problems = services.models.check(&models.planner, "/policies/models/planner");
    problems.extend(services.models.check(&models.capabilities, "/policies/models/capabilities"));
    if !problems.is_empty() {
        return Err(StartError::Envelope(EnvelopeError::Invalid(problems)));
    }
    let start = Event::Start(Start {
        run_id: run_id.to_string(),
        thread_id: envelope.thread_id.clone(),
        correlation_id: correlation_id.clone(),
        inputs: Some(envelope.inputs.clone()),
        replan_limits: Some(replan_limits),
        budget,
        forked_from: fork.as_ref().map(|fork| fork.forked_from.clone()),
        trace: services.traces.begin_run(trace_parent),
    });
    let now = crate::store::now();
    let row = RunRow {
        run_id: run_id.to_string(),
        // The status and counters are the state's at the first commit (`Coordinator::open`).
        status: RunStatus::Planning,
        objective: envelope.objective.clone(),
        envelope: envelope.take_raw().to_string(),
        thread_id: envelope.thread_id.clone(),
        correlation_id: correlation_id.clone(),
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
        owner: Some(owner.to_string()),
        parent_run_id: fork.as_ref().map(|fork| fork.forked_from.run_id.clone()).or_else(|| envelope.rerun_of.clone()),
        max_replans: Some(i32::try_from(replan_limits.max_replans).unwrap_or(i32::MAX)),
        usage: None,
    };
    // Subscribed before the first commit: the stream gets every frame, `start` first.
    let live = services.bus.subscribe(run_id.as_str());
    let state = RunState::new(&run_id, &correlation_id);
    let log = RunLog::create(services, claim, state, row, thread_rule);
    let mut coordinator = Coordinator::new(services.clone(), Arc::new(envelope), log);
    let forked = fork.is_some();
    let opened = match fork {
        None => coordinator.open(start).await,
        Some(fork) => coordinator.open_fork(start, fork).await,
    };
    if let Err(error) = opened {
        coordinator.let_go();
        let error = match error {
            log::LogError::Store(error) => error,
            other => StoreError::Commit(other.to_string()),
        };
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
    crate::telemetry::run_started();
    tracing::info!(%run_id, owner, forked, "run started");
    if coordinator.waits() {
        // A fork created waiting for its plan's approval: the operator's answer drives it on.
        coordinator.let_go();
    } else {
        let owner = coordinator.owner();
        spawn(services, owner, coordinator.drive(if forked { Resume::Execute } else { Resume::Requested }));
    }
    let frames = follow_new(services, live, run_id.to_string()).boxed();
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
    let frames = follow(services, run_id.clone(), Seq::ZERO).boxed();
    let run_id = RunId::parse(&run_id).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(StartedRun { run_id, frames, replayed: true })
}

/// Starts a coordinator for a stored active run, holding its `claim` (after a restart, with a
/// `log` frame saying so when `announce`); `false` when the run had to be failed instead.
pub(super) async fn drive_claimed(
    services: &Arc<Services>,
    claim: Claim,
    stored: &Stored,
    announce: bool,
) -> Result<bool, StoreError> {
    let run_id = stored.id.clone();
    let ready = stored.state().and_then(|state| Ok((stored.envelope(services)?, state)));
    match ready {
        Ok((envelope, state)) => {
            let log = RunLog::resume(services, claim, state, &stored.row);
            continue_run(services, envelope, log, announce);
            Ok(true)
        }
        Err(reason) => {
            tracing::error!(%run_id, reason = %crate::excerpt::log(&reason), "run cannot be resumed; failing it");
            let failure = decide::ending::unresumable(&reason.to_string());
            fail_stored(services, claim, stored, failure).await.map(|()| false)
        }
    }
}

/// Hands a run's log to a new coordinator, which carries on where the log's state stands.
pub(super) fn continue_run(services: &Arc<Services>, mut envelope: TaskEnvelope, log: RunLog, announce: bool) {
    envelope.take_raw();
    let state = log.state();
    tracing::info!(run_id = %state.run_id, status = %state.status, announce, "resuming run");
    let next = next_step(state);
    let coordinator = Coordinator::new(services.clone(), Arc::new(envelope), log);
    let owner = coordinator.owner();
    if announce {
        crate::telemetry::run_resumed();
        spawn(services, owner, coordinator.resume(next));
    } else {
        spawn(services, owner, coordinator.drive(next));
    }
}

/// Runs a coordinator as a task of the coordinators' runtime, noted with the claim it holds
/// (`owner`: the run and the claim's number) so a lost lease can stop it. Its future is boxed
/// first: it holds every state a run passes through (kilobytes), and the runtime copies an
/// unboxed future whole into the task and again over it when it ends, once for every run.
fn spawn(services: &Services, (run_id, claim): (RunId, u64), coordinator: impl Future<Output = ()> + Send + 'static) {
    let task = services.runtime.spawn(Box::pin(coordinator));
    services.claims.attach_task(&run_id, claim, task.abort_handle());
}

/// What a coordinator picking a run up does first, from where its state stands.
fn next_step(state: &RunState) -> Resume {
    match (state.status, &state.failed, state.plan()) {
        (RunStatus::Running, Some(failure), _) => Resume::NodeFailed(failure.clone()),
        (RunStatus::Running, None, Some(_)) => Resume::Execute,
        // Pending, planning, or running without a plan (the plan's commit is what moves a run to
        // running, so this is a log flexrun did not write): plan.
        (_, _, plan) => Resume::Plan(plan.and(state.replan.clone())),
    }
}

/// Fails a stored run that is not to go on, with `failure` on `complete` (from its state, or from
/// its last frame when the state cannot be read back). A node its log shows running — in flight
/// when its process died, perhaps what killed it — ends with the run, with `failure`'s code: an
/// ended run has no running node.
pub(super) async fn fail_stored(
    services: &Services,
    claim: Claim,
    stored: &Stored,
    failure: decide::Failure,
) -> Result<(), StoreError> {
    let state = stored.state().unwrap_or_else(|_| {
        RunState::unreadable(&stored.id, &stored.row.correlation_id, stored.row.status, stored.last_seq)
    });
    let mut log = RunLog::resume(services, claim, state, &stored.row);
    let events = decide::ending::stopped(log.state(), failure);
    let result = log.record(events).await;
    log.settle();
    result.map_err(|e| match e {
        log::LogError::Store(error) => error,
        other => StoreError::Commit(other.to_string()),
    })
}
