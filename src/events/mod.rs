//! Run events: frame encoding and decoding ([`Frame`], [`Event`]), payloads, and the in-process
//! [`Bus`] that fans committed frames out to live subscribers.

mod bus;
mod frame;
pub mod payload;
mod seq;

pub use bus::{Bus, BusMessage};
pub use frame::{DecodeError, DecodedFrame, Event, Frame, FrameHeader, FrameKind, ReceivedFrame};
pub use seq::{Seq, SeqOutOfRange};
