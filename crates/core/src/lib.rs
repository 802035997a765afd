//! flexrun's pure core: what a run is made of and what its coordinator decides, with no I/O —
//! no tokio, no database, no HTTP. The server (`flexrun`) does the I/O around it: it stores what
//! this crate describes and executes what it decides.
//!
//! Its modules, from the bottom: the words shared by every layer ([`hash`],
//! [`excerpt`], [`elide`], [`redact`]); what a caller sends and a capability answers
//! ([`contract`], [`validation`], [`runtime_policy`]); and [`plan`], the plan a planner drafts.

/// The condition language, a crate of its own (`crates/conditions`).
pub use flexrun_conditions as condition;
pub use flexrun_conditions::suggest;

pub mod contract;
pub mod elide;
pub mod excerpt;
pub mod hash;
pub mod plan;
pub mod redact;
pub mod runtime_policy;
pub mod validation;
