//! The open-file limit of a serving process.
//!
//! Every open run holds descriptors: its client's SSE connection and, while a step waits for the
//! model, a connection to the model server; SQLite's files and PostgreSQL's connections come on
//! top. Linux starts most processes with a soft limit of 1,024 descriptors under a far higher hard
//! limit, which would cap a node at a few hundred open runs, so `flexrun serve` raises its soft
//! limit to the hard one at start, as any process may, and logs what it did.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Raises the soft descriptor limit to the hard limit (or to `ceiling` when there is none).
/// Returns the limits before and after, or `None` when the soft limit already was the hard one.
pub fn raise() -> Option<(u64, Result<u64, rustix::io::Errno>)> {
    /// Used when the hard limit is "unlimited", which the kernel caps at `fs.nr_open` anyway.
    const CEILING: u64 = 1 << 20;
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let target = maximum.unwrap_or(CEILING);
    let before = current?;
    if before >= target {
        return None;
    }
    let raised = setrlimit(Resource::Nofile, Rlimit { current: Some(target), maximum }).map(|()| target);
    Some((before, raised))
}

/// [`raise`], logged.
pub fn raise_and_log() {
    match raise() {
        None => {}
        Some((before, Ok(after))) => tracing::info!(before, after, "raised the open-file limit to the hard limit"),
        Some((before, Err(error))) => {
            tracing::warn!(before, %error, "cannot raise the open-file limit; each open run needs about two descriptors")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let Rlimit { maximum, .. } = getrlimit(Resource::Nofile);
        let hard = maximum.unwrap_or(1 << 20);
        // Start below the hard limit, as most processes do (low enough to see, high enough for
        // the other tests of this process meanwhile).
        let low = hard.min(1_024) - 1;
        setrlimit(Resource::Nofile, Rlimit { current: Some(low), maximum }).unwrap();
        let raised = raise();
        assert!(matches!(raised, Some((before, Ok(after))) if before == low && after == hard), "{raised:?}");
        assert_eq!(getrlimit(Resource::Nofile).current, Some(hard));
        assert!(raise().is_none(), "a second call has nothing to raise");
    }
}
