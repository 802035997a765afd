//! This node's part among several flexrun nodes on one PostgreSQL database: it claims runs whose
//! lease ran out (or was handed back), renews the leases of the runs it drives, stops driving a
//! run whose lease it lost, and on SIGTERM drains (`docs/scale-out.md`).
//!
//! The lease itself is a few columns of the run's row (`store::leases`); its epoch is the fencing
//! token every commit of the run checks (`run::log`). The timing keeps two nodes from driving a
//! run at once in all but a paused or partitioned node's last moments — and those moments write
//! nothing, because their epoch no longer matches:
//!
//! - renewals every third of the lease, one statement for all of the node's runs;
//! - a node whose renewals failed for two thirds of the lease stops every run it drives (the
//!   lease, counted from the start of the last renewal that worked, has a third left);
//! - sweeps every fifth of the lease, on every node, with `FOR UPDATE SKIP LOCKED`: the runs of
//!   a node that died go on elsewhere within 1.2 leases (a sweep is one indexed statement, cheap
//!   enough to run often; every half lease, a run that expired just after a sweep waited half a
//!   lease more).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::claims::Leasing;
use crate::hash::{HashMap, HashSet};
use crate::run::decide::ending::{CRASH_LIMIT, crashed};
use crate::run::id::RunId;
use crate::run::lifecycle::{drive_claimed, fail_stored};
use crate::run::status::RunStatus;
use crate::run::stored::Stored;
use crate::services::Services;
use crate::store::{StoreError, leases};
use crate::telemetry;

/// Sweeps per lease: how soon after a dead node's lease ran out its runs are claimed again.
const SWEEPS_PER_LEASE: u32 = 5;

/// Runs claimed per sweep: a node takes over a dead node's runs a batch at a time, leaving the
/// rest to the other nodes' sweeps.
const SWEEP_BATCH: i64 = 100;

/// Claims what this node can drive now — the runs leased under its node id by a process before
/// this one, runs no node holds, runs whose lease ran out — and keeps claiming, renewing and
/// sweeping in the background until the node drains. Returns how many runs it picked up.
pub async fn join(services: &Arc<Services>) -> Result<usize, StoreError> {
    let Some(leasing) = services.claims.leasing().cloned() else { return Ok(0) };
    tracing::info!(node = %leasing.node, lease_secs = leasing.lease.as_secs_f64(), "joining the cluster");
    let picked = take_back(services, &leasing).await? + sweep(services, &leasing).await?;
    let services = services.clone();
    services.runtime.clone().spawn(keep(services, leasing));
    Ok(picked)
}

/// Claims at once, a batch at a time, every active run leased under this node id before this
/// process took the id: the process that leased them is gone — this one holds the id
/// (`run::lease::identity`) — so their leases need not run out first. Each counts a crash attempt, as a run
/// taken over from a node that died does: the leases were not handed back.
async fn take_back(services: &Arc<Services>, leasing: &Leasing) -> Result<usize, StoreError> {
    let mut picked = 0;
    loop {
        let (node, seconds, since) = (leasing.node.clone(), leasing.lease.as_secs_f64(), leasing.since);
        let taken = services
            .store
            .write(move |conn| leases::claim_own(conn, &node, seconds, since, &RunStatus::ACTIVE, SWEEP_BATCH))
            .await?;
        telemetry::lease_claims("restart", taken.len());
        let more = i64::try_from(taken.len()).is_ok_and(|n| n == SWEEP_BATCH);
        picked += drive(services, taken).await;
        if !more {
            return Ok(picked);
        }
    }
}

/// Renews and sweeps until the node drains.
async fn keep(services: Arc<Services>, leasing: Leasing) {
    let mut renewals = tokio::time::interval(leasing.lease / 3);
    let mut sweeps = tokio::time::interval(leasing.lease / SWEEPS_PER_LEASE);
    let mut renewed = Instant::now();
    loop {
        tokio::select! {
            _ = renewals.tick() => renew(&services, &leasing, &mut renewed).await,
            _ = sweeps.tick() => {
                if services.claims.is_draining() {
                    return;
                }
                if let Err(error) = sweep(&services, &leasing).await {
                    tracing::warn!(error = %crate::excerpt::log(error), "sweep for stale runs failed");
                }
            }
        }
    }
}

/// Renews the leases of the runs this node drives; stops the runs whose lease it no longer
/// holds, or all of them once renewals have failed for two thirds of the lease.
async fn renew(services: &Services, leasing: &Leasing, renewed: &mut Instant) {
    let started = Instant::now();
    let (node, seconds) = (leasing.node.clone(), leasing.lease.as_secs_f64());
    let driven = services.claims.leased();
    let ids: Vec<String> = driven.iter().map(|(run_id, _)| run_id.to_string()).collect();
    let held = services
        .store
        .read(move |conn| leases::renew(conn, &node, seconds, &ids.iter().map(String::as_str).collect::<Vec<_>>()))
        .await;
    telemetry::lease_renewal(held.is_ok());
    // Runs claimed while the statement ran were not in it; they are not lost.
    let driven: HashSet<(RunId, i64)> = driven.into_iter().collect();
    let local: Vec<(RunId, i64)> = services.claims.leased().into_iter().filter(|run| driven.contains(run)).collect();
    match held {
        Ok(rows) => {
            *renewed = started;
            // A run with no row yet is one being created here, its first commit not landed: not lost.
            let leases: HashMap<&str, (Option<&str>, i64)> =
                rows.iter().map(|r| (r.run_id.as_str(), (r.lease_owner.as_deref(), r.lease_epoch))).collect();
            let lost: Vec<&RunId> = local
                .iter()
                .filter(|(run_id, epoch)| {
                    leases.get(run_id.as_str()).is_some_and(|&(owner, at)| is_lost(owner, at, &leasing.node, *epoch))
                })
                .map(|(run_id, _)| run_id)
                .collect();
            stop(services, &lost, "its lease moved to another node");
            telemetry::runs_owned(
                rows.iter().filter(|r| r.lease_owner.as_deref() == Some(leasing.node.as_str())).count(),
            );
        }
        Err(error) if renewed.elapsed() >= leasing.lease * 2 / 3 => {
            tracing::error!(error = %crate::excerpt::log(error), "leases not renewed in time; stopping every run");
            stop(
                services,
                &local.iter().map(|(run_id, _)| run_id).collect::<Vec<_>>(),
                "its lease could not be renewed",
            );
        }
        Err(error) => tracing::warn!(error = %crate::excerpt::log(error), "lease renewal failed; trying again"),
    }
}

/// Whether a run this node drives under `epoch` is lost, its row holding the lease of `owner` at
/// `at`: when its epoch moved on (another node claimed it) or another node holds it. A row with no
/// owner at the same epoch is not lost: this node's own commit released the lease (the run ended
/// or waits), and its coordinator, maybe not yet back from that commit, still has to publish it.
fn is_lost(owner: Option<&str>, at: i64, node: &str, epoch: i64) -> bool {
    at != epoch || owner.is_some_and(|owner| owner != node)
}

/// Stops driving `runs` at once: whatever another node does with them, this one writes nothing
/// more (and could not: their epochs have moved on, or will once they are claimed).
fn stop(services: &Services, runs: &[&RunId], why: &str) {
    let stopped = runs.iter().filter(|run_id| services.claims.abort(run_id)).count();
    if stopped > 0 {
        tracing::warn!(runs = stopped, why, "stopped driving runs");
        telemetry::leases_lost(stopped);
    }
}

/// Claims runs whose lease ran out or was handed back, and drives each (or fails it, after
/// [`CRASH_LIMIT`]).
async fn sweep(services: &Arc<Services>, leasing: &Leasing) -> Result<usize, StoreError> {
    telemetry::sweep();
    let (node, seconds) = (leasing.node.clone(), leasing.lease.as_secs_f64());
    let taken = services
        .store
        .write(move |conn| leases::claim_stale(conn, &node, seconds, &RunStatus::ACTIVE, SWEEP_BATCH))
        .await?;
    telemetry::lease_claims("stale", taken.len());
    Ok(drive(services, taken).await)
}

/// Drives each run of `taken`, just claimed here; how many it could. A run that fails to be
/// driven (a store error) does not stop the others: each was claimed in the database, and one
/// left undriven sits until its lease runs out and is then counted a crash.
async fn drive(services: &Arc<Services>, taken: Vec<leases::Taken>) -> usize {
    let mut picked = 0;
    for lease in taken {
        let Ok(run_id) = RunId::parse(&lease.run_id) else {
            tracing::error!(run_id = %lease.run_id, "a stored run has an id flexrun does not make; it is left alone");
            continue;
        };
        match take_over(services, run_id.clone(), lease).await {
            Ok(driven) => picked += usize::from(driven),
            Err(error) => {
                tracing::error!(%run_id, error = %crate::excerpt::log(error), "could not drive a claimed run")
            }
        }
    }
    picked
}

/// Drives a run this node just claimed in the database; `false` when it could not.
async fn take_over(services: &Arc<Services>, run_id: RunId, lease: leases::Taken) -> Result<bool, StoreError> {
    let Some(claim) = services.claims.try_claim(&run_id) else {
        // Still driven here under an older epoch (its renewals failed): hand the new lease back,
        // so the next sweep claims it once the old coordinator has stopped.
        let id = run_id.to_string();
        services.store.write(move |conn| leases::release(conn, &id, lease.lease_epoch)).await?;
        return Ok(false);
    };
    let claim = claim.leased(lease.lease_epoch);
    let stored = match Stored::read(services, &run_id).await {
        Ok(stored) => stored,
        Err(error) => {
            tracing::error!(%run_id, error = %crate::excerpt::log(error), "could not read a claimed run");
            return Ok(false);
        }
    };
    tracing::info!(%run_id, epoch = lease.lease_epoch, crashes = lease.crash_attempts, "claimed a run");
    if lease.crash_attempts >= CRASH_LIMIT {
        fail_stored(services, claim, &stored, crashed(lease.crash_attempts)).await?;
        return Ok(false);
    }
    drive_claimed(services, claim, &stored, true).await
}

/// Drains the node (SIGTERM): no more claims; coordinators stop at their next wait — in-flight
/// calls finish — for up to `grace`; then whatever still runs is stopped and every lease of the
/// node is handed back at once, without counting a crash, for the other nodes to claim.
pub async fn drain(services: &Services, grace: Duration) -> Result<usize, StoreError> {
    let Some(leasing) = services.claims.leasing() else { return Ok(0) };
    services.claims.drain();
    services.claims.settle(grace).await;
    let left: Vec<RunId> = services.claims.leased().into_iter().map(|(run_id, _)| run_id).collect();
    stop(services, &left.iter().collect::<Vec<_>>(), "the node drains");
    let node = leasing.node.clone();
    let handed = services.store.write(move |conn| leases::release_all(conn, &node)).await?;
    tracing::info!(node = %leasing.node, handed, "drained: leases handed back");
    telemetry::runs_owned(0);
    Ok(handed)
}

#[cfg(test)]
mod tests {
    use super::is_lost;

    #[test]
    fn a_lease_is_lost_to_a_new_epoch_or_another_node_not_to_its_own_release() {
        assert!(!is_lost(Some("a"), 3, "a", 3), "held here");
        assert!(!is_lost(None, 3, "a", 3), "released by this node's own commit");
        assert!(is_lost(Some("b"), 4, "a", 3), "claimed by another node");
        assert!(is_lost(None, 4, "a", 3), "claimed elsewhere, then released");
        assert!(is_lost(Some("b"), 3, "a", 3), "another node at this epoch");
    }
}
