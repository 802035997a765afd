//! Calls of one kind in flight at once on this node, bounded (`llm.max_concurrent_calls`,
//! `http_capabilities.max_concurrent_calls`).
//!
//! Each call in flight holds a connection to the server it calls, with buffers on both sides:
//! with thousands of runs open on a node, a call per run at once would open thousands of them. A
//! call beyond the bound waits for a free slot before it is built, so a waiting call holds
//! nothing but its place in the queue, and is counted in a gauge while it waits.

use std::sync::Arc;

use tokio::sync::{Semaphore, SemaphorePermit};

use crate::telemetry::Counted;

/// The slots of one kind of call. Cheap to clone: clones share the slots.
#[derive(Clone)]
pub struct Slots {
    permits: Arc<Semaphore>,
    /// Counts a call in the gauge of calls waiting for a slot, until dropped.
    waiting: fn() -> Counted,
}

impl Slots {
    /// `size` slots (at least one), the calls waiting counted by `waiting`.
    pub fn new(size: usize, waiting: fn() -> Counted) -> Self {
        Self { permits: Arc::new(Semaphore::new(size.clamp(1, Semaphore::MAX_PERMITS))), waiting }
    }

    /// Waits for a free slot; the call holds it until the permit is dropped. The wait is not
    /// part of a call's timeout: it says nothing about the server called.
    pub async fn take(&self) -> SemaphorePermit<'_> {
        if let Ok(permit) = self.permits.try_acquire() {
            return permit;
        }
        let _waiting = (self.waiting)();
        #[expect(clippy::expect_used, reason = "the semaphore is this type's own and never closed")]
        self.permits.acquire().await.expect("slots are never closed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_beyond_the_slots_waits_until_one_is_free() {
        let slots = Slots::new(2, crate::telemetry::model_call_waiting);
        let (first, _second) = (slots.take().await, slots.take().await);
        let third = slots.take();
        tokio::pin!(third);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), &mut third).await;
        assert!(waited.is_err(), "both slots are taken");
        drop(first);
        let _third = tokio::time::timeout(std::time::Duration::from_secs(5), third).await.expect("a slot was freed");
    }

    #[tokio::test]
    async fn no_slots_means_one() {
        let slots = Slots::new(0, crate::telemetry::model_call_waiting);
        drop(slots.take().await);
        assert_eq!(slots.permits.available_permits(), 1);
    }
}
