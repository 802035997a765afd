//! How a capability calls an MCP tool (the executor of `agentType: "mcp"` capabilities, which
//! flexrun makes of a registered server's tools: [`crate::mcp`]).

use serde::{Deserialize, Serialize};

use crate::contract::CompiledSchema;

/// What a tool says of itself: hints, not guarantees, recorded with its capability and shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolHints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
}

impl ToolHints {
    /// Whether a step of the tool may destroy: the protocol's default, unless the tool says it
    /// only reads or does not destroy.
    pub fn destructive(&self) -> bool {
        self.read_only_hint != Some(true) && self.destructive_hint != Some(false)
    }
}

/// How a capability calls its tool.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    /// The registered server's id.
    pub server: String,
    /// The tool's name on that server.
    pub name: String,
    /// The tool's `inputSchema`: a node's arguments are checked against it.
    pub arguments: CompiledSchema,
    /// The tool's `outputSchema`, when it declares one: its structured results are checked.
    pub output: Option<CompiledSchema>,
    pub hints: ToolHints,
}
