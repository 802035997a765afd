//! Whether a process serves the database now: how a process starting on SQLite tells a crash of
//! the one before it from a clean stop. (Several nodes on PostgreSQL tell it from their leases
//! instead: [`super::leases`].)
//!
//! `serve` marks the database held as it starts ([`take`]) and hands it back when it stops
//! cleanly ([`hand_back`]). Finding it still held means the process before died while serving:
//! each run active then counts a crash attempt, so a run that kills the process every time it is
//! resumed is failed after a few starts rather than resumed forever.

use diesel::prelude::*;

use super::schema::{runs, serving};
use super::{DbConn, StoreError};
use flexrun_core::run::RunStatus;

/// An active run as a starting process finds it: its id and how many processes died driving it.
#[derive(Debug, Clone, PartialEq, Eq, Queryable)]
pub struct ActiveRun {
    pub run_id: String,
    pub crash_attempts: i32,
}

/// Marks the database held by the process starting now. If the one before did not hand it back
/// (it died while serving), each run with one of the `active` statuses counts a crash attempt.
/// Returns those runs, oldest first, with their crash attempts.
pub fn take(conn: &mut DbConn, active: &[RunStatus]) -> Result<Vec<ActiveRun>, StoreError> {
    let held: Option<bool> =
        super::on_backend!(conn, |c| serving::table.select(serving::held).get_result(c).optional())?;
    if held == Some(true) {
        let crashed = runs::table.filter(runs::status.eq_any(active));
        let counted = runs::crash_attempts.eq(runs::crash_attempts + 1);
        super::on_backend!(conn, |c| diesel::update(crashed).set(counted).execute(c))?;
    }
    let mark = (serving::id.eq(1), serving::held.eq(true));
    super::on_backend!(conn, |c| diesel::insert_into(serving::table)
        .values(mark)
        .on_conflict(serving::id)
        .do_update()
        .set(serving::held.eq(true))
        .execute(c))?;
    Ok(super::on_backend!(conn, |c| runs::table
        .filter(runs::status.eq_any(active))
        .order(runs::created_at)
        .select((runs::run_id, runs::crash_attempts))
        .load(c))?)
}

/// Hands the database back: the process stops cleanly, and the next one counts no crash.
pub fn hand_back(conn: &mut DbConn) -> Result<(), StoreError> {
    super::on_backend!(conn, |c| diesel::update(serving::table).set(serving::held.eq(false)).execute(c))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{runs as run_rows, tests::run_row};

    fn database(dir: &tempfile::TempDir) -> DbConn {
        use diesel_migrations::MigrationHarness;
        let mut conn = DbConn::establish(dir.path().join("t.db").to_str().unwrap()).unwrap();
        conn.run_pending_migrations(crate::MIGRATIONS).unwrap();
        for (run_id, status) in [("a", RunStatus::Running), ("b", RunStatus::AwaitingHitl)] {
            run_rows::insert(&mut conn, &run_rows::RunRow { status, ..run_row(run_id) }).unwrap();
        }
        conn
    }

    fn taken(conn: &mut DbConn) -> Vec<(String, i32)> {
        take(conn, &RunStatus::ACTIVE).unwrap().into_iter().map(|run| (run.run_id, run.crash_attempts)).collect()
    }

    #[test]
    fn only_a_database_not_handed_back_counts_a_crash_for_its_active_runs() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = database(&dir);
        let a = |attempts| vec![("a".to_string(), attempts)];
        assert_eq!(taken(&mut conn), a(0), "a first start counts nothing");
        hand_back(&mut conn).unwrap();
        assert_eq!(taken(&mut conn), a(0), "after a clean stop");
        // Not handed back: the process died while serving.
        assert_eq!(taken(&mut conn), a(1));
        assert_eq!(taken(&mut conn), a(2));
        let waiting = runs::table.filter(runs::run_id.eq("b")).select(runs::crash_attempts);
        let waiting: i32 = crate::on_backend!(&mut conn, |c| waiting.get_result(c)).unwrap();
        assert_eq!(waiting, 0, "a run waiting for an operator was driven by no process");
    }
}
