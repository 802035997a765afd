//! The group-committing writer (see the crate docs).
//!
//! It runs in one of two places. With SQLite, as a task on the runtime that submits most writes
//! (the run coordinators'): a commit there is a few local file writes, so that runtime's thread
//! runs it itself, and every task ready on it queues its write before the batch is taken —
//! no thread hand-off per commit and larger batches (about 5 % less CPU per run at 32 clients,
//! 40 % fewer context switches). The price: while it commits, nothing else on that runtime runs.
//! With PostgreSQL a commit is a network round trip, which must not stall the runtime, and without
//! a runtime there is nowhere to put the task: there it runs on a thread of its own.

use std::thread;
use std::time::{Duration, Instant};

use diesel::Connection;
use diesel::r2d2::R2D2Connection;
use diesel::result::Error as DieselError;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};

use super::{DbConn, StoreError};

/// Most writes folded into one transaction.
const MAX_BATCH: usize = 256;

/// How often the writer task lets the other ready tasks of its runtime run before it takes a
/// batch, as long as each round queues more writes: their writes then share the commit.
const GATHER_ROUNDS: usize = 3;

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
    fn finish(self: Box<Self>, commit: Result<(), Failure>);
}

/// Why a batch's writes did not commit.
#[derive(Debug, Clone, PartialEq)]
enum Failure {
    /// COMMIT (or BEGIN) failed: whether it landed is unknown.
    Commit(String),
    /// The database could not be reached for [`PATIENCE`]: nothing was written.
    Unreachable(String),
}

impl From<Failure> for StoreError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Commit(error) => Self::Commit(error),
            Failure::Unreachable(error) => Self::Connection(error),
        }
    }
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

    fn finish(self: Box<Self>, commit: Result<(), Failure>) {
        let outcome = self.outcome.unwrap_or_else(|| Err(StoreError::Commit("the write did not run".into())));
        let _ = self.reply.send(commit.map_err(StoreError::from).and(outcome));
    }
}

type Queue = mpsc::UnboundedReceiver<Box<dyn Job>>;

/// Submits writes to the one connection that makes them. Cheap to clone; the writer stops when
/// every handle is dropped (or its runtime shuts down: callers then get
/// [`StoreError::WriterGone`]).
#[derive(Clone)]
pub(super) struct Writer {
    jobs: mpsc::UnboundedSender<Box<dyn Job>>,
}

impl Writer {
    /// Runs the writer as a task on `runtime`, committing on that runtime's thread (see the module
    /// docs for when that is right). The runtime must be driven for as long as writes are made.
    pub(super) fn on_runtime(mut conn: DbConn, runtime: &Handle) -> Self {
        let (jobs, mut queue) = mpsc::unbounded_channel();
        runtime.spawn(async move {
            while let Some(first) = queue.recv().await {
                gather(&queue).await;
                let mut batch = take_batch(first, &mut queue);
                // SQLite's connection is a file: there is no other connection to run it on.
                let commit = match commit_batch(&mut conn, &mut batch) {
                    Outcome::Answered(commit) => commit.map_err(Failure::Commit),
                    Outcome::Unsent(error) => Err(Failure::Unreachable(error)),
                };
                answer(batch, &commit);
            }
        });
        Self { jobs }
    }

    /// Runs the writer on a thread of its own, on `conn`; should the connection break (the
    /// server restarted, a network cut), `connect` makes the next one (see [`Link`]).
    pub(super) fn on_thread(conn: DbConn, connect: Connect) -> std::io::Result<Self> {
        let (jobs, mut queue) = mpsc::unbounded_channel();
        thread::Builder::new().name("flexrun-db-writer".into()).spawn(move || {
            let mut link = Link::new(conn, connect);
            while let Some(first) = queue.blocking_recv() {
                let mut batch = take_batch(first, &mut queue);
                let commit = link.commit(&mut batch);
                answer(batch, &commit);
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

/// Lets the other ready tasks of the runtime (and the I/O they were waiting for) run, up to
/// [`GATHER_ROUNDS`] times while each round adds writes to the queue.
async fn gather(queue: &Queue) {
    let mut queued = queue.len();
    for _ in 0..GATHER_ROUNDS {
        tokio::task::yield_now().await;
        if queue.len() == queued {
            return;
        }
        queued = queue.len();
    }
}

/// `first` and whatever else is queued, up to [`MAX_BATCH`] writes.
fn take_batch(first: Box<dyn Job>, queue: &mut Queue) -> Vec<Box<dyn Job>> {
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH
        && let Ok(job) = queue.try_recv()
    {
        batch.push(job);
    }
    batch
}

/// Tells each caller of `batch` how its write went.
fn answer(batch: Vec<Box<dyn Job>>, commit: &Result<(), Failure>) {
    for job in batch {
        job.finish(commit.clone());
    }
}

/// Makes a new connection for the writer.
pub(super) type Connect = Box<dyn Fn() -> Result<DbConn, StoreError> + Send>;

/// How long a batch waits for the database to come back before its writes fail.
const PATIENCE: Duration = Duration::from_secs(10);

/// Longest wait between two attempts to reconnect.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The writer's connection, made again when it breaks. A batch the broken connection never
/// committed runs again on the next one, so a database restart only delays writes (by up to
/// [`PATIENCE`], after which they fail). A batch whose COMMIT itself failed is not run again — it
/// may have landed before the connection went — so its callers hear of the failure (a run's
/// coordinator then stops, and the run is resumed from what is committed).
struct Link {
    conn: Option<DbConn>,
    connect: Connect,
    backoff: Duration,
}

impl Link {
    fn new(conn: DbConn, connect: Connect) -> Self {
        Self { conn: Some(conn), connect, backoff: Duration::ZERO }
    }

    /// Commits `batch`, on a new connection if the one it tried broke before committing.
    fn commit(&mut self, batch: &mut [Box<dyn Job>]) -> Result<(), Failure> {
        let give_up = Instant::now() + PATIENCE;
        loop {
            let outcome = match self.conn() {
                Ok(conn) => commit_batch(conn, batch),
                Err(error) => Outcome::Unsent(error),
            };
            match outcome {
                Outcome::Answered(Ok(())) => return Ok(()),
                Outcome::Answered(Err(error)) => {
                    self.check();
                    return Err(Failure::Commit(error));
                }
                Outcome::Unsent(error) => {
                    if self.conn.take().is_some() {
                        tracing::warn!(error = %flexrun_core::excerpt::log(&error), "database writer's connection broke");
                    }
                    if Instant::now() + self.backoff >= give_up {
                        return Err(Failure::Unreachable(error));
                    }
                    thread::sleep(self.backoff);
                }
            }
        }
    }

    /// The connection, made again first if it broke.
    fn conn(&mut self) -> Result<&mut DbConn, String> {
        if self.conn.is_none() {
            self.backoff = (self.backoff * 2).clamp(Duration::from_millis(50), MAX_BACKOFF);
            let conn = (self.connect)()
                .map_err(|e| format!("the database cannot be reached: {}", flexrun_core::excerpt::log(e)))?;
            tracing::info!("database writer reconnected");
            self.backoff = Duration::ZERO;
            self.conn = Some(conn);
        }
        self.conn.as_mut().ok_or_else(|| "no database connection".to_string())
    }

    /// After a failed commit: lets the connection go if it no longer answers.
    fn check(&mut self) {
        if let Some(conn) = &mut self.conn
            && conn.ping().is_err()
        {
            tracing::warn!("database writer's connection broke");
            self.conn = None;
        }
    }
}

/// How one attempt at a batch went.
enum Attempt {
    Committed,
    /// A write failed and everything was rolled back (only in [`Isolation::Shared`]).
    WriteFailed,
    /// BEGIN failed (say, on a connection that broke while idle): nothing was sent.
    BeginFailed(String),
    CommitFailed(String),
}

/// How a batch went.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// What its callers hear: `Ok` also when a lone write failed (its own error is what its
    /// caller hears about).
    Answered(Result<(), String>),
    /// The connection failed before COMMIT was sent: nothing was written, and the batch may run
    /// again on another connection.
    Unsent(String),
}

/// Commits a batch and says how the commit went. First every write shares the transaction, with
/// no savepoint to pay for; only if one of them fails is the batch run again, each write in its
/// own savepoint, so the failure rolls back that write alone and the others still commit. A
/// failure before COMMIT on a connection that no longer answers is the connection's, not a
/// write's: [`Outcome::Unsent`].
fn commit_batch(conn: &mut DbConn, batch: &mut [Box<dyn Job>]) -> Outcome {
    let started = Instant::now();
    let mut outcome = attempt(conn, batch, Isolation::Shared);
    if let Attempt::WriteFailed | Attempt::BeginFailed(_) = &outcome
        && conn.ping().is_err()
    {
        let error = match outcome {
            Attempt::BeginFailed(error) => error,
            _ => "the database connection failed".to_string(),
        };
        return Outcome::Unsent(error);
    }
    if matches!(outcome, Attempt::WriteFailed) && batch.len() > 1 {
        outcome = attempt(conn, batch, Isolation::Savepoint);
    }
    crate::metrics::commit(batch.len(), started.elapsed());
    match outcome {
        Attempt::Committed | Attempt::WriteFailed => Outcome::Answered(Ok(())),
        Attempt::BeginFailed(error) | Attempt::CommitFailed(error) => {
            tracing::error!(error = %flexrun_core::excerpt::log(&error), writes = batch.len(), "database commit failed");
            Outcome::Answered(Err(error))
        }
    }
}

fn attempt(conn: &mut DbConn, batch: &mut [Box<dyn Job>], isolation: Isolation) -> Attempt {
    let (mut begun, mut failed) = (false, false);
    let committed = conn.transaction::<_, DieselError, _>(|conn| {
        begun = true;
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
        // A write failed and so did the rollback: the connection, most likely (checked next).
        Err(_) if failed => Attempt::WriteFailed,
        Err(error) if !begun => Attempt::BeginFailed(error.to_string()),
        Err(error) => Attempt::CommitFailed(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use diesel::connection::InstrumentationEvent;
    use diesel_migrations::MigrationHarness;

    use super::*;
    use crate::{configure, runs, tests::run_row};

    fn connection(dir: &tempfile::TempDir) -> DbConn {
        let mut conn = DbConn::establish(dir.path().join("t.db").to_str().unwrap()).unwrap();
        configure(&mut conn).unwrap();
        conn.run_pending_migrations(crate::MIGRATIONS).unwrap();
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
        assert_eq!(commit_batch(&mut conn, &mut batch), Outcome::Answered(Ok(())));
        answer(batch, &Ok(()));
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
        assert_eq!(commit_batch(&mut conn, &mut jobs), Outcome::Answered(Ok(())));
        answer(jobs, &Ok(()));
        assert!(answers.into_iter().all(|answer| answer.blocking_recv().unwrap().is_ok()));
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    /// A connection that counts its commits.
    fn counting_commits(dir: &tempfile::TempDir) -> (DbConn, Arc<AtomicUsize>) {
        let mut conn = connection(dir);
        let commits = Arc::new(AtomicUsize::new(0));
        let counter = commits.clone();
        conn.set_instrumentation(move |event: InstrumentationEvent<'_>| {
            if matches!(event, InstrumentationEvent::CommitTransaction { .. }) {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        });
        (conn, commits)
    }

    fn insert_run(id: String) -> impl Fn(&mut DbConn) -> Result<(), StoreError> {
        move |conn| runs::insert(conn, &run_row(&id))
    }

    #[test]
    fn writes_of_tasks_woken_before_the_batch_is_taken_share_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, commits) = counting_commits(&dir);
        let runtime = runtime();
        // Spawned from within the runtime, the writer task waits for writes before the tasks run.
        let writer = runtime.block_on(async { Writer::on_runtime(conn, &Handle::current()) });
        let woken = Arc::new(tokio::sync::Notify::new());
        runtime.block_on(async {
            // Four tasks write once woken (as by a model's answer arriving)...
            let mut tasks: Vec<_> = (4..8)
                .map(|id| {
                    let (writer, woken) = (writer.clone(), woken.clone().notified_owned());
                    tokio::spawn(async move {
                        woken.await;
                        writer.submit(insert_run(format!("run-{id}"))).await
                    })
                })
                .collect();
            // ...and four write straight away, the first waking the others once its write is queued.
            tasks.extend((0..4).map(|id| {
                let (writer, woken) = (writer.clone(), woken.clone());
                tokio::spawn(async move {
                    let write = writer.submit(insert_run(format!("run-{id}")));
                    futures::pin_mut!(write);
                    assert!(futures::poll!(&mut write).is_pending());
                    if id == 0 {
                        woken.notify_waiters();
                    }
                    write.await
                })
            }));
            for task in tasks {
                task.await.unwrap().unwrap();
            }
        });
        assert_eq!(commits.load(Ordering::SeqCst), 1, "one commit for the eight writes");
        let mut conn = connection(&dir);
        assert!((0..8).all(|id| runs::get(&mut conn, &format!("run-{id}")).is_ok()));
    }

    #[test]
    fn writes_from_another_runtime_are_committed_by_the_writer_task() {
        let dir = tempfile::tempdir().unwrap();
        let coordinators = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        let writer = Writer::on_runtime(connection(&dir), coordinators.handle());
        // A current-thread runtime of its own, as the HTTP workers have.
        runtime().block_on(writer.submit(insert_run("elsewhere".into()))).unwrap();
        assert!(runs::get(&mut connection(&dir), "elsewhere").is_ok());
    }

    #[test]
    fn a_writer_whose_runtime_has_shut_down_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let coordinators = runtime();
        let writer = Writer::on_runtime(connection(&dir), coordinators.handle());
        drop(coordinators);
        let outcome = runtime().block_on(async {
            let write = writer.submit(insert_run("late".into()));
            tokio::time::timeout(std::time::Duration::from_secs(5), write).await
        });
        assert!(matches!(outcome, Ok(Err(StoreError::WriterGone))), "told, not left waiting: {outcome:?}");
    }

    #[test]
    fn the_writer_thread_commits_and_answers() {
        let dir = tempfile::tempdir().unwrap();
        let unused: Connect = Box::new(|| Err(StoreError::Connection("not reconnected in this test".into())));
        let writer = Writer::on_thread(connection(&dir), unused).unwrap();
        runtime().block_on(writer.submit(insert_run("threaded".into()))).unwrap();
        assert!(runs::get(&mut connection(&dir), "threaded").is_ok());
    }
}
