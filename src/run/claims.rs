//! Which runs this process writes, and how to stop the task writing one.
//!
//! A run's event log has one writer at a time: the coordinator driving it, or the operator
//! command changing it while it waits. Whoever writes holds the run's [`Claim`]; the sequence
//! numbers of its frames are therefore assigned in one place (the claim holder's
//! [`RunLog`](super::log::RunLog)), and two writers can never compute the same `seq`. A command
//! that makes a paused run go on hands its claim to the new coordinator, so nothing can slip in
//! between. A cancel asks the holder to stop and waits for its claim.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use super::id::RunId;
use super::operator::Actor;

/// The claims held in this process, by run.
#[derive(Default)]
pub struct Claims {
    held: Mutex<HashMap<RunId, Held>>,
    next_id: AtomicU64,
}

struct Held {
    id: u64,
    /// Becomes `Some` (who cancelled) when the holder is asked to stop; dropped on release.
    stop: watch::Sender<Option<Actor>>,
}

/// The right to write one run's log. Released when dropped.
pub struct Claim {
    run_id: RunId,
    id: u64,
    claims: Arc<Claims>,
    /// Becomes `Some` (who cancelled) when an operator cancels the run.
    pub stop: watch::Receiver<Option<Actor>>,
}

impl Claims {
    /// Claims `run_id`, unless someone in this process holds it.
    pub fn try_claim(self: &Arc<Self>, run_id: &RunId) -> Option<Claim> {
        let mut held = self.lock();
        if held.contains_key(run_id) {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (stop, receiver) = watch::channel(None);
        held.insert(run_id.clone(), Held { id, stop });
        Some(Claim { run_id: run_id.clone(), id, claims: self.clone(), stop: receiver })
    }

    /// Claims `run_id`, waiting up to `patience` for its holder to release it.
    pub async fn claim_within(self: &Arc<Self>, run_id: &RunId, patience: Duration) -> Option<Claim> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let holder = self.lock().get(run_id).map(|held| held.stop.subscribe());
            let Some(mut released) = holder else {
                match self.try_claim(run_id) {
                    Some(claim) => return Some(claim),
                    None => continue,
                }
            };
            // Wait until the holder's sender is dropped (a stop request also wakes us: look again).
            if tokio::time::timeout_at(deadline, released.changed()).await.is_err() {
                return self.try_claim(run_id);
            }
        }
    }

    /// Asks the holder of `run_id` to stop; `false` when nobody here holds it.
    pub fn stop(&self, run_id: &RunId, actor: &Actor) -> bool {
        self.lock().get(run_id).is_some_and(|held| held.stop.send(Some(actor.clone())).is_ok())
    }

    /// Whether someone in this process holds `run_id`.
    pub fn is_held(&self, run_id: &RunId) -> bool {
        self.lock().contains_key(run_id)
    }

    /// Runs whose log this process writes.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RunId, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Claim {
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The run was asked to stop (an operator cancelled it).
    pub fn stop_requested(&self) -> bool {
        self.stop.borrow().is_some()
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
        assert!(claims.stop(&id("r"), &Actor::default()));
        holder.stop.changed().await.unwrap();
        assert!(holder.stop_requested());
        drop(holder);
        assert!(waiter.await.unwrap(), "the waiter took the claim");
        assert!(!claims.stop(&id("nobody"), &Actor::default()));
    }

    #[tokio::test]
    async fn waiting_gives_up_after_its_patience() {
        let claims = Arc::new(Claims::default());
        let _holder = claims.try_claim(&id("r")).unwrap();
        assert!(claims.claim_within(&id("r"), Duration::from_millis(20)).await.is_none());
    }
}
