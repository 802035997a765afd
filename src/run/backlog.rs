//! Frames read from a run's log for a client that has not taken them yet: each follower's
//! [`Backlog`], and what all of a node's backlogs hold together, [`Backlogs`].
//!
//! A follower reads a log a page at a time (`store::events::page_after`, bounded in bytes), and
//! reads the next page only once its client has taken the last: a client that stops reading
//! holds one page. Thousands of such clients would still hold thousands of pages, so the node
//! bounds their sum too: a page that would take the node past it first cuts off the clients
//! that have held theirs the longest (the slowest readers), whose pages are dropped at once.
//! A cut-off client's stream ends; it re-attaches with `Last-Event-ID` and loses nothing.
//! Frames delivered live are not counted: they are shared by every follower of a run, and the
//! run's bus keeps only its last few commits (`events::Bus`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::store::events::LoggedFrame;
use crate::telemetry;

/// The backlogs of one node.
pub struct Backlogs {
    /// Bytes of frame text all backlogs may hold together.
    capacity: u64,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    total: u64,
    /// Holders by when they took their page: the first is the one that has held its page the
    /// longest.
    holders: BTreeMap<u64, Arc<Shared>>,
    next: u64,
}

/// One follower's page, shared with [`Backlogs`] so a cut can drop it.
#[derive(Default)]
struct Shared {
    frames: Mutex<VecDeque<LoggedFrame>>,
    cut: AtomicBool,
}

impl Shared {
    fn frames(&self) -> MutexGuard<'_, VecDeque<LoggedFrame>> {
        self.frames.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Backlogs {
    pub fn new(capacity: u64) -> Arc<Self> {
        Arc::new(Self { capacity, held: Mutex::default() })
    }

    /// A new follower's backlog, empty.
    pub fn backlog(self: &Arc<Self>) -> Backlog {
        Backlog { backlogs: self.clone(), shared: Arc::default(), holding: None }
    }

    /// Bytes all backlogs hold now.
    pub fn held(&self) -> u64 {
        self.lock().total
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What one follower has read and its client not yet taken. Dropping it gives its bytes back.
pub struct Backlog {
    backlogs: Arc<Backlogs>,
    shared: Arc<Shared>,
    /// Its place among the holders, and the bytes it holds (`None` while empty).
    holding: Option<(u64, u64)>,
}

impl Backlog {
    /// Holds `page` (read after the last one was taken), cutting off the slowest readers
    /// first if the node would otherwise hold more than its capacity.
    pub fn hold(&mut self, page: Vec<LoggedFrame>) {
        self.release();
        let bytes: u64 = page.iter().map(size).sum();
        if bytes == 0 {
            return;
        }
        let mut held = self.backlogs.lock();
        while held.total + bytes > self.backlogs.capacity {
            let Some((_, oldest)) = held.holders.pop_first() else { break };
            let dropped: u64 = oldest.frames().drain(..).map(|frame| size(&frame)).sum();
            oldest.cut.store(true, Ordering::Release);
            held.total -= dropped.min(held.total);
            telemetry::slow_reader_cut();
        }
        let place = held.next;
        held.next += 1;
        held.total += bytes;
        held.holders.insert(place, self.shared.clone());
        self.shared.frames().extend(page);
        self.holding = Some((place, bytes));
        telemetry::backlog_bytes(held.total);
    }

    /// The next frame of the page, if any is left.
    pub fn pop(&mut self) -> Option<LoggedFrame> {
        let frame = self.shared.frames().pop_front()?;
        if let Some((place, bytes)) = &mut self.holding {
            let taken = size(&frame).min(*bytes);
            *bytes -= taken;
            let mut held = self.backlogs.lock();
            held.total -= taken.min(held.total);
            if *bytes == 0 {
                held.holders.remove(place);
                self.holding = None;
            }
        }
        Some(frame)
    }

    /// Whether the node cut this follower off to stay within its capacity.
    pub fn is_cut(&self) -> bool {
        self.shared.cut.load(Ordering::Acquire)
    }

    /// Gives back what is held.
    fn release(&mut self) {
        let Some((place, _)) = self.holding.take() else { return };
        let left: u64 = self.shared.frames().drain(..).map(|frame| size(&frame)).sum();
        let mut held = self.backlogs.lock();
        if held.holders.remove(&place).is_some() {
            held.total -= left.min(held.total);
        }
    }
}

impl Drop for Backlog {
    fn drop(&mut self) {
        self.release();
    }
}

fn size(frame: &LoggedFrame) -> u64 {
    u64::try_from(frame.json.len()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Seq;

    fn page(sizes: &[usize]) -> Vec<LoggedFrame> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, size)| LoggedFrame {
                seq: Seq::ZERO.plus(i + 1),
                event_type: "log".into(),
                json: "x".repeat(*size).into(),
                secret_keys: None,
            })
            .collect()
    }

    #[test]
    fn a_backlog_holds_its_page_until_taken_and_gives_it_back() {
        let backlogs = Backlogs::new(1_000);
        let mut backlog = backlogs.backlog();
        backlog.hold(page(&[100, 200]));
        assert_eq!(backlogs.held(), 300);
        assert_eq!(backlog.pop().map(|f| f.json.len()), Some(100));
        assert_eq!(backlogs.held(), 200);
        assert_eq!(backlog.pop().map(|f| f.json.len()), Some(200));
        assert_eq!((backlogs.held(), backlog.pop().is_none()), (0, true));
        backlog.hold(page(&[50]));
        drop(backlog);
        assert_eq!(backlogs.held(), 0, "a dropped follower gives its page back");
    }

    #[test]
    fn the_slowest_readers_are_cut_off_to_stay_within_the_capacity() {
        let backlogs = Backlogs::new(1_000);
        let (mut slowest, mut slow, mut reader) = (backlogs.backlog(), backlogs.backlog(), backlogs.backlog());
        slowest.hold(page(&[400]));
        slow.hold(page(&[400]));
        reader.hold(page(&[100, 100]));
        assert_eq!(backlogs.held(), 1_000);
        reader.pop();
        reader.pop();
        reader.hold(page(&[300]));
        assert!(slowest.is_cut() && !slow.is_cut() && !reader.is_cut());
        assert_eq!(backlogs.held(), 700);
        assert!(slowest.pop().is_none(), "its page was dropped");
        assert_eq!(slow.pop().map(|f| f.json.len()), Some(400));
    }
}
