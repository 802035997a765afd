//! The group-committing writer thread (see the module docs of [`crate::store`]).

use std::sync::mpsc;
use std::thread;

use diesel::Connection;
use diesel::result::Error as DieselError;
use tokio::sync::oneshot;

use super::{DbConn, StoreError};

/// Most writes folded into one transaction.
const MAX_BATCH: usize = 256;

/// How one write is kept apart from the others of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isolation {
    /// Alone in the batch: the batch transaction itself is enough.
    Transaction,
    /// Shares the batch: its own savepoint, so a failure rolls back only this write.
    Savepoint,
}

/// Reports the commit outcome to the caller of one write.
type Finish = Box<dyn FnOnce(Result<(), String>) + Send>;
/// One write: runs inside the batch transaction; returns how to answer its caller and whether it
/// succeeded.
type Job = Box<dyn FnOnce(&mut DbConn, Isolation) -> (Finish, bool) + Send>;

#[derive(Clone)]
pub(super) struct Writer {
    jobs: mpsc::Sender<Job>,
}

impl Writer {
    /// Moves `conn` to a new thread that executes submitted writes until every handle is dropped.
    pub(super) fn start(mut conn: DbConn) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        thread::Builder::new().name("flexrun-db-writer".into()).spawn(move || {
            while let Ok(first) = queue.recv() {
                let mut batch = vec![first];
                batch.extend(queue.try_iter().take(MAX_BATCH - 1));
                commit_batch(&mut conn, batch);
            }
        })?;
        Ok(Self { jobs })
    }

    pub(super) async fn submit<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut DbConn) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |conn, isolation| {
            let outcome = match isolation {
                Isolation::Savepoint => conn.transaction(f),
                Isolation::Transaction => f(conn),
            };
            let succeeded = outcome.is_ok();
            let finish: Finish = Box::new(move |commit: Result<(), String>| {
                let _ = reply.send(commit.map_err(StoreError::Commit).and(outcome));
            });
            (finish, succeeded)
        });
        self.jobs.send(job).map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }
}

fn commit_batch(conn: &mut DbConn, batch: Vec<Job>) {
    let isolation = if batch.len() == 1 { Isolation::Transaction } else { Isolation::Savepoint };
    let mut finishers = Vec::with_capacity(batch.len());
    let mut failed = false;
    let committed = conn.transaction::<_, DieselError, _>(|conn| {
        for job in batch {
            let (finish, succeeded) = job(conn, isolation);
            failed |= !succeeded;
            finishers.push(finish);
        }
        // A lone write that failed must leave nothing behind: roll the transaction back.
        if failed && isolation == Isolation::Transaction { Err(DieselError::RollbackTransaction) } else { Ok(()) }
    });
    let outcome = match committed {
        Ok(()) => Ok(()),
        // The write's own error is what its caller hears about.
        Err(DieselError::RollbackTransaction) if failed => Ok(()),
        Err(error) => {
            tracing::error!(%error, writes = finishers.len(), "database commit failed");
            Err(error.to_string())
        }
    };
    metrics::histogram!("flexrun_db_writes_per_commit").record(finishers.len() as f64);
    for finish in finishers {
        finish(outcome.clone());
    }
}
