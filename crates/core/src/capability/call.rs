//! One call of a capability, as the core sees it: what the capability is given
//! ([`ContextBundle`]), how its output is checked ([`check_output`]) and why a call produced no
//! usable output ([`CapabilityError`]). The server makes the call.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use super::endpoint::RefusedAddress;
use super::signal::InvalidSignal;
use crate::condition::GoalConditionResult;
use crate::contract::{OutputContract, SchemaViolation};
use crate::llm::LlmError;
use crate::mcp::question::{ToolAnswer, ToolQuestion, UnsupportedInput};

/// What a node's capability is given (and what an `http` capability receives as its body).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextBundle {
    pub run_id: String,
    pub node_id: String,
    pub capability_id: String,
    pub objective: String,
    /// Current values of the node's input facets.
    pub inputs: Map<String, Value>,
    /// The planner's instructions for this step, then the caller's special instructions.
    pub instructions: Vec<String>,
    /// Outputs of the steps this node depends on, by node id.
    pub prior_outputs: Map<String, Value>,
    /// Failed goal conditions on this node's output facets, when it runs again to repair them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repair: Vec<GoalConditionResult>,
    /// The questions this node asked operators (CLARIFY signals) and their answers, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clarifications: Vec<Clarification>,
    /// Why the previous attempt's output was refused, when the node runs again after failing its
    /// capability's post-conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_condition_failures: Option<PostConditionFailures>,
    /// An MCP tool node's arguments as planned (facet references not yet resolved); not part of
    /// what an `http` capability is sent.
    #[serde(skip)]
    pub arguments: Option<Value>,
    /// 1 for a node's first call, then one more for each retry of a failed call: sent to MCP
    /// servers (with the run and node ids) so that they can tell a retry from a new call.
    #[serde(skip)]
    pub attempt: u32,
    /// An MCP tool node that asked a question and was answered: what its call sends back.
    #[serde(skip)]
    pub tool_answer: Option<ToolAnswer>,
    /// The run's own model chain for `ai` capabilities (`policies.models.capabilities`; empty:
    /// the capability's `preferredModels`, else the server's route).
    #[serde(skip)]
    pub models: Vec<String>,
}

/// The post-conditions the previous output failed, and how many attempts are left.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PostConditionFailures {
    pub failures: Vec<GoalConditionResult>,
    pub failures_so_far: u32,
    pub max_retries: u32,
}

/// A question a node asked through a CLARIFY signal, and the operator's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Clarification {
    pub request_id: String,
    pub node_id: String,
    pub question: String,
    pub asked_at: String,
    /// `None` while the question waits for its answer.
    pub answer: Option<String>,
    pub answered_at: Option<String>,
    /// An MCP tool's question: what its next call must answer (not sent to `http` capabilities).
    #[serde(skip)]
    pub tool_question: Option<ToolQuestion>,
}

/// Why a capability produced no usable output.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CapabilityError {
    #[error("capability {0} is not registered")]
    NotRegistered(String),
    #[error("{0}")]
    Model(#[from] LlmError),
    #[error("capability endpoint timed out after {0:?}")]
    Timeout(Duration),
    #[error("could not reach the capability endpoint: {0}")]
    Connection(String),
    /// The endpoint is, or its host name resolved to, an address flexrun does not call. Calling
    /// again would resolve to the same refusal, so it is never retried.
    #[error("capability endpoint refused: {0}")]
    AddressRefused(RefusedAddress),
    #[error("capability endpoint answered HTTP {status}: {body}")]
    Status { status: u16, body: String, retry_after: Option<Duration> },
    #[error("capability response is larger than {0} bytes")]
    TooLarge(usize),
    #[error("capability output is {0}")]
    NotJson(String),
    #[error("capability output does not match its output contract ({} problem(s))", .0.len())]
    Contract(Vec<SchemaViolation>),
    /// Human capabilities are answered by an operator, never run.
    #[error("capability {0} is a human task; an operator submits its output")]
    HumanTask(String),
    #[error(transparent)]
    Signal(#[from] InvalidSignal),
    /// An MCP tool answered with `isError`: its text, bounded.
    #[error("the tool failed: {0}")]
    Tool(String),
    /// The MCP server no longer offers the tool (or is not registered any more).
    #[error("{0}")]
    ToolUnavailable(String),
    /// The node's arguments could not be completed from its facets (what was missing, where).
    #[error("{0}")]
    ArgumentUnresolved(String),
    /// The MCP server refused the call (a JSON-RPC error), bounded: not the tool's own failure.
    #[error("the MCP server refused the call: {0}")]
    Protocol(String),
    /// The tool asked for input flexrun cannot give (sampling, roots, a URL, several at once).
    #[error(transparent)]
    ToolInput(#[from] UnsupportedInput),
}

impl CapabilityError {
    /// A failure of the call rather than of its content: worth retrying.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Model(e) => e.is_transient(),
            Self::Timeout(_) | Self::Connection(_) => true,
            Self::Status { status, .. } => matches!(status, 408 | 429) || *status >= 500,
            Self::NotRegistered(_)
            | Self::AddressRefused(_)
            | Self::TooLarge(_)
            | Self::NotJson(_)
            | Self::Contract(_)
            | Self::HumanTask(_)
            | Self::Tool(_)
            | Self::ToolUnavailable(_)
            | Self::ArgumentUnresolved(_)
            | Self::Protocol(_)
            | Self::ToolInput(_)
            | Self::Signal(_) => false,
        }
    }

    /// How long the endpoint asked to wait before trying again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Model(e) => e.retry_after(),
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Whether a different plan may avoid a failure with this `node_error` code: the tool said
    /// its call failed (`tool_error`: wrong arguments, a missing record), the tool or capability
    /// is gone (`tool_unavailable`, `capability_not_registered`), or an argument's facet held
    /// nothing at its pointer (`argument_unresolved`). These ask for a repair replan; any other
    /// failure is the capability's own (an endpoint down after its retries, an output breaking
    /// its contract) and fails the run, as it always did.
    pub fn is_repairable(code: &str) -> bool {
        [Self::TOOL_ERROR, Self::TOOL_UNAVAILABLE, Self::ARGUMENT_UNRESOLVED, Self::NOT_REGISTERED].contains(&code)
    }

    const NOT_REGISTERED: &'static str = "capability_not_registered";

    const TOOL_ERROR: &'static str = "tool_error";
    const TOOL_UNAVAILABLE: &'static str = "tool_unavailable";
    const ARGUMENT_UNRESOLVED: &'static str = "argument_unresolved";

    /// Stable code for `node_error` frames.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotRegistered(_) => Self::NOT_REGISTERED,
            Self::Model(_) => "model_error",
            Self::Timeout(_) => "capability_timeout",
            Self::Connection(_) => "capability_unreachable",
            Self::AddressRefused(_) => "capability_address_refused",
            Self::Status { .. } => "capability_http_error",
            Self::TooLarge(_) => "capability_response_too_large",
            Self::NotJson(_) => "capability_output_not_json",
            Self::Contract(_) => "capability_output_invalid",
            Self::HumanTask(_) => "capability_is_human",
            Self::Signal(_) => "capability_signal_invalid",
            Self::Tool(_) => Self::TOOL_ERROR,
            Self::ToolUnavailable(_) => Self::TOOL_UNAVAILABLE,
            Self::ArgumentUnresolved(_) => Self::ARGUMENT_UNRESOLVED,
            Self::Protocol(_) => "mcp_error",
            Self::ToolInput(_) => "tool_input_unsupported",
        }
    }
}

/// Checks an output against a capability's contract.
pub fn check_output(contract: &OutputContract, output: &Value) -> Result<(), CapabilityError> {
    let violations = match contract {
        OutputContract::JsonSchema { schema, .. } => schema.violations(output),
        OutputContract::Facets { facets } => facets
            .iter()
            .filter(|facet| output.get(facet.as_str()).is_none())
            .map(|facet| SchemaViolation {
                instance_path: String::new(),
                keyword: "required".into(),
                message: format!("facet \"{facet}\" is missing from the output object"),
            })
            .collect(),
        OutputContract::Freeform { .. } => Vec::new(),
    };
    if violations.is_empty() { Ok(()) } else { Err(CapabilityError::Contract(violations)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn facets_contract_needs_every_facet() {
        let contract = OutputContract::parse(&json!({"mode": "facets", "facets": ["a", "b"]}), "").unwrap();
        assert!(check_output(&contract, &json!({"a": 1, "b": 2})).is_ok());
        let Err(CapabilityError::Contract(violations)) = check_output(&contract, &json!({"a": 1})) else {
            panic!("expected contract violation")
        };
        assert_eq!(violations.len(), 1);
        assert!(violations[0].message.contains("\"b\""));
    }
}
