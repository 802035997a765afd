//! Runs as this node drives them. The run's pure half (state, status, context, the operator's
//! vocabulary, decisions) is the core's, re-exported here; this wing does its I/O:
//!
//! - [`lifecycle`]: a run started from an envelope, or picked up again from its stored log
//!   ([`stored`]), handed to a coordinator; [`recovery`] at start-up;
//! - the coordinator (private): calls, waits, time limits, deciding with [`decide`];
//! - [`log`]: the one writer of a run's log, and the rows that follow it ([`projection`]);
//! - [`control`]: operators' commands on stored runs;
//! - [`lease`]: who drives a run — claims, leases, takeover, the node's name, notifications;
//! - [`view`], [`follow`], [`backlog`], [`inbox`]: reading runs.
//!
//! ```text
//! http / cli ──► run::start / run::apply ──► coordinator ──► decide (pure) ──► events
//!                                   │               │
//!                                   └──► RunLog ◄───┘  stage: seq, apply to RunState, rows
//!                                          │           commit: one transaction, then publish
//!                                          ▼
//!                                        store
//! ```

pub mod backlog;
pub mod control;
mod coordinator;
pub mod follow;
pub mod fork;
pub mod inbox;
pub mod lease;
pub mod lifecycle;
pub mod list;
pub mod log;
pub mod projection;
pub mod recovery;
mod spans;
pub mod stored;
pub mod view;

/// The run's pure half — state, status, context, decisions — is the core's.
pub use flexrun_core::run::{context, decide, id, legacy, nodes, operator, state, status, usage};

pub use control::{Applied, ControlError, apply};
pub use id::RunId;
pub use lifecycle::{Idempotency, Origin, StartError, StartedRun, start};
pub use recovery::{recover, stop};
pub use status::{RunStatus, UnknownStatus};
pub use stored::{ResumeError, Stored, fold};
