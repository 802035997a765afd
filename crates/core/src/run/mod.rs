//! A run as pure data and decisions: where it stands ([`state`], folded from its events; its
//! [`status`] and their transitions), what its conditions read ([`context`]), and what it does
//! next ([`decide`]). The server's coordinator records what these decide and does the I/O.

pub mod context;
pub mod decide;
pub mod id;
pub mod state;
pub mod status;

pub use decide::operator;
pub use id::RunId;
pub use status::{RunStatus, UnknownStatus};
