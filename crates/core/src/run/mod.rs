//! A run as pure data and decisions: where it stands ([`state`], folded from its events; its
//! [`status`] and their transitions), what its conditions read ([`context`]), what operators say to it
//! ([`operator`]), what its model calls used ([`usage`]), its plan versions' nodes as documents show them ([`nodes`]), and what it does next ([`decide`]); [`legacy`] reads runs stored before their
//! `start` frame said all a reader needs. The server's coordinator records what these decide and does the I/O.

pub mod context;
pub mod decide;
pub mod fork;
pub mod id;
pub mod legacy;
pub mod nodes;
pub mod operator;
pub mod state;
pub mod status;
pub mod usage;

pub use id::RunId;
pub use status::{RunStatus, UnknownStatus};
