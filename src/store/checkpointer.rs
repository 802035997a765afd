//! Background WAL checkpoints for SQLite.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses its threshold, so the writer
//! thread — and every run waiting on its batch — pauses while pages are copied back into the
//! database file. Instead the writer's automatic checkpoints are turned off and this thread, on
//! its own connection, runs a `PASSIVE` checkpoint every [`INTERVAL`]: it never blocks the writer
//! or readers, copies a page rewritten by many commits only once per interval, and keeps the WAL
//! no longer than what is written in one interval. Once a checkpoint has caught up, the writer's
//! next transaction starts the WAL over from its beginning.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use diesel::connection::SimpleConnection;

use super::DbConn;

/// Time between checkpoints.
pub(super) const INTERVAL: Duration = Duration::from_millis(200);

/// Starts checkpointing the database of `conn` (a connection of its own). The thread ends when
/// `stop`'s sender is dropped, after one last checkpoint.
pub(super) fn start(mut conn: DbConn, stop: mpsc::Receiver<()>) -> std::io::Result<()> {
    thread::Builder::new().name("flexrun-db-checkpoint".into()).spawn(move || {
        loop {
            let stopping = !matches!(stop.recv_timeout(INTERVAL), Err(mpsc::RecvTimeoutError::Timeout));
            if let Err(error) = conn.batch_execute("PRAGMA wal_checkpoint(PASSIVE);") {
                tracing::warn!(%error, "WAL checkpoint failed; the next one will try again");
            }
            if stopping {
                return;
            }
        }
    })?;
    Ok(())
}
