//! Verdicts on keys already judged, remembered per thread.
//!
//! Every key of every frame is judged as the frame is encoded, and a run's frames write the same
//! few dozen keys (`runId`, `seq`, `nodeId`, `status`, …) hundreds of times: remembering the
//! verdict on each turns a search for marker words into one hash lookup. Per thread, so that no
//! lock is shared between the threads that encode frames; under the number of the markers they
//! were reached with, so a verdict is never taken for a different set of markers (a number is
//! never reused, unlike an address). Bounded: keys longer than [`LONGEST`] bytes are judged
//! every time, and once [`MOST`] keys are remembered new ones are judged without being kept —
//! the keys of clients' data vary, the frame vocabulary is met first.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::hash::HashMap;

/// Longest key whose verdict is remembered, in bytes.
const LONGEST: usize = 48;

/// Most verdicts a thread remembers.
const MOST: usize = 1024;

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A number for a new set of markers, under which verdicts reached with them are remembered.
pub(super) fn number() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[derive(Default)]
struct Known {
    /// The number of the markers the verdicts were reached with.
    markers: u64,
    verdicts: HashMap<Box<[u8]>, bool>,
}

thread_local! {
    static KNOWN: RefCell<Known> = RefCell::default();
}

/// The verdict on `key` under the markers numbered `markers`: remembered on this thread, else
/// reached by `judge` (and remembered, within the bounds).
pub(super) fn remembered(markers: u64, key: &[u8], judge: impl Fn() -> bool) -> bool {
    if key.len() > LONGEST {
        return judge();
    }
    // While the thread ends, its memory may be gone: then the key is judged.
    KNOWN
        .try_with(|known| {
            let mut known = known.borrow_mut();
            if known.markers != markers {
                known.markers = markers;
                known.verdicts.clear();
            }
            if let Some(&verdict) = known.verdicts.get(key) {
                return verdict;
            }
            let verdict = judge();
            if known.verdicts.len() < MOST {
                known.verdicts.insert(key.into(), verdict);
            }
            verdict
        })
        .unwrap_or_else(|_| judge())
}
