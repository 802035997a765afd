//! Run events: what happened in a run ([`Event`] and its [`payload`]s), and the frames that carry
//! them — encoded once when committed ([`Frame`]), decoded when a log is read ([`DecodedFrame`]),
//! numbered by the run's [`Seq`].

mod frame;
pub mod payload;
mod seq;

pub use frame::{DecodeError, DecodedFrame, Event, Frame, FrameHeader, FrameKind, ReceivedFrame};
pub use seq::{Seq, SeqOutOfRange};
