//! Who drives a run. In one process, the run's [`claims::Claim`]: one writer per run, the
//! sequencer of its log. Across nodes on one PostgreSQL, the run's lease, which the claim carries:
//! taken with the run's first commit or by [`takeover`] of a run whose lease ran out, renewed
//! while the node drives it, checked by every commit, handed back on drain. A node's name is held
//! for the life of its process ([`identity`]), and nodes tell each other what changed and what to
//! stop ([`notify`]).

pub mod claims;
pub mod identity;
pub mod notify;
pub mod takeover;

pub use takeover::{drain, join};
