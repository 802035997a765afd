//! The frames of one run after a given sequence number: first replayed from the event log, then
//! live from the bus, with no gap and no duplicate between the two. The stream ends after
//! `complete`, or once the run is no longer active and every frame has been delivered.

use std::collections::VecDeque;

use futures::Stream;
use tokio::sync::broadcast::{self, error::RecvError};

use super::{Bus, BusMessage, FrameKind};
use crate::store::events::{self, LoggedFrame};
use crate::store::{Store, StoreError, runs};

/// Frames read from the log per query.
const PAGE: i64 = 500;

#[derive(Debug, thiserror::Error)]
#[error("following the run's events failed: {0}")]
pub struct FollowError(#[from] StoreError);

struct Follower {
    store: Store,
    run_id: String,
    live: broadcast::Receiver<BusMessage>,
    last: u64,
    pending: VecDeque<LoggedFrame>,
    /// Read the log before listening (at start, after a gap or lag, when the run settles).
    replay: bool,
    /// The run is no longer active: finish once the log is exhausted.
    settled: Option<bool>,
    done: bool,
}

/// Streams the run's frames with `seq > after`. Subscribes before reading anything, so a frame
/// committed meanwhile is seen either in the log or live.
pub fn follow(
    store: Store,
    bus: &Bus,
    run_id: String,
    after: u64,
) -> impl Stream<Item = Result<LoggedFrame, FollowError>> + use<> {
    let live = bus.subscribe(&run_id);
    let follower = Follower {
        store,
        run_id,
        live,
        last: after,
        pending: VecDeque::new(),
        replay: true,
        settled: None,
        done: false,
    };
    futures::stream::unfold(follower, |mut f| async move {
        match f.next().await {
            Ok(Some(frame)) => Some((Ok(frame), f)),
            Ok(None) => None,
            Err(e) => {
                f.done = true;
                Some((Err(e), f))
            }
        }
    })
}

impl Follower {
    async fn next(&mut self) -> Result<Option<LoggedFrame>, FollowError> {
        loop {
            if let Some(frame) = self.pending.pop_front() {
                self.last = frame.seq;
                self.done = frame.event_type == FrameKind::Complete.as_str();
                return Ok(Some(frame));
            }
            if self.done {
                return Ok(None);
            }
            if self.settled.is_none() {
                let (store, id) = (self.store.clone(), self.run_id.clone());
                let status = store.read(move |conn| runs::get(conn, &id)?.status()).await?;
                self.settled = Some(!status.is_active());
            }
            if self.replay {
                let (store, id, last) = (self.store.clone(), self.run_id.clone(), self.last);
                let page = store.read(move |conn| events::after(conn, &id, last, PAGE)).await?;
                if page.is_empty() {
                    self.replay = false;
                    if self.settled == Some(true) {
                        return Ok(None);
                    }
                } else {
                    self.pending.extend(page);
                }
                continue;
            }
            match self.live.recv().await {
                Ok(BusMessage::Frame(frame)) if frame.seq <= self.last => {}
                Ok(BusMessage::Frame(frame)) if frame.seq == self.last + 1 => self.pending.push_back(LoggedFrame {
                    seq: frame.seq,
                    event_type: frame.kind.as_str().to_string(),
                    json: frame.json,
                }),
                Ok(BusMessage::Frame(_)) | Err(RecvError::Lagged(_)) => self.replay = true,
                Ok(BusMessage::Settled) | Err(RecvError::Closed) => {
                    self.settled = Some(true);
                    self.replay = true;
                }
            }
        }
    }
}
