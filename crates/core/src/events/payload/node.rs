//! A step's frames: its start, its completion, its error, an output that broke its contract, a
//! goal condition that failed, and a retry.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::capability::ExecutorType;
use crate::condition::GoalConditionResult;
use crate::contract::SchemaViolation;
use crate::excerpt;
use crate::run::fork::ReusedFrom;
use crate::usage::Usage;

use super::Trigger;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Facets {
    pub input: Vec<String>,
    pub output: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStart {
    /// Sent as the frame's top-level `nodeId`.
    #[serde(skip)]
    pub node_id: String,
    pub capability_id: String,
    pub label: String,
    pub kind: String,
    pub started_at: String,
    pub executor_type: ExecutorType,
    pub facets: Facets,
    /// A human node's task: who is asked for what, and where to answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment: Option<Value>,
    /// The input facets' values as the step was given them, each cut to
    /// [`NodeStart::INPUT_BYTES`] (a larger one is a marker with its size): what a step received
    /// stays readable after a later step rewrote the facet. Absent when it reads none (and in
    /// runs stored before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeComplete {
    #[serde(skip)]
    pub node_id: String,
    pub capability_id: String,
    pub label: String,
    pub completed_at: String,
    pub output: Value,
    /// `human` for an output a person submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_type: Option<ExecutorType>,
    /// The capability's post-conditions on this output (all hold).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_condition_results: Vec<GoalConditionResult>,
    /// What the model calls whose outcome this frame records used (`crate::usage`); none
    /// without model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<Usage>>,
    /// A fork's node that did not run: whose output it took (`crate::run::fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<ReusedFrom>,
}

/// The post-condition results of a completed node, as `complete` summarises them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostConditionSummary {
    pub node_id: String,
    pub capability_id: String,
    pub results: Vec<GoalConditionResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorInfo {
    pub code: String,
    pub message: String,
    /// What else the error says beside its code and message: an operator's refusal of a node
    /// gives its reason here (and the node's row in the run's document shows it).
    #[serde(flatten)]
    pub details: Map<String, Value>,
}

impl ErrorInfo {
    /// An error whose message is at most [`excerpt::FRAME`] characters: a capability that
    /// answers a megabyte of error text does not put it into every frame and log line after.
    pub fn new(code: impl Into<String>, message: &str) -> Self {
        Self { code: code.into(), message: excerpt::excerpt(message, excerpt::FRAME).into_owned(), details: Map::new() }
    }
}

/// The code of the error a run an operator cancelled ends with, and of the `node_error` of each
/// node it stopped (whose row then ends `cancelled`, not `failed`).
pub const CANCELLED: &str = "cancelled";

/// The `node_error` code of a human submission that broke its contract: the run keeps waiting,
/// and the node has not failed.
pub const HUMAN_OUTPUT_INVALID: &str = "human_output_invalid";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeError {
    #[serde(skip)]
    pub node_id: String,
    pub capability_id: String,
    pub label: String,
    pub error: ErrorInfo,
    /// What the model calls whose outcome this frame records used (`crate::usage`); none
    /// without model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<Usage>>,
}

/// Which output broke its contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValidationScope {
    /// A node's output against its capability's contract.
    CapabilityOutput,
    /// The run's composed output against the envelope's output contract.
    FinalOutput,
}

impl ValidationScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CapabilityOutput => "capability_output",
            Self::FinalOutput => "final_output",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidationError {
    #[serde(skip)]
    pub node_id: Option<String>,
    pub scope: ValidationScope,
    pub errors: Vec<SchemaViolation>,
    /// What the model calls whose outcome this frame records used (`crate::usage`); none
    /// without model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<Usage>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalConditionFailed {
    pub run_id: String,
    pub trigger: Trigger,
    pub failed_goal_conditions: Vec<GoalConditionResult>,
    pub attempt: u32,
    pub limit: u32,
}

/// What is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryScope {
    Planner,
    Capability,
}

/// A transient failure about to be retried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    #[serde(skip)]
    pub node_id: Option<String>,
    pub scope: RetryScope,
    /// 1 for the first retry.
    pub attempt: u32,
    pub max_retries: u32,
    pub delay_ms: u64,
    pub error: String,
    /// A model call moving along its route: the entry that failed and the one tried next (at
    /// once: `delayMs` 0). Such a retry does not count against `maxRetries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<crate::usage::Fallback>,
}
