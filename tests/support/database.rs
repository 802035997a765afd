//! The database behind a test server: a SQLite file in the test's directory by default, or — when
//! the suite runs against PostgreSQL (`FLEXRUN_TEST_DATABASE=postgres`, set by `scripts/test` for
//! its second pass) — a database of its own on the test PostgreSQL server, one per directory, so
//! a server restarted on the same directory finds its data again.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;

use diesel::Connection;
use flexrun::store::DbConn;

/// Whether this test process runs against PostgreSQL.
pub fn is_postgres() -> bool {
    match std::env::var("FLEXRUN_TEST_DATABASE").as_deref() {
        Ok("postgres") => true,
        Ok("sqlite") | Err(_) => false,
        Ok(other) => panic!("FLEXRUN_TEST_DATABASE={other}: use sqlite or postgres"),
    }
}

/// The `FLEXRUN_DATABASE_URL` of the test database for `dir` (created on first use).
pub fn url(dir: &Path) -> String {
    if !is_postgres() {
        return format!("sqlite://{}", dir.join("flexrun.db").display());
    }
    let server = postgres_server();
    let mut hasher = DefaultHasher::new();
    dir.hash(&mut hasher);
    let name = format!("flexrun_test_{:016x}", hasher.finish());
    create_database(&server, &name);
    let (base, _) = server.rsplit_once('/').expect("a database URL ends in /<database>");
    format!("{base}/{name}")
}

/// A connection to the test database for `dir`.
pub fn connect(dir: &Path) -> DbConn {
    let url = url(dir);
    let url = url.strip_prefix("sqlite://").unwrap_or(&url);
    DbConn::establish(url).unwrap_or_else(|e| panic!("open test database {url}: {e}"))
}

/// The test PostgreSQL server's URL (its `postgres` database).
pub fn postgres_server() -> String {
    if !cfg!(feature = "postgres") {
        panic!("FLEXRUN_TEST_DATABASE=postgres needs a build with --features postgres (scripts/test builds one)");
    }
    std::env::var("FLEXRUN_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "FLEXRUN_TEST_POSTGRES_URL is not set: run the tests with scripts/test, which installs Debian's \
             postgresql and starts a server on loopback (scripts/postgres start DIR prints the variables)"
        )
    })
}

/// Creates database `name` on `server` unless it exists (asked once per test process).
pub fn create_database(server: &str, name: &str) {
    use diesel::RunQueryDsl;
    static CREATED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut created = CREATED.lock().unwrap_or_else(|p| p.into_inner());
    if created.iter().any(|known| known == name) {
        return;
    }
    let mut admin = DbConn::establish(server).unwrap_or_else(|e| panic!("connect to {server}: {e}"));
    if let Err(error) = diesel::sql_query(format!("CREATE DATABASE {name}")).execute(&mut admin) {
        assert!(error.to_string().contains("already exists"), "CREATE DATABASE {name}: {error}");
    }
    created.push(name.to_string());
}

/// Whether anything created flexrun's schema in the test database for `dir` (without creating
/// the database file or the database itself).
pub fn has_schema(dir: &Path) -> bool {
    if !is_postgres() {
        return dir.join("flexrun.db").exists();
    }
    use diesel::{QueryableByName, RunQueryDsl};
    #[derive(QueryableByName)]
    struct Found {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        found: bool,
    }
    let query = "SELECT to_regclass('__diesel_schema_migrations') IS NOT NULL AS found";
    diesel::sql_query(query).get_result::<Found>(&mut connect(dir)).expect(query).found
}

/// A new, empty database on the test PostgreSQL server, whatever this pass's database is (for
/// tests about several nodes on one PostgreSQL): its URL.
pub fn fresh_postgres() -> String {
    let server = postgres_server();
    let name = format!("flexrun_cluster_{}", uuid::Uuid::new_v4().simple());
    create_database(&server, &name);
    let (base, _) = server.rsplit_once('/').expect("a database URL ends in /<database>");
    format!("{base}/{name}")
}

/// A PostgreSQL server of a test's own (`scripts/postgres`), for a test that restarts it; stopped
/// when dropped.
pub struct OwnServer {
    dir: tempfile::TempDir,
    /// Its `postgres` database.
    pub url: String,
}

impl OwnServer {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let output = postgres_script("start", dir.path());
        let url = output
            .lines()
            .find_map(|line| line.strip_prefix("FLEXRUN_TEST_POSTGRES_URL="))
            .unwrap_or_else(|| panic!("scripts/postgres start printed no URL:\n{output}"))
            .to_string();
        Self { dir, url }
    }

    /// Stops the server (its clients are disconnected) and starts it again, as an operator would.
    pub fn restart(&self) {
        postgres_script("restart", self.dir.path());
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        postgres_script("stop", self.dir.path());
    }
}

fn postgres_script(command: &str, dir: &Path) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/postgres");
    let output = std::process::Command::new(script).arg(command).arg(dir).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "scripts/postgres {command} failed (it needs Debian's postgresql package; scripts/test installs it):\n{text}"
    );
    text
}
