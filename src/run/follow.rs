//! The frames of one run after a given sequence number: first replayed from the event log, then
//! live from the bus, with no gap and no duplicate between the two. The stream ends after
//! `complete`, or once the run is no longer active (it waits for an operator) and every frame
//! has been delivered.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::sync::broadcast::{self, error::RecvError};

use super::backlog::Backlog;
use crate::events::{Bus, BusMessage, Frame, FrameKind, Seq};
use crate::run::status::RunStatus;
use crate::services::Services;
use crate::store::events::{self, LogPage, LoggedFrame, Page};
use crate::store::{Store, StoreError, runs};

/// Frames read from the log per query, at most (and at most `limits.stream_page_bytes` of them).
const PAGE_FRAMES: i64 = 500;

/// How long a stream waits for a database it cannot reach (PostgreSQL restarting, say) before it
/// ends with the error: a restart only delays the frames, and after a longer outage the client
/// re-attaches with `Last-Event-ID` and loses nothing either.
const OUTAGE_PATIENCE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("following the run's events failed: {0}")]
    Store(#[from] StoreError),
    /// The client read too slowly while the node's stream backlog was full (`run::backlog`).
    #[error("the client read too slowly; re-attach with Last-Event-ID to go on")]
    TooSlow,
}

struct Follower {
    store: Store,
    bus: Arc<Bus>,
    run_id: String,
    live: broadcast::Receiver<BusMessage>,
    last: Seq,
    /// Frames read from the log, not yet delivered.
    backlog: Backlog<LoggedFrame>,
    page: Page,
    /// Frames delivered live, not yet delivered to the client.
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
    services: &Services,
    run_id: String,
    after: Seq,
) -> impl Stream<Item = Result<LoggedFrame, FollowError>> + use<> {
    let live = services.bus.subscribe(&run_id);
    stream(Follower {
        store: services.store.clone(),
        bus: services.bus.clone(),
        run_id,
        live,
        last: after,
        backlog: services.backlogs.backlog(),
        page: page(services),
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
    services: &Services,
    live: broadcast::Receiver<BusMessage>,
    run_id: String,
) -> impl Stream<Item = Result<LoggedFrame, FollowError>> + use<> {
    stream(Follower {
        store: services.store.clone(),
        bus: services.bus.clone(),
        run_id,
        live,
        last: Seq::ZERO,
        backlog: services.backlogs.backlog(),
        page: page(services),
        pending: VecDeque::new(),
        replay: false,
        caught_up: true,
        settled: Some(false),
        done: false,
    })
}

/// How much of a log a follower reads at once.
fn page(services: &Services) -> Page {
    Page { frames: PAGE_FRAMES, bytes: services.settings.limits.stream_page_bytes }
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
            if self.backlog.is_cut() {
                return Err(FollowError::TooSlow);
            }
            if let Some(frame) = self.backlog.pop().or_else(|| self.pending.pop_front()) {
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
                // The run's coordinator let go of it (and of its channel): paused or ended — or
                // stopped with the run still active (a database error, a lost lease, a drain), to
                // be driven again here or on another node. Its row says which: the stream ends
                // only with the run, so a client is not told it ended when it did not. Listening
                // again before the log is read leaves no gap.
                Ok(BusMessage::Settled) => {
                    self.live = self.bus.subscribe(&self.run_id);
                    self.settled = None;
                    self.replay_log();
                }
                Err(RecvError::Closed) => {
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
        self.pending.extend(fresh().map(LoggedFrame::from));
    }

    fn replay_log(&mut self) {
        self.replay = true;
        self.caught_up = false;
    }

    /// One read: the run's status (the first time) and the next page of its log. While the
    /// database cannot be reached it tries again, for up to [`OUTAGE_PATIENCE`].
    async fn read_log(&mut self) -> Result<(), FollowError> {
        let deadline = tokio::time::Instant::now() + OUTAGE_PATIENCE;
        let mut pause = Duration::from_millis(250);
        let (status, page) = loop {
            match self.read_page().await {
                Err(error) if error.is_unreachable() && tokio::time::Instant::now() + pause < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                read => break read?,
            }
        };
        if let Some(status) = status {
            self.settled = Some(!status.is_active());
        }
        self.caught_up = !page.more;
        self.replay = page.more;
        self.backlog.hold(page.frames);
        Ok(())
    }

    async fn read_page(&self) -> Result<(Option<RunStatus>, LogPage), StoreError> {
        let (store, id, last, check_status) =
            (self.store.clone(), self.run_id.clone(), self.last, self.settled.is_none());
        let size = self.page;
        store
            .read(move |conn| {
                let status = if check_status { Some(runs::get(conn, &id)?.status) } else { None };
                Ok((status, events::page_after(conn, &id, last, size)?))
            })
            .await
    }
}
