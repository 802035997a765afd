//! Every active run has a coordinator: at start-up, the runs an earlier process left active are
//! picked up ([`recover`]); while serving, a run whose coordinator stopped is driven again
//! ([`watch`]); at a clean stop, the coordinators stop at their next wait ([`stop`]).
//!
//! With several nodes on PostgreSQL, leases do all of this ([`lease`]): a node joins the others,
//! sweeps for runs no live node drives and hands its runs back when it drains. Alone on a
//! database (SQLite), this module does it for the one process.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::decide::ending::{CRASH_LIMIT, crashed};
use super::id::RunId;
use super::lease::{self, notify};
use super::lifecycle::{drive_claimed, fail_stored};
use super::status::RunStatus;
use super::stored::Stored;
use crate::hash::HashMap;
use crate::services::Services;
use crate::store::{StoreError, runs, serving};

/// Picks up every run an earlier process left `pending`, `planning` or `running` (it stopped or
/// crashed), from its committed log. A run that cannot be resumed is failed with
/// `resume_failed` rather than left active; one that was active each of the last
/// [`CRASH_LIMIT`] times the process died is failed with `crash_limit_reached`. Returns how many
/// runs were resumed.
///
/// Call once at start-up. Alone on a database (SQLite), before any other process could work on
/// it: two servers recovering the same database would both drive its runs. With leases
/// (PostgreSQL), this node joins the others instead ([`lease::join`]): it picks up the runs no
/// live node holds, and keeps doing so.
pub async fn recover(services: &Arc<Services>) -> Result<usize, StoreError> {
    if services.claims.leasing().is_some() {
        notify::listen(services);
        return lease::join(services).await;
    }
    let active = services.store.write(|conn| serving::take(conn, &RunStatus::ACTIVE)).await?;
    let mut resumed = 0;
    for run in active {
        let Ok(run_id) = parse(&run.run_id) else { continue };
        match pick_up(services, &run_id, Some(run.crash_attempts)).await {
            Ok(driven) => resumed += usize::from(driven),
            // The watch tries it again.
            Err(error) => tracing::error!(%run_id, error = %crate::excerpt::log(error), "could not recover the run"),
        }
    }
    services.runtime.spawn(watch(services.clone()));
    Ok(resumed)
}

/// Drives `run_id` from its log if no task in this process does and it is still active; `false`
/// when it did not (held here, ended, or failed for its `crash_attempts`).
async fn pick_up(services: &Arc<Services>, run_id: &RunId, crash_attempts: Option<i32>) -> Result<bool, StoreError> {
    let Some(claim) = services.claims.try_claim(run_id) else { return Ok(false) };
    // Decided from the row: a run left as it is has its log not folded.
    let status = Stored::row(services, run_id).await?.status;
    match PickUp::of(status, crash_attempts) {
        PickUp::Leave => Ok(false),
        PickUp::Fail(attempts) => {
            tracing::error!(%run_id, crashes = attempts, "the process died driving this run too often; failing it");
            let stored = Stored::read(services, run_id).await?;
            fail_stored(services, claim, &stored, crashed(attempts)).await.map(|()| false)
        }
        PickUp::Drive => drive_claimed(services, claim, &Stored::read(services, run_id).await?, true).await,
    }
}

/// What [`pick_up`] does with a run it could claim, as its row stands once claimed.
#[derive(Debug, PartialEq, Eq)]
enum PickUp {
    /// No coordinator is to drive it: it ended, or it waits for an operator — since the list of
    /// active runs was read, HTTP is served meanwhile: its coordinator may have paused it (and
    /// let go of it), or an operator cancelled it. Driving a paused run would go on past its
    /// approval, human task or budget without an answer.
    Leave,
    /// Active each of the last [`CRASH_LIMIT`] times the process died (the count it had).
    Fail(i32),
    Drive,
}

impl PickUp {
    fn of(status: RunStatus, crash_attempts: Option<i32>) -> Self {
        match crash_attempts {
            _ if !status.is_active() => Self::Leave,
            Some(attempts) if attempts >= CRASH_LIMIT => Self::Fail(attempts),
            _ => Self::Drive,
        }
    }
}

/// How often [`watch`] looks for active runs no coordinator drives: as often as nodes sweep for
/// them on PostgreSQL, a fifth of `cluster.lease_seconds`.
fn watch_every(services: &Services) -> Duration {
    Duration::from_secs(services.settings.cluster.lease_seconds.max(1)) / 5
}

/// The longest [`watch`] waits before driving a run again that keeps stopping.
const MOST_BACKOFF: Duration = Duration::from_secs(300);

/// Drives again, until the process stops, the active runs no coordinator drives. A coordinator
/// that hits a database error (a full disk, a write lock held past the busy timeout) stops where
/// its run's log stands, as a crash would stop it; its run would otherwise stay active, without
/// a coordinator, until the next start. It is picked up from its committed log as at a start —
/// completed steps are not run again — once per look, then, while it keeps stopping, after a
/// wait doubling up to [`MOST_BACKOFF`].
async fn watch(services: Arc<Services>) {
    let every = watch_every(&services);
    let mut stopping: HashMap<RunId, Backoff> = HashMap::default();
    loop {
        tokio::time::sleep(every).await;
        if services.claims.is_draining() {
            return;
        }
        let listed = services.store.read(move |conn| runs::ids_with_status(conn, &RunStatus::ACTIVE)).await;
        let run_ids: Vec<RunId> = match listed {
            Ok(ids) => ids.iter().filter_map(|id| parse(id).ok()).collect(),
            Err(error) => {
                tracing::warn!(error = %crate::excerpt::log(error), "could not list the active runs");
                continue;
            }
        };
        stopping.retain(|run_id, _| run_ids.contains(run_id));
        for run_id in run_ids {
            let now = Instant::now();
            if stopping.get(&run_id).is_some_and(|backoff| now < backoff.until) {
                continue;
            }
            match pick_up(&services, &run_id, None).await {
                Ok(false) => continue,
                Ok(true) => tracing::warn!(%run_id, "a run no coordinator drove is driven again from its log"),
                Err(error) => {
                    tracing::warn!(%run_id, error = %crate::excerpt::log(error), "could not drive a run again")
                }
            }
            // Tried: not again before its wait, doubling while it keeps stopping.
            let backoff = stopping.entry(run_id).or_insert(Backoff { until: now, wait: every });
            backoff.until = now + backoff.wait;
            backoff.wait = (backoff.wait * 2).min(MOST_BACKOFF);
        }
    }
}

/// When [`watch`] may drive a run again that it drove before, and how long it waits after that.
struct Backoff {
    until: Instant,
    wait: Duration,
}

/// Stops this process's coordinators for a clean stop (SIGTERM): each stops at its next wait — a
/// call in flight finishes — for up to `grace`, then whatever still runs is stopped. With leases
/// the node's runs are handed back to the other nodes ([`lease::drain`]); alone on a database,
/// the database is handed back, so the next start counts no crash for the runs left active.
pub async fn stop(services: &Services, grace: Duration) -> Result<(), StoreError> {
    if services.claims.leasing().is_some() {
        return lease::drain(services, grace).await.map(drop);
    }
    services.claims.drain();
    services.claims.settle(grace).await;
    services.claims.abort_all();
    services.store.write(serving::hand_back).await
}

fn parse(run_id: &str) -> Result<RunId, ()> {
    RunId::parse(run_id).map_err(|_| {
        tracing::error!(%run_id, "a stored run has an id flexrun does not make; it is left alone");
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_paused_or_ended_since_it_was_listed_is_left_as_it_is() {
        for status in [RunStatus::AwaitingHitl, RunStatus::AwaitingHuman, RunStatus::Completed, RunStatus::Cancelled] {
            assert_eq!(PickUp::of(status, None), PickUp::Leave, "{status}");
            assert_eq!(PickUp::of(status, Some(CRASH_LIMIT)), PickUp::Leave, "{status}");
        }
        for status in RunStatus::ACTIVE {
            assert_eq!(PickUp::of(status, None), PickUp::Drive, "{status}");
            assert_eq!(PickUp::of(status, Some(CRASH_LIMIT - 1)), PickUp::Drive, "{status}");
            assert_eq!(PickUp::of(status, Some(CRASH_LIMIT)), PickUp::Fail(CRASH_LIMIT), "{status}");
        }
    }
}
