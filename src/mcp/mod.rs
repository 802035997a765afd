//! MCP servers whose tools are capabilities: [`McpServers`] keeps the registered servers, lists
//! their tools (offered to the registry as `<server>.<tool>` capabilities) and makes the calls of
//! plan nodes, each through a [`client::Session`] of the official SDK. What a registration, a
//! tool and a result mean is the core's ([`flexrun_core::mcp`]).

mod client;
mod servers;

pub use servers::{McpRegistryError, McpServers, Publish, ServerState};
