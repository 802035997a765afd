//! Capabilities as the server runs them: the [`Registry`] holds the active set (stored, and read
//! from registration files; with several nodes on one database it [`follow`]s what is stored),
//! [`Executors`] call one — an `ai` capability through the model, an
//! `http` one through a client whose [`GuardedResolver`] refuses link-local and metadata
//! addresses. What a capability is, and what a call is given and answers, is the core's
//! ([`flexrun_core::capability`]), re-exported here.

mod execute;
mod follow;
mod registry;
mod resolver;

pub use execute::{Executors, HttpLimits};
pub use flexrun_core::capability::*;
pub use follow::follow;
pub use registry::{MCP_SERVER_KEY, REGISTRATIONS, RegistrationFiles, Registry, RegistryError, registration_files};
pub use resolver::GuardedResolver;
