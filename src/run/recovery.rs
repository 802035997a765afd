//! Picking up, at start-up, the runs an earlier process left active.

use std::sync::Arc;

use super::id::RunId;
use super::lease::{self, notify};
use super::lifecycle::drive_claimed;
use super::status::RunStatus;
use super::stored::Stored;
use crate::services::Services;
use crate::store::StoreError;
use crate::store::runs;

/// Picks up every run an earlier process left `pending`, `planning` or `running` (it stopped or
/// crashed), from its committed log. A run that cannot be resumed is failed with
/// `resume_failed` rather than left active. Returns how many runs were resumed.
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
    let run_ids = services.store.read(move |conn| runs::ids_with_status(conn, &RunStatus::ACTIVE)).await?;
    let mut resumed = 0;
    for run_id in run_ids {
        let Ok(run_id) = RunId::parse(&run_id) else {
            tracing::error!(%run_id, "a stored run has an id flexrun does not make; it is left alone");
            continue;
        };
        let Some(claim) = services.claims.try_claim(&run_id) else { continue };
        match Stored::read(services, &run_id).await {
            // Ended since the list was read: HTTP is served while recovery goes through the runs,
            // and an operator may have cancelled one no coordinator drove yet.
            Ok(stored) if stored.row.status.is_terminal() => {}
            Ok(stored) => resumed += usize::from(drive_claimed(services, claim, &stored, true).await?),
            Err(error) => tracing::error!(%run_id, error = %crate::excerpt::log(error), "could not recover the run"),
        }
    }
    Ok(resumed)
}
