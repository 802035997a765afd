//! The group-committing writer thread (see the module docs of [`crate::store`]).

use std::sync::mpsc;
use std::thread;

use diesel::Connection;
use tokio::sync::oneshot;

use super::{DbConn, StoreError};

/// Most writes folded into one transaction.
const MAX_BATCH: usize = 256;

/// Reports the commit outcome to the caller of one write.
type Finish = Box<dyn FnOnce(Result<(), String>) + Send>;
/// One write: runs inside the batch transaction, returns how to answer its caller.
type Job = Box<dyn FnOnce(&mut DbConn) -> Finish + Send>;

#[derive(Clone)]
pub(super) struct Writer {
    jobs: mpsc::Sender<Job>,
}

impl Writer {
    /// Moves `conn` to a new thread that executes submitted writes until every handle is dropped.
    pub(super) fn start(mut conn: DbConn) -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
        thread::Builder::new()
            .name("flexrun-db-writer".into())
            .spawn(move || {
                while let Ok(first) = queue.recv() {
                    let mut batch = vec![first];
                    batch.extend(queue.try_iter().take(MAX_BATCH - 1));
                    commit_batch(&mut conn, batch);
                }
            })
            .expect("spawning the database writer thread");
        Self { jobs }
    }

    pub(super) async fn submit<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut DbConn) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            // A savepoint: a failing write rolls back alone; the rest of the batch still commits.
            let outcome = conn.transaction(f);
            Box::new(move |commit: Result<(), String>| {
                let _ = reply.send(commit.map_err(StoreError::Commit).and(outcome));
            })
        });
        self.jobs.send(job).map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }
}

fn commit_batch(conn: &mut DbConn, batch: Vec<Job>) {
    let mut finishers = Vec::with_capacity(batch.len());
    let committed = conn.transaction::<_, diesel::result::Error, _>(|conn| {
        finishers.extend(batch.into_iter().map(|job| job(conn)));
        Ok(())
    });
    let outcome = committed.map_err(|e| e.to_string());
    if let Err(error) = &outcome {
        tracing::error!(%error, writes = finishers.len(), "database commit failed");
    }
    for finish in finishers {
        finish(outcome.clone());
    }
}
