//! What the store reports about its commits. The server describes these metrics and serves them
//! (`telemetry`); the store only records them.

use std::time::Duration;

/// Time to commit one batch of writes.
pub const COMMIT_DURATION: &str = "flexrun_db_commit_duration_seconds";
/// Writes (of any number of runs) committed together.
pub const WRITES_PER_COMMIT: &str = "flexrun_db_writes_per_commit";

/// One committed (or failed) batch of `writes` writes.
pub fn commit(writes: usize, elapsed: Duration) {
    metrics::histogram!(COMMIT_DURATION).record(elapsed.as_secs_f64());
    metrics::histogram!(WRITES_PER_COMMIT).record(f64::from(u32::try_from(writes).unwrap_or(u32::MAX)));
}
