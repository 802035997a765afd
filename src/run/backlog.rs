//! What a stream has read or written for a client that has not taken it yet: each stream's
//! [`Backlog`]s, and what all of a node's backlogs hold together, [`Backlogs`].
//!
//! A follower reads a run's log a page at a time (`store::events::page_after`, bounded in
//! bytes), and the next page only once its client has taken the last; a stream writes an event
//! to its connection a slice at a time (`http::sse`), the rest of the event waiting here. So a
//! client that stops reading holds a page and the rest of one event. Thousands of such clients
//! would still hold thousands of pages, so the node bounds their sum: a page or event that would
//! take the node past `limits.stream_backlog_bytes` first cuts off the streams that have held
//! theirs the longest without taking any of it (the slowest readers), and their backlogs are
//! dropped at once. A cut-off client's stream ends; it re-attaches with `Last-Event-ID` and
//! loses nothing. Frames delivered live are not counted: every follower of a run shares them,
//! and the run's bus keeps only its last few commits (`events::Bus`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::store::events::LoggedFrame;
use crate::telemetry;

/// What a backlog holds: anything with a size in bytes.
pub trait Weight {
    fn weight(&self) -> u64;
}

impl Weight for LoggedFrame {
    fn weight(&self) -> u64 {
        u64::try_from(self.json.len()).unwrap_or(u64::MAX)
    }
}

impl Weight for Bytes {
    fn weight(&self) -> u64 {
        u64::try_from(self.len()).unwrap_or(u64::MAX)
    }
}

/// The backlogs of one node.
pub struct Backlogs {
    /// Bytes all backlogs may hold together.
    capacity: u64,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    total: u64,
    /// Holders by when they last took something in: the first has held its backlog the longest.
    holders: BTreeMap<u64, Arc<dyn Cut>>,
    next: u64,
}

/// A backlog as [`Backlogs`] sees it: something it can drop to make room.
trait Cut: Send + Sync {
    /// Drops everything held and marks the backlog cut; the bytes dropped.
    fn cut(&self) -> u64;
}

/// One backlog's items, shared with [`Backlogs`] so a cut can drop them.
struct Shared<T> {
    items: Mutex<VecDeque<T>>,
    cut: AtomicBool,
}

impl<T> Shared<T> {
    fn items(&self) -> MutexGuard<'_, VecDeque<T>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T: Weight + Send> Cut for Shared<T> {
    fn cut(&self) -> u64 {
        self.cut.store(true, Ordering::Release);
        self.items().drain(..).map(|item| item.weight()).sum()
    }
}

impl Backlogs {
    pub fn new(capacity: u64) -> Arc<Self> {
        Arc::new(Self { capacity, held: Mutex::default() })
    }

    /// A new, empty backlog.
    pub fn backlog<T: Weight + Send + 'static>(self: &Arc<Self>) -> Backlog<T> {
        let shared = Arc::new(Shared { items: Mutex::new(VecDeque::new()), cut: AtomicBool::new(false) });
        Backlog { backlogs: self.clone(), shared, holding: None }
    }

    /// Bytes all backlogs hold now.
    pub fn held(&self) -> u64 {
        self.lock().total
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What one stream has and its client not yet: read frames, or the rest of an event. Dropping it
/// gives its bytes back.
pub struct Backlog<T: Weight + Send + 'static> {
    backlogs: Arc<Backlogs>,
    shared: Arc<Shared<T>>,
    /// Its place among the holders, and the bytes it holds (`None` while empty).
    holding: Option<(u64, u64)>,
}

impl<T: Weight + Send + 'static> Backlog<T> {
    /// Holds `items` (taken in once the last were taken out), cutting off the slowest readers
    /// first if the node would otherwise hold more than its capacity.
    pub fn hold(&mut self, items: impl IntoIterator<Item = T>) {
        self.release();
        let items: VecDeque<T> = items.into_iter().collect();
        let bytes: u64 = items.iter().map(Weight::weight).sum();
        if bytes == 0 {
            return;
        }
        let mut held = self.backlogs.lock();
        while held.total + bytes > self.backlogs.capacity {
            let Some((_, slowest)) = held.holders.pop_first() else { break };
            let dropped = slowest.cut();
            held.total -= dropped.min(held.total);
            telemetry::slow_reader_cut();
        }
        let place = held.next;
        held.next += 1;
        held.total += bytes;
        let holder: Arc<dyn Cut> = self.shared.clone();
        held.holders.insert(place, holder);
        *self.shared.items() = items;
        self.holding = Some((place, bytes));
        telemetry::backlog_bytes(held.total);
    }

    /// The next item held, if any is left.
    pub fn pop(&mut self) -> Option<T> {
        let item = self.shared.items().pop_front()?;
        if let Some((place, bytes)) = &mut self.holding {
            let taken = item.weight().min(*bytes);
            *bytes -= taken;
            let mut held = self.backlogs.lock();
            held.total -= taken.min(held.total);
            if *bytes == 0 {
                held.holders.remove(place);
                self.holding = None;
            }
            telemetry::backlog_bytes(held.total);
        }
        Some(item)
    }

    /// Whether the node cut this stream off to stay within its capacity.
    pub fn is_cut(&self) -> bool {
        self.shared.cut.load(Ordering::Acquire)
    }

    /// Gives back what is held.
    fn release(&mut self) {
        let Some((place, _)) = self.holding.take() else { return };
        let left: u64 = self.shared.items().drain(..).map(|item| item.weight()).sum();
        let mut held = self.backlogs.lock();
        if held.holders.remove(&place).is_some() {
            held.total -= left.min(held.total);
            telemetry::backlog_bytes(held.total);
        }
    }
}

impl<T: Weight + Send + 'static> Drop for Backlog<T> {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(sizes: &[usize]) -> Vec<Bytes> {
        sizes.iter().map(|size| Bytes::from(vec![b'x'; *size])).collect()
    }

    #[test]
    fn a_backlog_holds_until_taken_and_gives_it_back() {
        let backlogs = Backlogs::new(1_000);
        let mut backlog = backlogs.backlog();
        backlog.hold(bytes(&[100, 200]));
        assert_eq!(backlogs.held(), 300);
        assert_eq!(backlog.pop().map(|b| b.len()), Some(100));
        assert_eq!(backlogs.held(), 200);
        assert_eq!(backlog.pop().map(|b| b.len()), Some(200));
        assert_eq!((backlogs.held(), backlog.pop().is_none()), (0, true));
        backlog.hold(bytes(&[50]));
        drop(backlog);
        assert_eq!(backlogs.held(), 0, "a dropped stream gives its backlog back");
    }

    #[test]
    fn the_slowest_readers_are_cut_off_to_stay_within_the_capacity() {
        let backlogs = Backlogs::new(1_000);
        let (mut slowest, mut slow, mut reader) = (backlogs.backlog(), backlogs.backlog(), backlogs.backlog());
        slowest.hold(bytes(&[400]));
        slow.hold(bytes(&[400]));
        reader.hold(bytes(&[100, 100]));
        assert_eq!(backlogs.held(), 1_000);
        reader.pop();
        reader.pop();
        reader.hold(bytes(&[300]));
        assert!(slowest.is_cut() && !slow.is_cut() && !reader.is_cut());
        assert_eq!(backlogs.held(), 700);
        assert!(slowest.pop().is_none(), "its backlog was dropped");
        assert_eq!(slow.pop().map(|b| b.len()), Some(400));
    }
}
