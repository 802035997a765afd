//! MCP servers whose tools are capabilities: [`McpServers`] keeps the registered servers, lists
//! their tools (offered to the registry as `<server>.<tool>` capabilities) and makes the calls of
//! plan nodes, each through a [`client::Session`] of the official SDK, over flexrun's own HTTP
//! client ([`http::McpHttp`]), which reads answers within the response limit. What a
//! registration, a tool and a result mean is the core's ([`flexrun_core::mcp`]).

mod client;
mod http;
mod listing;
mod servers;
mod sse;
mod too_large;

pub use flexrun_core::mcp::{McpPolicy, TokenVariables};
pub use servers::{McpRegistryError, McpServers, Publish, ServerState};
