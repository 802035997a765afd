//! How a node's active capabilities follow the registrations stored, when several nodes share one
//! database (PostgreSQL): a capability registered or unregistered through any node is offered or
//! withdrawn by every node, without a restart. Alone on a database (SQLite) nothing is followed:
//! every registration goes through the one node's [`Registry`].
//!
//! Every write or delete of a registration sends `NOTIFY flexrun_capabilities` in its transaction
//! ([`super::REGISTRATIONS`]); each node's listener then asks its registry to read the
//! registrations again ([`Registry::reread`]), as it does whenever it is listening again after its
//! connection dropped. This task does the reading ([`Registry::follow_stored`]), one read for any
//! number of asks made meanwhile, off the listener (which wakes run followers in the meantime).
//!
//! It also checks, every `cluster.poll_millis`, whether the registrations changed since they were
//! last read ([`Registry::check_stored`]: `count(*)` and `max(updated_at)` of `capabilities`, one
//! aggregate over a table of a few rows, against the same of the rows last read), and
//! reads them again if so. PostgreSQL delivers a notification to every session listening when it
//! is sent, and the listener reads again after every reconnection, so the check is not what keeps
//! nodes in step. It is there for the reads that fail: a read asked by a notification while the
//! database does not answer would otherwise wait for the next registration, however long that
//! takes; with the check it happens at the first check that gets an answer. It also catches rows
//! written without flexrun (an operator's SQL). What it cannot see — a delete and a write between
//! two checks that leave the count and the newest time as they were, which needs a node whose clock
//! lags another's — the notification of either write covers.

use std::sync::Arc;
use std::time::Duration;

use super::Registry;

/// Follows the stored registrations until the process ends: a read whenever one is asked for,
/// and the cheap check `every` (see the module's documentation).
pub async fn follow(registry: Arc<Registry>, every: Duration) {
    let mut checks = tokio::time::interval(every);
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let outcome = tokio::select! {
            () = registry.reread_asked() => registry.follow_stored().await,
            _ = checks.tick() => registry.check_stored().await,
        };
        if let Err(error) = outcome {
            // The next check reads them again: the summary of the rows last read is not updated.
            tracing::warn!(
                error = %crate::excerpt::log(error),
                "could not read the capability registrations; trying again at the next check"
            );
        }
    }
}
