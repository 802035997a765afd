//! The frames of one run after a given sequence number: first replayed from the event log, then
//! live from the bus, with no gap and no duplicate between the two. The stream ends after
//! `complete`, or once the run is no longer active and every frame has been delivered.

use std::collections::VecDeque;

use futures::Stream;
use tokio::sync::broadcast::{self, error::RecvError};

use super::status::RunStatus;
use crate::events::{Bus, BusMessage, Frame, FrameKind, Seq};
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
    last: Seq,
    pending: VecDeque<LoggedFrame>,
    /// Read the log before listening (at start, after a gap or lag, when the run settles).
    replay: bool,
    /// The last log read returned everything there was.
    caught_up: bool,
    /// Whether the run is no longer active (`None` until known).
    settled: Option<bool>,
    done: bool,
}

/// Streams the frames of an existing run with `seq > after`. Subscribes before reading anything,
/// so a frame committed meanwhile is seen either in the log or live.
pub fn follow(
    store: Store,
    bus: &Bus,
    run_id: String,
    after: Seq,
) -> impl Stream<Item = Result<LoggedFrame, FollowError>> + use<> {
    let live = bus.subscribe(&run_id);
    stream(Follower {
        store,
        run_id,
        live,
        last: after,
        pending: VecDeque::new(),
        replay: true,
        caught_up: false,
        settled: None,
        done: false,
    })
}

/// Streams a run that was just created: `live` was subscribed before its first commit, so every
/// frame arrives live and nothing needs to be read back from the log.
pub fn follow_new(
    store: Store,
    live: broadcast::Receiver<BusMessage>,
    run_id: String,
) -> impl Stream<Item = Result<LoggedFrame, FollowError>> + use<> {
    stream(Follower {
        store,
        run_id,
        live,
        last: Seq::ZERO,
        pending: VecDeque::new(),
        replay: false,
        caught_up: true,
        settled: Some(false),
        done: false,
    })
}

fn stream(follower: Follower) -> impl Stream<Item = Result<LoggedFrame, FollowError>> {
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
            if self.done || (self.caught_up && self.settled == Some(true)) {
                return Ok(None);
            }
            if self.replay {
                self.read_log().await?;
                continue;
            }
            match self.live.recv().await {
                Ok(BusMessage::Frames(frames)) => self.take_live(&frames),
                Err(RecvError::Lagged(_)) => self.replay_log(),
                Ok(BusMessage::Changed) => {
                    self.settled = None;
                    self.replay_log();
                }
                Ok(BusMessage::Settled) | Err(RecvError::Closed) => {
                    self.settled = Some(true);
                    self.replay_log();
                }
            }
        }
    }

    /// Queues the live frames that follow the last one delivered; a gap means frames were missed
    /// (the subscription started between commits), so the log is read instead.
    fn take_live(&mut self, frames: &[Frame]) {
        let delivered = self.last.plus(self.pending.len());
        let fresh = || frames.iter().filter(move |frame| frame.seq > delivered);
        let mut expected = delivered;
        let gapless = fresh().all(|frame| {
            expected = expected.next();
            frame.seq == expected
        });
        if !gapless {
            return self.replay_log();
        }
        self.pending.extend(fresh().map(|frame| LoggedFrame {
            seq: frame.seq,
            event_type: frame.kind.as_str().to_string(),
            json: frame.json.clone(),
            secret_keys: Some(frame.secret_keys),
        }));
    }

    fn replay_log(&mut self) {
        self.replay = true;
        self.caught_up = false;
    }

    /// One read: the run's status (the first time) and the next page of its log.
    async fn read_log(&mut self) -> Result<(), FollowError> {
        let (store, id, last, check_status) =
            (self.store.clone(), self.run_id.clone(), self.last, self.settled.is_none());
        let (status, page) = store
            .read(move |conn| {
                let status = if check_status { Some(runs::get(conn, &id)?.status) } else { None };
                Ok((status, events::after(conn, &id, last, PAGE)?))
            })
            .await?;
        if let Some(status) = status {
            // A status flexrun does not know is not one it drives.
            self.settled = Some(!status.parse().is_ok_and(RunStatus::is_active));
        }
        self.caught_up = i64::try_from(page.len()).is_ok_and(|read| read < PAGE);
        self.replay = !self.caught_up;
        self.pending.extend(page);
        Ok(())
    }
}
