//! Which runs this process writes, and how to stop the task writing one.
//!
//! A run's event log has one writer at a time: the coordinator driving it, or the operator
//! command changing it while it waits. Whoever writes holds the run's [`Claim`]; the sequence
//! numbers of its frames are therefore assigned in one place (the claim holder's
//! [`RunLog`](super::log::RunLog)), and two writers can never compute the same `seq`. A command
//! that makes a paused run go on hands its claim to the new coordinator, so nothing can slip in
//! between. A cancel asks the holder to stop and waits for its claim; the holder's log marks the
//! stop honoured when it commits the cancellation, so the cancel knows whether it was its own.
//!
//! With several nodes on one PostgreSQL database ([`super::lease`]) a claim also carries the
//! run's lease epoch, the fencing token every commit of its log checks, and the registry knows
//! this node's name, the lease length, the task driving each run (so a lost lease stops it) and
//! whether the node is draining.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::hash::HashMap;
use crate::run::id::RunId;
use crate::run::operator::Actor;

/// The claims held in this process, by run.
pub struct Claims {
    held: Mutex<HashMap<RunId, Held>>,
    next_id: AtomicU64,
    leasing: Option<Leasing>,
    /// Becomes `true` when the node drains: coordinators stop at their next wait.
    draining: watch::Sender<bool>,
}

impl Default for Claims {
    fn default() -> Self {
        Self::new(None)
    }
}

/// How this node leases the runs it drives (several nodes on one database).
#[derive(Debug, Clone, PartialEq)]
pub struct Leasing {
    /// This node's name, as `runs.lease_owner`.
    pub node: String,
    /// How long a lease lasts unless renewed.
    pub lease: Duration,
    /// When this process took its node id (`super::identity`), by the database's clock: the
    /// leases under the id from before then are a gone process's, taken back on joining.
    pub since: chrono::NaiveDateTime,
}

struct Held {
    id: u64,
    /// Becomes `Some` (who cancelled) when the holder is asked to stop; dropped on release.
    stop: watch::Sender<Option<Actor>>,
    honoured: Arc<AtomicBool>,
    /// The run's lease epoch, when the run is leased.
    epoch: Option<i64>,
    /// The task driving the run, once it runs: aborted when the lease is lost.
    task: Option<tokio::task::AbortHandle>,
}

/// The right to write one run's log. Released when dropped.
pub struct Claim {
    run_id: RunId,
    id: u64,
    claims: Arc<Claims>,
    /// Becomes `Some` (who cancelled) when an operator cancels the run.
    pub stop: watch::Receiver<Option<Actor>>,
    /// Set once the holder committed the cancellation it was asked for.
    honoured: Arc<AtomicBool>,
    /// The run's lease epoch (fencing token), when runs are leased.
    epoch: Option<i64>,
    draining: watch::Receiver<bool>,
}

/// A cancel's request to stop a run's holder, given to the one cancel that made it.
pub struct StopRequest {
    honoured: Arc<AtomicBool>,
}

impl StopRequest {
    /// Whether the holder committed the cancellation (read after it let go of the run).
    pub fn honoured(&self) -> bool {
        self.honoured.load(Ordering::Acquire)
    }
}

impl Claims {
    /// A registry for a node that leases its runs (`Some`) or runs alone (`None`).
    pub fn new(leasing: Option<Leasing>) -> Self {
        Self { held: Mutex::default(), next_id: AtomicU64::new(0), leasing, draining: watch::channel(false).0 }
    }

    /// How this node leases runs; `None` when it runs alone (SQLite).
    pub fn leasing(&self) -> Option<&Leasing> {
        self.leasing.as_ref()
    }

    /// Claims `run_id`, unless someone in this process holds it.
    pub fn try_claim(self: &Arc<Self>, run_id: &RunId) -> Option<Claim> {
        self.try_claim_stopping(run_id, None)
    }

    /// Claims `run_id`, waiting up to `patience` for its holder to release it.
    pub async fn claim_within(self: &Arc<Self>, run_id: &RunId, patience: Duration) -> Option<Claim> {
        self.claim_within_stopping(run_id, patience, None).await
    }

    /// Claims `run_id` for `actor`'s cancel: asks its holder to stop, then waits up to `patience`
    /// for the claim. The claim is taken already stopping, so a cancel racing this one is not told
    /// it stopped the run. Also says whether the holder, on this cancel's request, recorded the
    /// cancellation.
    pub async fn claim_to_cancel(
        self: &Arc<Self>,
        run_id: &RunId,
        actor: &Actor,
        patience: Duration,
    ) -> Option<(Claim, bool)> {
        let request = self.stop(run_id, actor);
        let claim = self.claim_within_stopping(run_id, patience, Some(actor.clone())).await?;
        Some((claim, request.is_some_and(|r| r.honoured())))
    }

    fn try_claim_stopping(self: &Arc<Self>, run_id: &RunId, stop: Option<Actor>) -> Option<Claim> {
        let mut held = self.lock();
        if held.contains_key(run_id) {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (stop, receiver) = watch::channel(stop);
        let honoured = Arc::new(AtomicBool::new(false));
        held.insert(run_id.clone(), Held { id, stop, honoured: honoured.clone(), epoch: None, task: None });
        let draining = self.draining.subscribe();
        Some(Claim {
            run_id: run_id.clone(),
            id,
            claims: self.clone(),
            stop: receiver,
            honoured,
            epoch: None,
            draining,
        })
    }

    async fn claim_within_stopping(
        self: &Arc<Self>,
        run_id: &RunId,
        patience: Duration,
        stop: Option<Actor>,
    ) -> Option<Claim> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let holder = self.lock().get(run_id).map(|held| held.stop.subscribe());
            let Some(mut released) = holder else {
                match self.try_claim_stopping(run_id, stop.clone()) {
                    Some(claim) => return Some(claim),
                    None => continue,
                }
            };
            // Wait until the holder's sender is dropped (a stop request also wakes us: look again).
            if tokio::time::timeout_at(deadline, released.changed()).await.is_err() {
                return self.try_claim_stopping(run_id, stop);
            }
        }
    }

    /// Asks the holder of `run_id` to stop on behalf of `actor`. `None` when nobody here holds
    /// it, or when another cancel already asked: that cancel reports the cancellation, so of two
    /// racing cancels only one can be told it stopped the run.
    pub fn stop(&self, run_id: &RunId, actor: &Actor) -> Option<StopRequest> {
        let held = self.lock();
        let held = held.get(run_id)?;
        let asked = held.stop.send_if_modified(|stop| {
            if stop.is_some() {
                return false;
            }
            *stop = Some(actor.clone());
            true
        });
        asked.then(|| StopRequest { honoured: held.honoured.clone() })
    }

    /// Whether someone in this process holds `run_id`.
    pub fn is_held(&self, run_id: &RunId) -> bool {
        self.lock().contains_key(run_id)
    }

    /// Runs whose log this process writes.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Notes the task that drives the run `claim` holds, so a lost lease can stop it.
    pub fn attach_task(&self, run_id: &RunId, claim: u64, task: tokio::task::AbortHandle) {
        if let Some(held) = self.lock().get_mut(run_id).filter(|held| held.id == claim) {
            held.task = Some(task);
        }
    }

    /// The leased runs held here, with their epochs.
    pub fn leased(&self) -> Vec<(RunId, i64)> {
        self.lock().iter().filter_map(|(run_id, held)| Some((run_id.clone(), held.epoch?))).collect()
    }

    /// Stops the task driving `run_id` at once (its lease is lost): it writes nothing more, and
    /// its claim is released as the task is dropped. Returns whether there was one.
    pub fn abort(&self, run_id: &RunId) -> bool {
        let task = self.lock().get_mut(run_id).and_then(|held| held.task.take());
        task.inspect(tokio::task::AbortHandle::abort).is_some()
    }

    /// Asks every coordinator to stop at its next wait (the node drains).
    pub fn drain(&self) {
        self.draining.send_replace(true);
    }

    /// Waits up to `grace` for every claim to be released (the coordinators stopped).
    pub async fn settle(&self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        while self.count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops every task driving a run here at once (the process stops).
    pub fn abort_all(&self) {
        for held in self.lock().values_mut() {
            if let Some(task) = held.task.take() {
                task.abort();
            }
        }
    }

    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RunId, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Claim {
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// This claim's number, for [`Claims::attach_task`].
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The claim with the run's lease at `epoch`.
    pub fn leased(mut self, epoch: i64) -> Self {
        if let Some(held) = self.claims.lock().get_mut(&self.run_id).filter(|held| held.id == self.id) {
            held.epoch = Some(epoch);
        }
        self.epoch = Some(epoch);
        self
    }

    /// The run's lease epoch, if runs are leased.
    pub fn epoch(&self) -> Option<i64> {
        self.epoch
    }

    /// How this node leases runs (see [`Claims::leasing`]).
    pub fn leasing(&self) -> Option<&Leasing> {
        self.claims.leasing()
    }

    /// The node drains: stop before the next wait.
    pub fn draining(&self) -> bool {
        *self.draining.borrow()
    }

    /// The run was asked to stop (an operator cancelled it).
    pub fn stop_requested(&self) -> bool {
        self.stop.borrow().is_some()
    }

    /// The holder committed the cancellation it was asked for: the cancel that asked reports it.
    pub fn honour_stop(&self) {
        self.honoured.store(true, Ordering::Release);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut held = self.claims.lock();
        if held.get(&self.run_id).is_some_and(|h| h.id == self.id) {
            held.remove(&self.run_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> RunId {
        RunId::parse(text).unwrap()
    }

    #[tokio::test]
    async fn one_holder_at_a_time_and_release_on_drop() {
        let claims = Arc::new(Claims::default());
        let first = claims.try_claim(&id("r")).expect("free");
        assert!(claims.try_claim(&id("r")).is_none(), "held");
        assert!(claims.try_claim(&id("other")).is_some());
        drop(first);
        assert!(claims.try_claim(&id("r")).is_some(), "released");
    }

    #[tokio::test]
    async fn a_stop_reaches_the_holder_and_a_waiter_gets_the_claim_when_it_lets_go() {
        let claims = Arc::new(Claims::default());
        let mut holder = claims.try_claim(&id("r")).unwrap();
        let waiter = {
            let claims = claims.clone();
            tokio::spawn(async move { claims.claim_within(&id("r"), Duration::from_secs(5)).await.is_some() })
        };
        tokio::task::yield_now().await;
        let request = claims.stop(&id("r"), &Actor::default()).expect("the first stop is asked");
        assert!(claims.stop(&id("r"), &Actor::default()).is_none(), "a second stop is not");
        holder.stop.changed().await.unwrap();
        assert!(holder.stop_requested());
        holder.honour_stop();
        drop(holder);
        assert!(waiter.await.unwrap(), "the waiter took the claim");
        assert!(request.honoured());
        assert!(claims.stop(&id("nobody"), &Actor::default()).is_none());
    }

    #[tokio::test]
    async fn waiting_gives_up_after_its_patience() {
        let claims = Arc::new(Claims::default());
        let _holder = claims.try_claim(&id("r")).unwrap();
        assert!(claims.claim_within(&id("r"), Duration::from_millis(20)).await.is_none());
    }

    #[tokio::test]
    async fn of_two_racing_cancels_only_the_one_its_holder_honoured_stopped_the_run() {
        let claims = Arc::new(Claims::default());
        // A command holds the run and lets go without cancelling it: the stop was not honoured.
        let command = claims.try_claim(&id("r")).unwrap();
        let cancel = {
            let claims = claims.clone();
            tokio::spawn(
                async move { claims.claim_to_cancel(&id("r"), &Actor::default(), Duration::from_secs(5)).await },
            )
        };
        tokio::task::yield_now().await;
        drop(command);
        let (first, stopped) = cancel.await.unwrap().expect("claimed");
        assert!(!stopped);
        // The first cancel holds the run already stopping: a second is not told it stopped it.
        let second = {
            let claims = claims.clone();
            tokio::spawn(
                async move { claims.claim_to_cancel(&id("r"), &Actor::default(), Duration::from_secs(5)).await },
            )
        };
        tokio::task::yield_now().await;
        first.honour_stop();
        drop(first);
        let (_, stopped) = second.await.unwrap().expect("claimed");
        assert!(!stopped);
    }
}
