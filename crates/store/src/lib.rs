//! Persistence with diesel: embedded SQLite by default, PostgreSQL with `--features postgres`,
//! through one [`DbConn`] (`MultiConnection`) so every query is written once.
//!
//! Reads use a small connection pool. Writes go through one writer that *group-commits*: it takes
//! every write waiting in its queue, runs them all inside a single transaction, commits
//! once and only then answers each caller. Should one of them fail, the batch is rolled back and
//! run again with each write in its own savepoint, so only the failed write is lost. That is SQLite's single-writer
//! model made explicit (no `SQLITE_BUSY` between flexrun's own writers) and it amortises the
//! commit over concurrent runs. A caller is answered only after its write is durable, which is
//! what "a frame is in the event log before it is sent" relies on.

/// Runs a query on the concrete connection inside a [`DbConn`]. The expression is compiled once
/// per backend, so diesel knows each statement's type and SQLite/PostgreSQL prepare it once per
/// connection; through `MultiConnection` itself every statement would be re-prepared.
macro_rules! on_backend {
    ($conn:expr, |$c:ident| $query:expr) => {
        match $conn {
            #[cfg(feature = "postgres")]
            $crate::DbConn::Pg($c) => $query,
            $crate::DbConn::Sqlite($c) => $query,
        }
    };
}
pub(crate) use on_backend;

pub mod metrics;

pub mod capabilities;
mod connect;
pub mod evaluations;
pub mod events;
pub mod hitl;
pub mod leases;
pub mod mcp_servers;
pub mod prepared;
pub mod runs;
pub mod schema;
pub mod serving;
mod stamp;
pub mod threads;
mod wal_frames;
mod writer;

use std::time::Duration;

use diesel::Connection;
use diesel::connection::SimpleConnection;
use diesel::r2d2::{CustomizeConnection, Pool};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use writer::Writer;

/// The migrations in `migrations/`, compiled in.
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// A connection to either backend.
#[derive(diesel::MultiConnection)]
pub enum DbConn {
    #[cfg(feature = "postgres")]
    Pg(diesel::PgConnection),
    /// Last: SQLite accepts any string as a path.
    Sqlite(diesel::SqliteConnection),
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Db(#[from] diesel::result::Error),
    #[error("database connection: {0}")]
    Connection(String),
    #[error("database migration: {0}")]
    Migration(String),
    #[error("{0} not found")]
    NotFound(String),
    /// A conditional update found the row in another state than expected.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A stored value flexrun cannot have written.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("stored JSON is unreadable: {0}")]
    Json(#[from] serde_json::Error),
    #[error("commit failed: {0}")]
    Commit(String),
    #[error("the database writer has stopped")]
    WriterGone,
    /// The run's lease moved on (another node claimed it): this writer may not write it again.
    #[error("run {0} is driven by another node now (its lease moved on)")]
    Fenced(String),
    /// A run was to start on a thread that has one in progress (see `threads::hold_idle`).
    #[error("thread {0} has a run in progress")]
    ThreadBusy(String),
    /// A run was to start on a thread that does not exist, or not as its start assumed: another
    /// owner's (see `threads::mark`).
    #[error("thread {0} not found")]
    ThreadNotFound(String),
    #[error("unsupported database URL `{0}`: use sqlite://<path> or postgres://…")]
    Url(String),
}

impl StoreError {
    /// An insert hit a unique index (a key another writer stored first).
    pub fn is_unique_violation(&self) -> bool {
        use diesel::result::{DatabaseErrorKind, Error};
        matches!(self, Self::Db(Error::DatabaseError(DatabaseErrorKind::UniqueViolation, _)))
    }

    /// The database could not be reached — no connection within the pool's wait, or the
    /// connection closed under the query (a restart) — so the same read may succeed later.
    pub fn is_unreachable(&self) -> bool {
        use diesel::result::{DatabaseErrorKind, Error};
        matches!(self, Self::Connection(_) | Self::Db(Error::DatabaseError(DatabaseErrorKind::ClosedConnection, _)))
    }
}

type DbPool = Pool<connect::Manager>;

/// Handle to the database. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    reads: DbPool,
    writer: Writer,
    postgres: bool,
}

/// Applies SQLite's per-connection settings: WAL (readers never block the writer), a busy timeout
/// for other processes, foreign keys, and `synchronous=NORMAL` (durable at every WAL checkpoint and
/// safe against corruption; a power loss can drop the last commits, a process crash cannot).
#[derive(Debug)]
struct SqliteSettings;

impl CustomizeConnection<DbConn, diesel::r2d2::Error> for SqliteSettings {
    fn on_acquire(&self, conn: &mut DbConn) -> Result<(), diesel::r2d2::Error> {
        configure(conn).map_err(diesel::r2d2::Error::QueryError)
    }
}

fn configure(conn: &mut DbConn) -> Result<(), diesel::result::Error> {
    #[allow(irrefutable_let_patterns)]
    if let DbConn::Sqlite(sqlite) = conn {
        sqlite.batch_execute(
            // The busy timeout first: switching to WAL may have to wait for another connection.
            "PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; \
             PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;",
        )?;
    }
    Ok(())
}

/// A new, configured connection to `url`.
fn connect(url: &str) -> Result<DbConn, StoreError> {
    let mut conn = connect::establish(url).map_err(|e| StoreError::Connection(e.to_string()))?;
    configure(&mut conn)?;
    Ok(conn)
}

/// Turns a configured URL into what diesel expects.
fn connection_url(url: &str) -> Result<String, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        if cfg!(feature = "postgres") {
            return Ok(url.to_string());
        }
        return Err(StoreError::Url(format!(
            "{url} (this build has no PostgreSQL support; build with --features postgres)"
        )));
    }
    let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url);
    if path.is_empty() || path.contains(":memory:") || path.contains("://") {
        return Err(StoreError::Url(url.to_string()));
    }
    Ok(path.to_string())
}

impl Store {
    /// Opens the database at `url`, applies pending migrations and starts the writer on a thread
    /// of its own.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        Self::start(url, None)
    }

    /// Like [`Store::open`], for the runtime that submits most writes (the run coordinators'):
    /// with SQLite the writer is a task on `runtime` that commits on its thread (see
    /// `store::writer`), so `runtime` must be driven for as long as the store is used.
    pub fn open_on(url: &str, runtime: &tokio::runtime::Handle) -> Result<Self, StoreError> {
        Self::start(url, Some(runtime))
    }

    fn start(url: &str, runtime: Option<&tokio::runtime::Handle>) -> Result<Self, StoreError> {
        let url = connection_url(url)?;
        if !wal_frames::install() {
            tracing::warn!("SQLite's WAL frames are written with two calls each: the VFS that joins them was refused");
        }
        let mut conn = connect(&url)?;
        conn.run_pending_migrations(MIGRATIONS).map_err(|e| StoreError::Migration(e.to_string()))?;
        let indexed = threads::index_unindexed(&mut conn)?;
        if indexed > 0 {
            tracing::info!(threads = indexed, "indexed the metadata of threads stored before the index existed");
        }
        let postgres = !matches!(conn, DbConn::Sqlite(_));
        let reads = Pool::builder()
            .max_size(8)
            .connection_timeout(Duration::from_secs(10))
            // A pooled PostgreSQL connection can have been closed by the server or the network
            // since it was last used, so it is checked (`SELECT 1`) before a read gets it; a
            // SQLite connection is a file handle in this process and cannot go stale, and the
            // check would cost every read a statement prepared and run for nothing.
            .test_on_check_out(postgres)
            .connection_customizer(Box::new(SqliteSettings))
            .build(connect::Manager::new(url.clone()))
            .map_err(|e| StoreError::Connection(e.to_string()))?;
        let writer = match runtime {
            Some(runtime) if !postgres => Writer::on_runtime(conn, runtime),
            _ => {
                let connect: writer::Connect = Box::new(move || connect(&url));
                Writer::on_thread(conn, connect)
                    .map_err(|e| StoreError::Connection(format!("starting the writer: {e}")))?
            }
        };
        Ok(Self { reads, writer, postgres })
    }

    /// Whether this is a PostgreSQL database, which several nodes may share.
    pub fn is_postgres(&self) -> bool {
        self.postgres
    }

    /// Runs `f` on a pooled connection off the async runtime.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut DbConn) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let pool = self.reads.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = pool.get().map_err(|e| StoreError::Connection(e.to_string()))?;
            f(&mut conn)
        })
        .await
        .map_err(|e| StoreError::Connection(format!("read task failed: {e}")))?
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        use diesel::RunQueryDsl;
        self.read(|conn| Ok(diesel::sql_query("SELECT 1").execute(conn).map(drop)?)).await
    }

    /// Runs `f` atomically (all of it or none) and returns once it is committed. `f` may run
    /// twice (see the writer's group commit), so it must only act on the database.
    pub async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: Fn(&mut DbConn) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        self.writer.submit(f).await
    }
}

/// The current time as stored (UTC, no zone).
pub fn now() -> chrono::NaiveDateTime {
    chrono::Utc::now().naive_utc()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexrun_core::run::RunStatus;
    use runs::RunRow;

    pub(super) fn run_row(id: &str) -> RunRow {
        RunRow {
            run_id: id.into(),
            status: RunStatus::Pending,
            objective: "o".into(),
            envelope: "{}".into(),
            thread_id: None,
            correlation_id: "c".into(),
            plan_version: 0,
            planner_attempts: 0,
            goal_condition_replans: 0,
            replans: 0,
            result: None,
            error: None,
            created_at: now(),
            updated_at: now(),
            idempotency_key: None,
            request_hash: None,
            signal_replans: 0,
            policy_replans: 0,
            operator_replans: 0,
            post_condition_replans: 0,
            owner: None,
            parent_run_id: None,
            max_replans: Some(4),
            usage: None,
        }
    }

    fn temp_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}", dir.path().join("t.db").display())).unwrap();
        (dir, store)
    }

    async fn exists(store: &Store, id: &'static str) -> bool {
        store.read(move |conn| Ok(runs::get(conn, id).is_ok())).await.unwrap()
    }

    #[tokio::test]
    async fn a_failing_write_rolls_back_alone_in_a_batch() {
        let (_dir, store) = temp_store();
        let insert_then_fail = |id: &'static str| {
            move |conn: &mut DbConn| -> Result<(), StoreError> {
                runs::insert(conn, &run_row(id))?;
                Err(StoreError::Conflict("refused".into()))
            }
        };
        let (a, b, c) = tokio::join!(
            store.write(|conn| runs::insert(conn, &run_row("a"))),
            store.write(insert_then_fail("b")),
            store.write(|conn| runs::insert(conn, &run_row("c"))),
        );
        assert!(a.is_ok() && c.is_ok());
        assert!(matches!(b, Err(StoreError::Conflict(_))));
        assert!(exists(&store, "a").await && exists(&store, "c").await);
        assert!(!exists(&store, "b").await, "the failed write left nothing");
        // Alone in its batch, a failing write also leaves nothing.
        assert!(store.write(insert_then_fail("d")).await.is_err());
        assert!(!exists(&store, "d").await);
    }

    #[tokio::test]
    async fn the_wal_stays_bounded_under_continuous_writes() {
        let (dir, store) = temp_store();
        let envelope = "x".repeat(16 * 1024);
        // 1,200 commits of 16 KiB each: 19 MiB through a WAL that SQLite restarts after each
        // checkpoint of 1,000 pages (4 MiB).
        for i in 0..1200 {
            let row = RunRow { envelope: envelope.clone(), ..run_row("r") };
            let row = RunRow { run_id: format!("r{i}"), ..row };
            store.write(move |conn| runs::insert(conn, &row)).await.unwrap();
        }
        let wal = std::fs::metadata(dir.path().join("t.db-wal")).unwrap().len();
        assert!(wal < 8 << 20, "the WAL grew to {wal} bytes");
    }

    #[test]
    fn per_frame_statements_are_prepared_once() {
        use diesel::connection::InstrumentationEvent;
        use flexrun_core::events::payload::Log;
        use flexrun_core::events::{Event, Frame, FrameHeader};
        use flexrun_core::run::decide::goals::EvaluationStatus;
        use std::sync::{Arc, Mutex};
        let (dir, store) = temp_store();
        drop(store);
        let mut conn = DbConn::establish(dir.path().join("t.db").to_str().unwrap()).unwrap();
        configure(&mut conn).unwrap();
        let cached = Arc::new(Mutex::new(0));
        let counter = cached.clone();
        #[allow(irrefutable_let_patterns)]
        let DbConn::Sqlite(sqlite) = &mut conn else { unreachable!() };
        sqlite.set_instrumentation(move |event: InstrumentationEvent<'_>| {
            if let InstrumentationEvent::CacheQuery { .. } = event {
                *counter.lock().unwrap() += 1;
            }
        });
        runs::insert(&mut conn, &run_row("r")).unwrap();
        let inserts = *cached.lock().unwrap();
        let header = FrameHeader { run_id: "r".into(), correlation_id: "c".into(), plan_version: None };
        for i in 0..3 {
            runs::save_outcome(&mut conn, "r", None, Some("{}")).unwrap();
            let log = Log { severity: "info".into(), message: "m".into(), details: None };
            let redaction = flexrun_core::redact::Redaction::default();
            let frame =
                Frame::encode(&header, flexrun_core::events::Seq::new(i + 1).unwrap(), Event::Log(log), &redaction);
            events::append(&mut conn, "r", &[frame]).unwrap();
            let output = evaluations::RunOutputRow {
                run_id: "r".into(),
                plan_version: 1,
                status: if i == 2 { EvaluationStatus::Satisfied } else { EvaluationStatus::Unsatisfied },
                output: "{}".into(),
                goal_condition_results: "[]".into(),
                recorded_at: now(),
            };
            evaluations::record(&mut conn, &output).unwrap();
        }
        assert_eq!(*cached.lock().unwrap() - inserts, 3, "three statements, each prepared once");
        let outputs = evaluations::of_run(&mut conn, "r").unwrap();
        assert_eq!(outputs.len(), 1, "one evaluation per plan version, replaced");
        assert_eq!(outputs[0].status, EvaluationStatus::Satisfied, "the last evaluation");
    }

    #[tokio::test]
    async fn of_two_racing_transitions_exactly_one_wins() {
        let (_dir, store) = temp_store();
        store.write(|conn| runs::insert(conn, &run_row("r"))).await.unwrap();
        let go = |to| store.write(move |conn| runs::transition(conn, "r", RunStatus::Pending, to, None, "{}"));
        let (first, second) = tokio::join!(go(RunStatus::Planning), go(RunStatus::Cancelled));
        assert!(first.is_ok() != second.is_ok(), "{first:?} / {second:?}");
        let stale =
            store.write(|conn| runs::transition(conn, "r", RunStatus::Pending, RunStatus::Completed, None, "{}"));
        assert!(matches!(stale.await, Err(StoreError::Conflict(_))), "the run is no longer pending");
    }

    #[test]
    fn lookups_by_mostly_empty_columns_use_their_partial_indexes() {
        use diesel::RunQueryDsl;
        use diesel::sql_types::Text;
        #[derive(diesel::QueryableByName)]
        struct Step {
            #[diesel(sql_type = Text)]
            detail: String,
        }
        let (dir, store) = temp_store();
        drop(store);
        let mut conn = DbConn::establish(dir.path().join("t.db").to_str().unwrap()).unwrap();
        configure(&mut conn).unwrap();
        #[allow(irrefutable_let_patterns)]
        let DbConn::Sqlite(sqlite) = &mut conn else { unreachable!() };
        for (query, index) in [
            ("SELECT run_id FROM runs WHERE parent_run_id = 'p' ORDER BY run_id", "runs_by_parent"),
            ("SELECT run_id FROM runs WHERE thread_id = 't' ORDER BY created_at DESC", "runs_by_thread"),
            ("SELECT run_id FROM runs WHERE lease_owner = 'n'", "runs_by_lease_owner"),
            ("SELECT run_id FROM runs WHERE idempotency_key = 'k'", "runs_by_idempotency_key"),
        ] {
            let plan: Vec<Step> = diesel::sql_query(format!("EXPLAIN QUERY PLAN {query}")).load(sqlite).unwrap();
            let plan: Vec<String> = plan.into_iter().map(|step| step.detail).collect();
            assert!(plan.iter().any(|step| step.contains(index)), "{query}: {plan:?}");
        }
    }

    /// The options `.cargo/config.toml` builds the bundled SQLite with. Without the query planner
    /// stability guarantee a statement whose `LIMIT` is bound is compiled again at every
    /// execution, though diesel keeps it prepared.
    #[test]
    fn the_bundled_sqlite_is_built_as_configured() {
        use diesel::{Connection, RunQueryDsl};
        #[derive(diesel::QueryableByName)]
        struct CompileOption {
            #[diesel(sql_type = diesel::sql_types::Text)]
            compile_options: String,
        }
        let mut conn = diesel::SqliteConnection::establish(":memory:").unwrap();
        let options: Vec<CompileOption> = diesel::sql_query("PRAGMA compile_options").load(&mut conn).unwrap();
        let options: Vec<String> = options.into_iter().map(|option| option.compile_options).collect();
        for wanted in ["ENABLE_QPSG", "THREADSAFE=2", "DEFAULT_MEMSTATUS=0"] {
            assert!(options.iter().any(|option| option == wanted), "{wanted} is not in {options:?}");
        }
    }

    #[tokio::test]
    async fn only_runs_with_an_idempotency_key_are_in_its_unique_index() {
        let (_dir, store) = temp_store();
        let keyed = |id: &str| RunRow { idempotency_key: Some("k".into()), ..run_row(id) };
        let (plain, first, again) = (run_row("plain"), keyed("first"), keyed("again"));
        store.write(move |conn| runs::insert(conn, &plain)).await.unwrap();
        store.write(move |conn| runs::insert(conn, &first)).await.unwrap();
        assert!(store.write(move |conn| runs::insert(conn, &again)).await.is_err(), "a key is used once");
        let found = store.read(|conn| runs::by_idempotency_key(conn, "k")).await.unwrap();
        assert_eq!(found.map(|(run_id, _)| run_id).as_deref(), Some("first"));
        #[derive(diesel::QueryableByName)]
        struct Stat {
            #[diesel(sql_type = diesel::sql_types::Text)]
            stat: String,
        }
        let stat = store
            .write(|conn| {
                #[allow(irrefutable_let_patterns)]
                let DbConn::Sqlite(sqlite) = conn else { unreachable!() };
                use diesel::RunQueryDsl;
                diesel::sql_query("ANALYZE").execute(sqlite)?;
                let query = "SELECT stat FROM sqlite_stat1 WHERE idx = 'runs_by_idempotency_key'";
                Ok(diesel::sql_query(query).get_result::<Stat>(sqlite)?.stat)
            })
            .await
            .unwrap();
        assert!(stat.starts_with("1 "), "one entry, the keyed run's: {stat}");
    }

    #[test]
    fn urls() {
        assert_eq!(connection_url("sqlite://flexrun.db").unwrap(), "flexrun.db");
        assert_eq!(connection_url("sqlite:///tmp/x.db").unwrap(), "/tmp/x.db");
        assert_eq!(connection_url("data/x.db").unwrap(), "data/x.db");
        assert!(connection_url("sqlite://:memory:").is_err());
        assert!(connection_url("mysql://x").is_err());
    }

    #[tokio::test]
    async fn marking_a_thread_sets_its_keys_and_indexes_only_the_changed_ones_if_it_is_the_owners() {
        let (_dir, store) = temp_store();
        let at = now();
        let row = threads::ThreadRow {
            thread_id: "t".into(),
            owner: None,
            metadata: r#"{"graph_id":"old","team":"a"}"#.into(),
            created_at: at,
            updated_at: at,
        };
        store.write(move |conn| threads::insert(conn, &row)).await.unwrap();
        let later = at + chrono::Duration::seconds(5);
        let entries: &'static [(&str, &str)] = &[("graph_id", "\"flex\""), ("assistant_id", "\"flex\"")];
        store.write(move |conn| threads::mark(conn, "t", None, entries, later)).await.unwrap();
        let found = |key: &'static str, value: &'static str| {
            let metadata = vec![(key.to_string(), value.to_string())];
            let store = store.clone();
            async move {
                store
                    .read(move |conn| {
                        let search = threads::Search { owner: None, ids: None, metadata: &metadata };
                        threads::search(conn, &search, None, 10)
                    })
                    .await
                    .unwrap()
                    .len()
            }
        };
        assert_eq!(found("graph_id", "\"flex\"").await, 1);
        assert_eq!(found("graph_id", "\"old\"").await, 0, "the old value is out of the index");
        assert_eq!(found("assistant_id", "\"flex\"").await, 1);
        assert_eq!(found("team", "\"a\"").await, 1, "keys not named stay");
        let thread = store.read(|conn| threads::get(conn, "t")).await.unwrap();
        assert_eq!(thread.metadata, r#"{"assistant_id":"flex","graph_id":"flex","team":"a"}"#);
        assert_eq!(thread.updated_at, later);
        // Nothing to change: only the time moves.
        let latest = later + chrono::Duration::seconds(5);
        store.write(move |conn| threads::mark(conn, "t", None, entries, latest)).await.unwrap();
        let thread = store.read(|conn| threads::get(conn, "t")).await.unwrap();
        assert_eq!((thread.metadata.len(), thread.updated_at), (52, latest));
        assert!(matches!(
            store.write(move |conn| threads::mark(conn, "none", None, entries, latest)).await,
            Err(StoreError::ThreadNotFound(id)) if id == "none"
        ));
        // Not as the caller found it: another owner's thread is not marked.
        let last = latest + chrono::Duration::seconds(5);
        assert!(matches!(
            store.write(move |conn| threads::mark(conn, "t", Some("mallory"), entries, last)).await,
            Err(StoreError::ThreadNotFound(id)) if id == "t"
        ));
        let thread = store.read(|conn| threads::get(conn, "t")).await.unwrap();
        assert_eq!(thread.updated_at, latest, "left as it was");
    }
}
