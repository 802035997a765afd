//! Per-run broadcast of committed frames to live subscribers in this process.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::broadcast;

use super::Frame;

/// Frames a slow subscriber may fall behind by before it re-reads the event log.
const CAPACITY: usize = 256;

#[derive(Debug, Clone)]
pub enum BusMessage {
    /// A frame, already committed to the event log.
    Frame(Frame),
    /// The run stopped being active (ended or paused): subscribers catch up and finish.
    Settled,
}

/// Channels exist only while someone listens; publishing to a run nobody follows costs a lookup.
#[derive(Default)]
pub struct Bus {
    channels: Mutex<HashMap<String, broadcast::Sender<BusMessage>>>,
}

impl Bus {
    pub fn subscribe(&self, run_id: &str) -> broadcast::Receiver<BusMessage> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels.entry(run_id.to_string()).or_insert_with(|| broadcast::channel(CAPACITY).0).subscribe()
    }

    pub fn publish(&self, run_id: &str, message: BusMessage) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = channels.get(run_id)
            && sender.send(message).is_err()
        {
            channels.remove(run_id);
        }
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
        assert!(bus.channels.lock().unwrap().is_empty());
    }
}
