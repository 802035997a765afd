//! Run leases on the `runs` table (PostgreSQL: several nodes on one database; see
//! `docs/scale-out.md`). A lease says which node drives a run (`lease_owner`), until when by the
//! database's clock (`lease_expires_at`), and under which fencing token (`lease_epoch`, bumped on
//! every claim). Every commit of a run's log checks the epoch in its own transaction
//! ([`fence`], [`release`]), so a node that lost the lease can never write the run again.
//!
//! The statements are PostgreSQL's (`now()`, `make_interval`, `FOR UPDATE SKIP LOCKED`); flexrun
//! uses leases only there. Which statuses are active is the caller's to say.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Double, Integer, Nullable, Text, Timestamp};

use super::{DbConn, StoreError};
use flexrun_core::run::RunStatus;

/// The database's clock, as stored (UTC, no zone).
const NOW: &str = "(now() AT TIME ZONE 'UTC')";

/// The epoch of a run's first lease.
pub const FIRST_EPOCH: i64 = 1;

/// What claiming a run sets (`$1` the node, `$2` the lease in seconds): the next epoch, and a crash
/// attempt more when the lease taken over was not handed back.
const CLAIM: &str = "SET lease_owner = $1, lease_epoch = lease_epoch + 1, \
    lease_expires_at = (now() AT TIME ZONE 'UTC') + make_interval(secs => $2), \
    crash_attempts = crash_attempts + CASE WHEN lease_owner IS NULL THEN 0 ELSE 1 END";

/// What a claim returns.
const CLAIMED: &str = "RETURNING run_id, lease_epoch, crash_attempts";

/// A lease a node took: the run, its new epoch, and how many times a node died driving it.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct Taken {
    #[diesel(sql_type = Text)]
    pub run_id: String,
    #[diesel(sql_type = BigInt)]
    pub lease_epoch: i64,
    #[diesel(sql_type = Integer)]
    pub crash_attempts: i32,
}

/// A run's lease as stored.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct LeaseRow {
    #[diesel(sql_type = Nullable<Text>)]
    pub lease_owner: Option<String>,
    #[diesel(sql_type = BigInt)]
    pub lease_epoch: i64,
    #[diesel(sql_type = Nullable<Timestamp>)]
    pub lease_expires_at: Option<NaiveDateTime>,
    #[diesel(sql_type = Integer)]
    pub crash_attempts: i32,
}

/// A run's lease after a renewal: who holds it now, under which epoch.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct Renewed {
    #[diesel(sql_type = Text)]
    pub run_id: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub lease_owner: Option<String>,
    #[diesel(sql_type = BigInt)]
    pub lease_epoch: i64,
}

/// Gives a run being created its first lease ([`FIRST_EPOCH`]), in the transaction that inserts it.
pub fn take_new(conn: &mut DbConn, run_id: &str, node: &str, seconds: f64) -> Result<(), StoreError> {
    let sql = format!(
        "UPDATE runs SET lease_owner = $1, lease_epoch = $4, lease_expires_at = {NOW} + make_interval(secs => $2) \
         WHERE run_id = $3"
    );
    let query = diesel::sql_query(sql)
        .bind::<Text, _>(node)
        .bind::<Double, _>(seconds)
        .bind::<Text, _>(run_id)
        .bind::<BigInt, _>(FIRST_EPOCH);
    exactly_one(super::on_backend!(conn, |c| query.execute(c))?, run_id)
}

/// Fails with [`StoreError::Fenced`] unless the run's lease is still at `epoch`: the first
/// statement of every commit of a leased run. It locks the run's row until the commit, so a claim
/// racing it waits and then takes a higher epoch.
pub fn fence(conn: &mut DbConn, run_id: &str, epoch: i64) -> Result<(), StoreError> {
    let sql = "UPDATE runs SET lease_epoch = lease_epoch WHERE run_id = $1 AND lease_epoch = $2";
    let query = diesel::sql_query(sql).bind::<Text, _>(run_id).bind::<BigInt, _>(epoch);
    exactly_one(super::on_backend!(conn, |c| query.execute(c))?, run_id)
}

/// [`fence`], and lets go of the lease: the commit leaves the run waiting for an operator or
/// ended, so no node drives it. The epoch stays, so this holder's later writes still pass until
/// someone claims the run again.
pub fn release(conn: &mut DbConn, run_id: &str, epoch: i64) -> Result<(), StoreError> {
    let sql = "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL WHERE run_id = $1 AND lease_epoch = $2";
    let query = diesel::sql_query(sql).bind::<Text, _>(run_id).bind::<BigInt, _>(epoch);
    exactly_one(super::on_backend!(conn, |c| query.execute(c))?, run_id)
}

/// Claims up to `limit` runs in one of `active` statuses that no node holds, or whose lease ran
/// out. Rows another node is claiming are skipped, not waited for. Taking over a lease that was
/// not handed back counts a crash attempt.
pub fn claim_stale(
    conn: &mut DbConn,
    node: &str,
    seconds: f64,
    active: &[RunStatus],
    limit: i64,
) -> Result<Vec<Taken>, StoreError> {
    let sql = format!(
        "UPDATE runs {CLAIM} WHERE run_id IN (SELECT run_id FROM runs WHERE status IN ({statuses}) \
           AND (lease_owner IS NULL OR lease_expires_at < {NOW}) \
           ORDER BY updated_at LIMIT $3 FOR UPDATE SKIP LOCKED) {CLAIMED}",
        statuses = quoted(active),
    );
    let query = diesel::sql_query(sql).bind::<Text, _>(node).bind::<Double, _>(seconds).bind::<BigInt, _>(limit);
    Ok(super::on_backend!(conn, |c| query.load(c))?)
}

/// Claims up to `limit` runs in one of `active` statuses that `node` leased before `since` (when
/// this process took the node id, by the database's clock), whether or not their lease ran out:
/// the process that leased them is gone (`run::identity`). A lease renewed or taken at `since` or
/// later ends at `since + seconds` or later, so the runs this process leased itself are never
/// among them. Counts a crash attempt, as the leases were not handed back.
pub fn claim_own(
    conn: &mut DbConn,
    node: &str,
    seconds: f64,
    since: NaiveDateTime,
    active: &[RunStatus],
    limit: i64,
) -> Result<Vec<Taken>, StoreError> {
    let sql = format!(
        "UPDATE runs {CLAIM} WHERE run_id IN (SELECT run_id FROM runs WHERE status IN ({statuses}) \
           AND lease_owner = $1 AND lease_expires_at < $4 + make_interval(secs => $2) \
           ORDER BY updated_at LIMIT $3 FOR UPDATE SKIP LOCKED) {CLAIMED}",
        statuses = quoted(active),
    );
    let query = diesel::sql_query(sql)
        .bind::<Text, _>(node)
        .bind::<Double, _>(seconds)
        .bind::<BigInt, _>(limit)
        .bind::<Timestamp, _>(since);
    Ok(super::on_backend!(conn, |c| query.load(c))?)
}

/// The database's clock now (UTC, as stored).
pub fn now(conn: &mut DbConn) -> Result<NaiveDateTime, StoreError> {
    #[derive(QueryableByName)]
    struct Now {
        #[diesel(sql_type = Timestamp)]
        now: NaiveDateTime,
    }
    let query = diesel::sql_query(format!("SELECT {NOW} AS now"));
    Ok(super::on_backend!(conn, |c| query.get_result::<Now>(c))?.now)
}

/// Takes the lease of one run if no node holds it (or its lease ran out): for an operator's
/// command on a waiting run, sent to any node. `None` while another node drives the run.
pub fn take_free(conn: &mut DbConn, run_id: &str, node: &str, seconds: f64) -> Result<Option<Taken>, StoreError> {
    let sql = format!(
        "UPDATE runs {CLAIM} WHERE run_id = $3 AND (lease_owner IS NULL OR lease_expires_at < {NOW}) {CLAIMED}"
    );
    let query = diesel::sql_query(sql).bind::<Text, _>(node).bind::<Double, _>(seconds).bind::<Text, _>(run_id);
    Ok(super::on_backend!(conn, |c| query.load::<Taken>(c))?.pop())
}

/// Renews, in one statement, the leases `node` holds of `runs` (the runs it drives now: a run
/// whose driver stopped, say on a database error, is left to run out and be claimed again);
/// returns the leases it still holds. Run ids hold no comma (`run::id`).
///
/// Rows locked by a commit in flight are skipped, not waited for: the renewal holds no lock while
/// it waits for another, so it can never deadlock with the writer (whose batch locks several runs'
/// rows in its own order); a run skipped now is renewed by the next renewal, a third of a lease
/// later. Which leases are still held is read apart from what was renewed, so a skipped run is
/// not taken for lost.
pub fn renew(conn: &mut DbConn, node: &str, seconds: f64, runs: &[&str]) -> Result<Vec<Renewed>, StoreError> {
    let sql = format!(
        "WITH renewed AS (UPDATE runs SET lease_expires_at = {NOW} + make_interval(secs => $2) \
           WHERE run_id IN (SELECT run_id FROM runs WHERE lease_owner = $1 \
             AND run_id = ANY(string_to_array($3, ',')) FOR UPDATE SKIP LOCKED) RETURNING run_id) \
         SELECT run_id, lease_owner, lease_epoch FROM runs WHERE run_id = ANY(string_to_array($3, ','))"
    );
    let query = diesel::sql_query(sql).bind::<Text, _>(node).bind::<Double, _>(seconds).bind::<Text, _>(runs.join(","));
    Ok(super::on_backend!(conn, |c| query.load(c))?)
}

/// Hands back every lease `node` holds at once (a drain): the runs are claimable right away, and
/// no crash attempt is counted.
pub fn release_all(conn: &mut DbConn, node: &str) -> Result<usize, StoreError> {
    let sql = "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = $1";
    let query = diesel::sql_query(sql).bind::<Text, _>(node);
    Ok(super::on_backend!(conn, |c| query.execute(c))?)
}

/// A run's lease as stored (`NotFound` if there is no such run).
pub fn of(conn: &mut DbConn, run_id: &str) -> Result<LeaseRow, StoreError> {
    let sql = "SELECT lease_owner, lease_epoch, lease_expires_at, crash_attempts FROM runs WHERE run_id = $1";
    let query = diesel::sql_query(sql).bind::<Text, _>(run_id);
    super::on_backend!(conn, |c| query.load::<LeaseRow>(c))?
        .pop()
        .ok_or_else(|| StoreError::NotFound(format!("run {run_id}")))
}

/// Tells every node listening on `channel` (PostgreSQL `NOTIFY`, sent when the transaction
/// commits; the same payload twice in one transaction is sent once).
pub fn notify(conn: &mut DbConn, channel: &str, payload: &str) -> Result<(), StoreError> {
    let query = diesel::sql_query("SELECT pg_notify($1, $2)").bind::<Text, _>(channel).bind::<Text, _>(payload);
    super::on_backend!(conn, |c| query.execute(c))?;
    Ok(())
}

fn exactly_one(rows: usize, run_id: &str) -> Result<(), StoreError> {
    if rows == 1 { Ok(()) } else { Err(StoreError::Fenced(run_id.to_string())) }
}

/// `'a', 'b'`: the caller's status names (flexrun's own words, never a client's) as SQL literals.
fn quoted(statuses: &[RunStatus]) -> String {
    statuses.iter().map(|status| format!("'{}'", status.as_str())).collect::<Vec<_>>().join(", ")
}
