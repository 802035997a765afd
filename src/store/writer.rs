//! The group-committing writer thread (see the module docs of [`crate::store`]).

use std::sync::mpsc;
use std::thread;

use diesel::Connection;
use diesel::result::Error as DieselError;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::{DbConn, StoreError};

/// Most writes folded into one transaction.
const MAX_BATCH: usize = 256;

/// How the writes of one batch share its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isolation {
    /// Straight in the batch transaction: the first failure rolls back the whole batch.
    Shared,
    /// Each in its own savepoint, so a failure rolls back only that write.
    Savepoint,
}

/// One write: run in a batch transaction (a second time, if the first attempt at its batch was
/// rolled back), then told how the commit went.
trait Job: Send {
    /// Runs the write, replacing the outcome of an earlier run; says whether it succeeded.
    fn run(&mut self, conn: &mut DbConn, isolation: Isolation) -> bool;
    /// Answers the write's caller: the commit's outcome, then the write's own.
    fn finish(self: Box<Self>, commit: Result<(), String>);
}

/// A submitted write and its caller's answer channel.
struct Write<F, T> {
    write: F,
    outcome: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<F, T> Job for Write<F, T>
where
    F: Fn(&mut DbConn) -> Result<T, StoreError> + Send,
    T: Send,
{
    fn run(&mut self, conn: &mut DbConn, isolation: Isolation) -> bool {
        let outcome = match isolation {
            Isolation::Shared => (self.write)(conn),
            Isolation::Savepoint => conn.transaction(|conn| (self.write)(conn)),
        };
        let succeeded = outcome.is_ok();
        self.outcome = Some(outcome);
        succeeded
    }

    fn finish(self: Box<Self>, commit: Result<(), String>) {
        let outcome = self.outcome.unwrap_or_else(|| Err(StoreError::Commit("the write did not run".into())));
        let _ = self.reply.send(commit.map_err(StoreError::Commit).and(outcome));
    }
}

#[derive(Clone)]
pub(super) struct Writer {
    jobs: mpsc::Sender<Box<dyn Job>>,
}

impl Writer {
    /// Moves `conn` to a new thread that executes submitted writes until every handle is dropped.
    ///
    /// With `answers`, a batch's callers are answered by one task spawned on that runtime instead
    /// of by the writer thread: waking a task of a current-thread runtime from another thread
    /// costs a system call per task, from one of its own tasks nothing, so the runtime that
    /// submits most writes (the run coordinators') is woken once per commit rather than once per
    /// write. Callers on other runtimes are answered from that task, as cheaply as before.
    pub(super) fn start(mut conn: DbConn, answers: Option<Handle>) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Box<dyn Job>>();
        thread::Builder::new().name("flexrun-db-writer".into()).spawn(move || {
            while let Ok(first) = queue.recv() {
                let mut batch = vec![first];
                batch.extend(queue.try_iter().take(MAX_BATCH - 1));
                let commit = commit_batch(&mut conn, &mut batch);
                let answered = Answers { batch, commit };
                match &answers {
                    // A runtime that has shut down drops the task unpolled, which still answers.
                    Some(runtime) => drop(runtime.spawn(async move { drop(answered) })),
                    None => drop(answered),
                }
            }
        })?;
        Ok(Self { jobs })
    }

    /// Queues `write` and waits for its commit. It may run twice (the first attempt rolled back
    /// because another write of its batch failed), so it must not act outside the database.
    pub(super) async fn submit<T, F>(&self, write: F) -> Result<T, StoreError>
    where
        F: Fn(&mut DbConn) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Write { write, outcome: None, reply });
        self.jobs.send(job).map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }
}

/// How one attempt at a batch went.
enum Attempt {
    Committed,
    /// A write failed and everything was rolled back (only in [`Isolation::Shared`]).
    WriteFailed,
    CommitFailed(String),
}

/// Commits a batch and says how the commit went. First every write shares the transaction, with
/// no savepoint to pay for; only if one of them fails is the batch run again, each write in its
/// own savepoint, so the failure rolls back that write alone and the others still commit.
fn commit_batch(conn: &mut DbConn, batch: &mut [Box<dyn Job>]) -> Result<(), String> {
    let attempt = match attempt(conn, batch, Isolation::Shared) {
        Attempt::WriteFailed if batch.len() > 1 => attempt(conn, batch, Isolation::Savepoint),
        other => other,
    };
    metrics::histogram!("flexrun_db_writes_per_commit").record(batch.len() as f64);
    match attempt {
        // A lone write that failed: its own error is what its caller hears about.
        Attempt::Committed | Attempt::WriteFailed => Ok(()),
        Attempt::CommitFailed(error) => {
            tracing::error!(%error, writes = batch.len(), "database commit failed");
            Err(error)
        }
    }
}

/// A committed batch whose callers are told how their writes went when it is dropped, wherever
/// that happens: so no caller is left waiting, even if the task meant to answer never runs.
struct Answers {
    batch: Vec<Box<dyn Job>>,
    commit: Result<(), String>,
}

impl Drop for Answers {
    fn drop(&mut self) {
        for job in self.batch.drain(..) {
            job.finish(self.commit.clone());
        }
    }
}

fn attempt(conn: &mut DbConn, batch: &mut [Box<dyn Job>], isolation: Isolation) -> Attempt {
    let mut failed = false;
    let committed = conn.transaction::<_, DieselError, _>(|conn| {
        for job in batch.iter_mut() {
            if !job.run(conn, isolation) && isolation == Isolation::Shared {
                failed = true;
                return Err(DieselError::RollbackTransaction);
            }
        }
        Ok(())
    });
    match committed {
        Ok(()) => Attempt::Committed,
        Err(DieselError::RollbackTransaction) if failed => Attempt::WriteFailed,
        Err(error) => Attempt::CommitFailed(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use diesel_migrations::MigrationHarness;

    use super::*;
    use crate::store::{configure, runs, tests::run_row};

    fn connection(dir: &tempfile::TempDir) -> DbConn {
        let mut conn = DbConn::establish(dir.path().join("t.db").to_str().unwrap()).unwrap();
        configure(&mut conn).unwrap();
        conn.run_pending_migrations(crate::store::MIGRATIONS).unwrap();
        conn
    }

    /// A write that inserts run `id` (then fails, if `fail`), counting how often it ran.
    fn insert(
        id: &'static str,
        fail: bool,
        runs_made: Arc<AtomicUsize>,
    ) -> (Box<dyn Job>, oneshot::Receiver<Result<(), StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let write = move |conn: &mut DbConn| {
            runs_made.fetch_add(1, Ordering::SeqCst);
            runs::insert(conn, &run_row(id))?;
            if fail { Err(StoreError::Conflict("refused".into())) } else { Ok(()) }
        };
        (Box::new(Write { write, outcome: None, reply }), answer)
    }

    #[test]
    fn a_failing_write_makes_its_batch_run_again_with_a_savepoint_per_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = connection(&dir);
        let counts: Vec<Arc<AtomicUsize>> = (0..3).map(|_| Arc::default()).collect();
        let (a, a_answer) = insert("a", false, counts[0].clone());
        let (b, b_answer) = insert("b", true, counts[1].clone());
        let (c, c_answer) = insert("c", false, counts[2].clone());
        let mut batch = vec![a, b, c];
        let commit = commit_batch(&mut conn, &mut batch);
        assert_eq!(commit, Ok(()));
        drop(Answers { batch, commit });
        assert!(a_answer.blocking_recv().unwrap().is_ok());
        assert!(matches!(b_answer.blocking_recv().unwrap(), Err(StoreError::Conflict(_))));
        assert!(c_answer.blocking_recv().unwrap().is_ok());
        // Shared attempt: a, then b fails and stops it; savepoint attempt: a, b, c.
        let ran: Vec<usize> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
        assert_eq!(ran, [2, 2, 1]);
        assert!(runs::get(&mut conn, "a").is_ok() && runs::get(&mut conn, "c").is_ok());
        assert!(runs::get(&mut conn, "b").is_err(), "the failed write left nothing");
    }

    #[test]
    fn a_batch_that_succeeds_runs_each_write_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = connection(&dir);
        let count = Arc::new(AtomicUsize::new(0));
        let (mut jobs, answers): (Vec<_>, Vec<_>) =
            ["a", "b", "c"].into_iter().map(|id| insert(id, false, count.clone())).unzip();
        let commit = commit_batch(&mut conn, &mut jobs);
        drop(Answers { batch: jobs, commit });
        assert!(answers.into_iter().all(|answer| answer.blocking_recv().unwrap().is_ok()));
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn writes_are_answered_through_the_answer_runtime_whichever_runtime_submitted_them() {
        let dir = tempfile::tempdir().unwrap();
        let answers = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        let writer = Writer::start(connection(&dir), Some(answers.handle().clone())).unwrap();
        let insert = |id: &'static str| move |conn: &mut DbConn| runs::insert(conn, &run_row(id));
        answers.block_on(writer.submit(insert("on-the-answer-runtime"))).unwrap();
        // A current-thread runtime of its own, as the HTTP workers have: answered from the other.
        runtime().block_on(writer.submit(insert("elsewhere"))).unwrap();
        let mut conn = connection(&dir);
        assert!(runs::get(&mut conn, "on-the-answer-runtime").is_ok() && runs::get(&mut conn, "elsewhere").is_ok());
    }

    #[test]
    fn writes_are_still_answered_after_the_answer_runtime_has_shut_down() {
        let dir = tempfile::tempdir().unwrap();
        let answers = runtime();
        let writer = Writer::start(connection(&dir), Some(answers.handle().clone())).unwrap();
        drop(answers);
        let write = |conn: &mut DbConn| runs::insert(conn, &run_row("late"));
        runtime().block_on(writer.submit(write)).expect("answered, not left waiting or told the writer is gone");
        assert!(runs::get(&mut connection(&dir), "late").is_ok());
    }
}
