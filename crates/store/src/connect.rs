//! Connections to the configured database, each made with the backend its URL names.

use diesel::Connection;
use diesel::r2d2::{Error, ManageConnection, R2D2Connection};

use super::DbConn;

/// Connects to `url` (as `connection_url` made it) with its own backend, so a failure says why:
/// the server refused the connection, no such database, a directory that does not exist.
/// `DbConn::establish` tries each backend in turn and answers any failure with "Invalid
/// connection url for multiconnection", which is all an operator saw of a database that could
/// not be opened at start, or that went away under the writer and the read pool.
pub(super) fn establish(url: &str) -> diesel::ConnectionResult<DbConn> {
    #[cfg(feature = "postgres")]
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return diesel::PgConnection::establish(url).map(DbConn::Pg);
    }
    diesel::SqliteConnection::establish(url).map(DbConn::Sqlite)
}

/// The read pool's connections: diesel's `ConnectionManager`, but made by [`establish`].
#[derive(Debug)]
pub(super) struct Manager {
    url: String,
}

impl Manager {
    pub(super) fn new(url: String) -> Self {
        Self { url }
    }
}

impl ManageConnection for Manager {
    type Connection = DbConn;
    type Error = Error;

    fn connect(&self) -> Result<DbConn, Error> {
        establish(&self.url).map_err(Error::ConnectionError)
    }

    fn is_valid(&self, conn: &mut DbConn) -> Result<(), Error> {
        conn.ping().map_err(Error::QueryError)
    }

    fn has_broken(&self, conn: &mut DbConn) -> bool {
        std::thread::panicking() || conn.is_broken()
    }
}

#[cfg(test)]
mod tests {
    use diesel::r2d2::ManageConnection;

    use super::Manager;

    #[test]
    fn a_pooled_connection_that_cannot_be_made_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let url = dir.path().join("missing/t.db").display().to_string();
        let Err(error) = Manager::new(url).connect() else { panic!("a file in a missing directory opened") };
        let error = error.to_string();
        assert!(error.contains("unable to open database file"), "{error}");
    }
}
