//! flexrun runs LLM-planned agent runs and replans until the caller's goal conditions hold.
//!
//! A caller posts a [`envelope::TaskEnvelope`]; the [`planner`] turns it into a [`plan::Plan`] of
//! [`capability`] steps; the [`run`] coordinator executes it, evaluates every goal [`condition`]
//! and, when one fails, asks for a corrective plan. Every step is a frame ([`events`]) committed to
//! the [`store`] before it is streamed over SSE by the [`http`] server.
//!
//! Pure logic (conditions, contracts, plans, drafts, the status state machine, the replan budget)
//! does no I/O and is tested on its own; `services` wires the I/O parts together.

/// The condition language, a crate of its own (`crates/conditions`).
pub use flexrun_conditions as condition;
pub use flexrun_conditions::suggest;
/// The pure core, a crate of its own (`crates/core`).
pub use flexrun_core::{
    budget, contract, correlation, elide, envelope, error_code, excerpt, facet, hash, plan, redact, replan_budget,
    retry, runtime_policy, timeouts, usage, validation,
};
/// The store, a crate of its own (`crates/store`).
pub use flexrun_store as store;

pub mod caller;
pub mod capability;
pub mod cli;

pub mod config;
pub mod console;
pub mod events;
pub mod http;
pub mod langgraph;

pub mod llm;
pub mod mcp;
pub mod planner;
pub mod run;
pub mod services;
pub mod slots;

pub mod telemetry;
pub mod thread;
pub mod traces;

/// Every surface served beside the flex API: the console and the LangGraph-compatible API.
pub fn surfaces(cfg: &mut actix_web::web::ServiceConfig) {
    console::routes(cfg);
    langgraph::routes(cfg);
}
