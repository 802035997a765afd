//! Emits a run's frames: each batch is committed to the event log together with the state change
//! it reports, and only then broadcast. The recorder is owned by the run's coordinator, the single
//! writer of its event log, so sequence numbers are assigned without a database round trip.

use std::sync::Arc;

use crate::events::{Bus, BusMessage, Event, Frame, FrameHeader};
use crate::store::{DbConn, Store, StoreError, events};

pub struct Recorder {
    header: FrameHeader,
    next_seq: u64,
    store: Store,
    bus: Arc<Bus>,
}

impl Recorder {
    /// A recorder continuing a log whose last frame is `last_seq`.
    pub fn new(header: FrameHeader, last_seq: u64, store: Store, bus: Arc<Bus>) -> Self {
        Self { header, next_seq: last_seq + 1, store, bus }
    }

    pub fn run_id(&self) -> &str {
        &self.header.run_id
    }

    /// The plan version stamped on frames from now on.
    pub fn set_plan_version(&mut self, version: u32) {
        self.header.plan_version = Some(version);
    }

    /// Commits `write` and the frames of `events` in one transaction, then broadcasts the frames.
    /// On failure nothing is committed and the sequence numbers are reused.
    pub async fn record<F>(&mut self, events: Vec<Event>, write: F) -> Result<(), StoreError>
    where
        F: Fn(&mut DbConn) -> Result<(), StoreError> + Send + Sync + 'static,
    {
        let frames: Arc<[Frame]> = events
            .iter()
            .enumerate()
            .map(|(i, event)| Frame::encode(&self.header, self.next_seq + i as u64, event))
            .collect();
        let run_id = self.header.run_id.clone();
        let committed = frames.clone();
        self.store
            .write(move |conn| {
                write(conn)?;
                events::append(conn, &run_id, &committed)
            })
            .await?;
        self.next_seq += frames.len() as u64;
        if !frames.is_empty() {
            self.bus.publish(&self.header.run_id, BusMessage::Frames(frames));
        }
        Ok(())
    }

    /// Tells followers the run is no longer active, so their streams end once caught up.
    pub fn settle(&self) {
        self.bus.settle(&self.header.run_id);
    }
}
