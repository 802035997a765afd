//! Run events: the core's frames and payloads ([`flexrun_core::events`], re-exported here), and
//! the in-process [`Bus`] that fans committed frames out to live subscribers.

mod bus;

pub use bus::{Bus, BusMessage};
pub use flexrun_core::events::*;
