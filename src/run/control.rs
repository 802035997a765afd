//! Operator control of stored runs: applies an [`operator`](super::operator) command through the
//! run's log, holding the run's claim — so it is the run's only writer while it decides and
//! commits — and hands the claim to a new coordinator when the run goes on.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::json;

use super::decide::operator::{self, Decision, Refusal};
use super::follow::{FollowError, follow};
use super::id::RunId;
use super::lease::claims::Claim;
use super::lease::notify::{STOP, StopNotice};
use super::log::{LogError, RunLog};
use super::operator::{Actor, Command};
use super::projection::RowWrite;
use super::status::RunStatus;
use super::stored::{ResumeError, Stored};
use crate::capability::check_output;
use crate::services::Services;
use crate::store::events::LoggedFrame;
use crate::store::hitl::DecisionRow;
use crate::store::{StoreError, leases};

/// How long a cancel waits for the run's coordinator to stop.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// How long a command waits for a coordinator that is just letting go of a run (it paused).
const HANDOVER_WAIT: Duration = Duration::from_secs(5);

/// Why an operator command was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the run's stored state is unreadable: {0}")]
    Unreadable(#[from] ResumeError),
}

impl From<super::state::ApplyError> for ControlError {
    fn from(error: super::state::ApplyError) -> Self {
        Self::Unreadable(error.into())
    }
}

impl From<LogError> for ControlError {
    fn from(error: LogError) -> Self {
        match error {
            LogError::Store(error) => Self::Store(error),
            LogError::Apply(error) => Self::Unreadable(error.into()),
            LogError::Draining => Self::Store(StoreError::Conflict("the node is draining".into())),
        }
    }
}

/// A command applied.
pub struct Applied {
    /// The run's status right after the command.
    pub status: RunStatus,
    /// The run's frames from the first one the command committed, until the run ends or waits
    /// for an operator again.
    pub frames: BoxStream<'static, Result<LoggedFrame, FollowError>>,
}

/// Applies `command` to the run: decides it on the run's state and records its frames (and what
/// no frame carries) in one transaction, then lets the run go on when it should.
pub async fn apply(services: &Arc<Services>, run_id: &RunId, command: Command) -> Result<Applied, ControlError> {
    tracing::info!(%run_id, principal = command.actor().principal, command = command.name(), "operator command");
    let (claim, command) = claim(services, run_id, command).await?;
    let epoch = claim.epoch();
    let applied = apply_claimed(services, run_id, claim, command).await;
    let driven = matches!(&applied, Ok(applied) if applied.status.is_active());
    if let (false, Some(epoch)) = (driven, epoch) {
        // Unless a coordinator now drives the run, the command lets go of the lease it took —
        // refused, or with nothing to commit — or nobody could take the run until it ran out.
        // (Fenced if the lease moved on meanwhile: then it is not this command's.)
        let id = run_id.to_string();
        let _ = services.store.write(move |conn| leases::release(conn, &id, epoch)).await;
    }
    applied
}

/// [`apply`], holding the run's claim.
async fn apply_claimed(
    services: &Arc<Services>,
    run_id: &RunId,
    claim: Claim,
    command: Command,
) -> Result<Applied, ControlError> {
    let stored = read(services, run_id).await?;
    let state = stored.state()?;
    let decision = decide(services, &state, command)?;
    let mut log = RunLog::resume(services, claim, state, &stored.row);
    // Subscribed before the commit: the stream starts with the command's first frame.
    let frames = follow(services, run_id.to_string(), log.state().last_seq).boxed();
    log.stage(decision.events.clone())?;
    log.stage_rows(rows(&log, &decision));
    log.commit().await?;
    let status = log.state().status;
    if !status.is_active() {
        log.settle();
        return Ok(Applied { status, frames });
    }
    match stored.envelope(services) {
        Ok(envelope) => super::lifecycle::continue_run(services, envelope, log, false),
        Err(reason) => {
            tracing::error!(%run_id, reason = %crate::excerpt::log(&reason), "run cannot go on; failing it");
            let events = super::decide::ending::failed(
                log.state(),
                super::decide::ending::unresumable(&reason.to_string()),
                Vec::new(),
            );
            log.record(events).await?;
            log.settle();
        }
    }
    Ok(Applied { status, frames })
}

/// Takes the run's claim for `command` — and with leases (several nodes), the run's lease.
async fn claim(services: &Arc<Services>, run_id: &RunId, command: Command) -> Result<(Claim, Command), ControlError> {
    let (claim, command) = claim_here(services, run_id, command).await?;
    // A cancel that a coordinator here honoured has nothing left to commit: it needs no lease.
    if services.claims.leasing().is_none() || matches!(command, Command::Cancel { stopped: true, .. }) {
        return Ok((claim, command));
    }
    if let Some(epoch) = take_lease(services, run_id).await? {
        return Ok((claim.leased(epoch), command));
    }
    // Another node drives the run — or a command here is just letting go of the lease. A cancel
    // asks the driver to stop and waits for the lease to be let go of (the cancellation ends the
    // run); any other command is refused as while a coordinator here drives the run.
    let stored = read(services, run_id).await?;
    let Command::Cancel { actor, .. } = command else {
        decide(services, &stored.state()?, command)?;
        return Err(Refusal::Busy(run_id.to_string()).into());
    };
    // A run that already ended is refused now: waiting for the lease of whoever holds it would
    // take their cancellation for this one's.
    let not_yet_stopped = Command::Cancel { stopped: false, actor: actor.clone() };
    decide(services, &stored.state()?, not_yet_stopped)?;
    let epoch = cancel_elsewhere(services, run_id, &actor).await?;
    // The run was live when asked, so a cancellation now is the driver's answer to a notice —
    // this one's, unless a cancel through another node asked at the same moment: which notice
    // the driver honoured is not recorded, and both are told they stopped it.
    let stopped = Stored::row(services, run_id).await?.status == RunStatus::Cancelled;
    Ok((claim.leased(epoch), Command::Cancel { stopped, actor }))
}

/// The run's lease, if no live node holds it (it waits for an operator, ended, or its node died).
async fn take_lease(services: &Services, run_id: &RunId) -> Result<Option<i64>, ControlError> {
    let Some(leasing) = services.claims.leasing() else { return Ok(None) };
    let (id, node, seconds) = (run_id.to_string(), leasing.node.clone(), leasing.lease.as_secs_f64());
    let taken = services.store.write(move |conn| leases::take_free(conn, &id, &node, seconds)).await?;
    if taken.is_some() {
        crate::telemetry::lease_claims("command", 1);
    }
    Ok(taken.map(|lease| lease.lease_epoch))
}

/// Asks the node driving the run to cancel it for `actor` (`NOTIFY`), then waits up to
/// [`STOP_WAIT`] for the run's lease, which that node lets go of as it commits the cancellation.
///
/// The notice is sent again every [`STOP_RENOTICE`]: a node drops a notice for a run it does not
/// hold at that moment, and the run may be changing hands — its node died and another is
/// claiming it, or its driver's listener is reconnecting. A driver already stopping the run
/// takes a second notice as nothing.
async fn cancel_elsewhere(services: &Services, run_id: &RunId, actor: &Actor) -> Result<i64, ControlError> {
    let payload = StopNotice::payload(run_id, actor);
    let deadline = tokio::time::Instant::now() + STOP_WAIT;
    let mut next_notice = tokio::time::Instant::now();
    while tokio::time::Instant::now() < deadline {
        if tokio::time::Instant::now() >= next_notice {
            let payload = payload.clone();
            services.store.write(move |conn| leases::notify(conn, STOP, &payload)).await?;
            next_notice += STOP_RENOTICE;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Some(epoch) = take_lease(services, run_id).await? {
            return Ok(epoch);
        }
    }
    Err(Refusal::Busy(run_id.to_string()).into())
}

/// How often [`cancel_elsewhere`] asks again.
const STOP_RENOTICE: Duration = Duration::from_secs(1);

/// Takes the run's claim in this process for `command`. A cancel first stops the run's
/// coordinator (here) and waits for it; another command waits only for a coordinator letting go
/// of a run that is pausing, and is refused while a coordinator drives the run.
async fn claim_here(
    services: &Arc<Services>,
    run_id: &RunId,
    command: Command,
) -> Result<(Claim, Command), ControlError> {
    if let Command::Cancel { actor, .. } = command {
        let claimed = services.claims.claim_to_cancel(run_id, &actor, STOP_WAIT).await;
        let (claim, stopped) = claimed.ok_or_else(|| Refusal::Busy(run_id.to_string()))?;
        return Ok((claim, Command::Cancel { stopped, actor }));
    }
    if let Some(claim) = services.claims.try_claim(run_id) {
        return Ok((claim, command));
    }
    // A coordinator holds the run: what the command would do to the run as committed says
    // whether it could apply at all.
    let stored = read(services, run_id).await?;
    decide(services, &stored.state()?, command.clone())?;
    let claim = services.claims.claim_within(run_id, HANDOVER_WAIT).await;
    Ok((claim.ok_or_else(|| Refusal::Busy(run_id.to_string()))?, command))
}

async fn read(services: &Services, run_id: &RunId) -> Result<Stored, ControlError> {
    match Stored::read(services, run_id).await {
        Err(StoreError::NotFound(_)) => Err(Refusal::NotFound(run_id.to_string()).into()),
        other => Ok(other?),
    }
}

/// What `command` does to the run, a human task's output checked against its capability.
fn decide(services: &Services, state: &super::state::RunState, command: Command) -> Result<Decision, ControlError> {
    let limits = state.replan_limits.ok_or(ResumeError::NotStarted)?;
    let capabilities = services.registry.snapshot();
    let decision = operator::decide(state, limits, command, Utc::now(), |capability_id, output| {
        let Some(capability) = capabilities.get(capability_id) else { return Vec::new() };
        let mut problems = match check_output(&capability.output_contract, output) {
            Err(crate::capability::CapabilityError::Contract(violations)) => violations,
            _ => Vec::new(),
        };
        problems.extend(services.facets.output_violations(&capability.output_facets, output));
        problems
    })?;
    Ok(decision)
}

/// What a decision writes that its frames do not carry: the operator's decision record.
fn rows(log: &RunLog, decision: &Decision) -> Option<RowWrite> {
    let now = crate::store::now();
    let state = log.state();
    decision.record.as_ref().map(|record| {
        RowWrite::Decision(DecisionRow {
            request_id: record.request_id.clone(),
            run_id: state.run_id.to_string(),
            decision: record.decision,
            operator: record.actor.operator.as_ref().map(|o| o.to_string()),
            note: record.actor.note.clone(),
            feedback: record.feedback.clone(),
            payload: record.payload.as_ref().map(|p| json!(p).to_string()),
            decided_at: now,
            principal: Some(record.actor.principal.clone()),
        })
    })
}
