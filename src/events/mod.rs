//! Run events: frame encoding ([`Frame`]), payloads, the in-process [`Bus`] that fans frames out to
//! live subscribers, and [`follow`], the gap-free stream of one run's frames (event log replay,
//! then live).

mod bus;
mod follow;
mod frame;
pub mod payload;

pub use bus::{Bus, BusMessage};
pub use follow::{FollowError, follow, follow_new};
pub use frame::{Event, Frame, FrameHeader, FrameKind, ReceivedFrame};
