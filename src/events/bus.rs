//! Per-run broadcast of committed frames to live subscribers in this process, and one broadcast
//! of which runs changed (created, a new status, a new plan version) for lists that follow every
//! run, such as the console's.

use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use super::Frame;
use crate::hash::HashMap;

/// Commits a slow subscriber may fall behind by before it re-reads the event log. A broadcast
/// channel allocates all its slots up front and every followed run has one, so this is kept
/// small: a commit is one message however many frames it holds, and a follower that lags
/// loses nothing (it reads the log instead).
const CAPACITY: usize = 8;

#[derive(Debug, Clone)]
pub enum BusMessage {
    /// The frames of one commit, in order, already in the event log. One message per commit: a
    /// subscriber wakes once and writes them to its client together.
    Frames(Arc<[Frame]>),
    /// The run stopped being active (ended or paused): subscribers catch up and finish.
    Settled,
    /// Another node committed to the run (or may have): subscribers read its log and status.
    Changed,
}

/// Run changes a slow list may fall behind by before it is told to read the list again.
const CHANGES_CAPACITY: usize = 1_024;

/// Channels exist only while someone listens; publishing to a run nobody follows costs a lookup.
pub struct Bus {
    channels: Mutex<HashMap<String, broadcast::Sender<BusMessage>>>,
    /// The ids of runs whose row changed, as committed.
    changes: broadcast::Sender<Arc<str>>,
}

impl Default for Bus {
    fn default() -> Self {
        Self { channels: Mutex::default(), changes: broadcast::channel(CHANGES_CAPACITY).0 }
    }
}

impl Bus {
    /// Run `run_id`'s row changed (and is committed).
    pub fn announce(&self, run_id: &str) {
        // No receiver is the common case (no list is open), not an error.
        let _ = self.changes.send(run_id.into());
    }

    /// The ids of runs that change from now on.
    pub fn changes(&self) -> broadcast::Receiver<Arc<str>> {
        self.changes.subscribe()
    }

    pub fn subscribe(&self, run_id: &str) -> broadcast::Receiver<BusMessage> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = channels.get(run_id) {
            return sender.subscribe();
        }
        // Channels whose subscribers have all gone would otherwise keep their last frames forever.
        channels.retain(|_, sender| sender.receiver_count() > 0);
        let (sender, receiver) = broadcast::channel(CAPACITY);
        channels.insert(run_id.to_string(), sender);
        receiver
    }

    pub fn publish(&self, run_id: &str, message: BusMessage) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = channels.get(run_id)
            && sender.send(message).is_err()
        {
            channels.remove(run_id);
        }
    }

    /// The run will publish nothing more: tell its subscribers and drop its channel (each
    /// subscriber still receives what was sent, then the end of the channel).
    pub fn settle(&self, run_id: &str) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = channels.remove(run_id) {
            let _ = sender.send(BusMessage::Settled);
        }
    }

    /// The runs someone here follows.
    pub fn followed(&self) -> Vec<String> {
        let channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels.iter().filter(|(_, sender)| sender.receiver_count() > 0).map(|(run_id, _)| run_id.clone()).collect()
    }

    /// Runs with a live channel.
    pub fn channel_count(&self) -> usize {
        self.channels.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn delivers_to_subscribers_and_forgets_abandoned_channels() {
        let bus = Bus::default();
        bus.publish("r", BusMessage::Settled);
        let mut rx = bus.subscribe("r");
        bus.publish("r", BusMessage::Settled);
        assert!(matches!(rx.recv().await, Ok(BusMessage::Settled)));
        drop(rx);
        bus.publish("r", BusMessage::Settled);
        assert_eq!(bus.channel_count(), 0);
    }

    #[tokio::test]
    async fn settling_drops_the_channel_after_telling_subscribers() {
        let bus = Bus::default();
        let mut rx = bus.subscribe("r");
        bus.settle("r");
        assert_eq!(bus.channel_count(), 0);
        assert!(matches!(rx.recv().await, Ok(BusMessage::Settled)));
        assert!(rx.recv().await.is_err(), "the channel is closed");
    }

    #[tokio::test]
    async fn announces_changed_runs_to_every_list() {
        let bus = Bus::default();
        bus.announce("unheard");
        let (mut a, mut b) = (bus.changes(), bus.changes());
        bus.announce("r");
        assert_eq!(&*a.recv().await.unwrap(), "r");
        assert_eq!(&*b.recv().await.unwrap(), "r");
    }

    #[tokio::test]
    async fn subscribing_prunes_channels_nobody_listens_to() {
        let bus = Bus::default();
        drop(bus.subscribe("old"));
        let _live = bus.subscribe("new");
        assert_eq!(bus.channel_count(), 1);
    }
}
