//! flexrun's pure core: what a run is made of and what its coordinator decides, with no I/O —
//! no tokio, no database, no HTTP. The server (`flexrun`) does the I/O around it: it stores what
//! this crate describes and executes what it decides.
//!
//! Its modules, from the bottom: the words shared by every layer ([`hash`],
//! [`excerpt`], [`elide`], [`redact`], the HTTP API's [`error_code`]s); what a caller sends and a capability answers
//! ([`envelope`] with its [`correlation`] id, [`contract`], [`validation`], [`runtime_policy`], [`timeouts`], [`retry`],
//! [`budget`], [`facet`], and the [`settings`] that give their defaults); and [`plan`], the plan a
//! planner drafts.

/// The condition language, a crate of its own (`crates/conditions`).
pub use flexrun_conditions as condition;
pub use flexrun_conditions::suggest;

pub mod budget;
pub mod capability;
pub mod contract;
pub mod correlation;
pub mod elide;
pub mod envelope;
pub mod error_code;
pub mod events;
pub mod excerpt;
pub mod facet;
pub mod hash;
pub mod llm;
pub mod mcp;
pub mod plan;
pub mod planner;
pub mod redact;
pub mod replan_budget;
pub mod retry;
pub mod run;
pub mod runtime_policy;
pub mod settings;
pub mod timeouts;
pub mod trace;
pub mod usage;
pub mod validation;
pub mod vocabulary;
