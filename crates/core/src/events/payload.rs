//! Payloads of each frame type. Their field names are the wire format (`docs/api.md`, "Frames"):
//! renaming one breaks clients and stored event logs.
//!
//! Every payload is read back with the same types it is written with: a stored or received frame
//! decodes into the typed [`Event`](super::Event) ([`super::DecodedFrame`]). Where a payload carries
//! a free-form object (`log.details`, a request's `context`, a human node's `assignment`), the
//! typed views of its known shapes are here too, so no reader looks into a payload by key.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::budget::{Amount, BudgetLimits, Limit, OnExceeded, Spent};
pub use crate::capability::ExecutorType;
use crate::condition::GoalConditionResult;
use crate::contract::SchemaViolation;
use crate::excerpt;
pub use crate::plan::Phase;
use crate::plan::{Diagnostic, Edge, IndexedPlan, Plan, PlanNode};
use crate::replan_budget::{BudgetView, ReplanLimits};
pub use crate::run::fork::{ForkedFrom, ReusedFrom};
pub use crate::runtime_policy::TriggerKind;
use crate::usage::Usage;

/// A run's first frame. Besides who the run is, it records what a reader of the run needs from
/// the envelope — the inputs that seed its context and the replan caps it was promised — so that
/// a run is read (replayed, shown, decided on) from its log alone. Runs written before these
/// fields existed lack them; [`crate::run::legacy`] completes them from the stored envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Start {
    pub run_id: String,
    pub thread_id: Option<String>,
    pub correlation_id: String,
    /// The envelope's `inputs`, seeded into the run context at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Map<String, Value>>,
    /// The replan caps resolved at start: the envelope's `policies.replan` over the configured
    /// ones. A run keeps them whatever the configuration says later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replan_limits: Option<ReplanLimits>,
    /// The budget resolved at start (`policies.budget` over `[budget]`); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetLimits>,
    /// The run this one was forked from, and where (`crate::run::fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
    /// The run's trace and root span, when it is traced (`crate::trace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace::RunTrace>,
}

/// What asked for a replan (`replan.reason`, `trigger.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplanReason {
    /// Goal conditions failed after a plan ran.
    GoalConditionFailed,
    /// A capability answered with a REPLAN signal.
    CapabilitySignal,
    /// A runtime policy's `replan` action.
    PolicyRuntimeReplan,
    /// An output kept failing its capability's post-conditions.
    PostConditionFailed,
    /// An operator rejected an approval with feedback.
    OperatorRejected,
    /// An operator asked for a new plan.
    OperatorReplan,
    /// A node failed in a way a different plan may avoid (an MCP tool's error, a tool gone, an
    /// argument that found nothing): see [`crate::capability::CapabilityError::is_repairable`].
    NodeError,
}

impl ReplanReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GoalConditionFailed => "goal_condition_failed",
            Self::CapabilitySignal => "capability_signal",
            Self::PolicyRuntimeReplan => "policy_runtime_replan",
            Self::PostConditionFailed => "post_condition_failed",
            Self::OperatorRejected => "operator_rejected",
            Self::OperatorReplan => "operator_replan",
            Self::NodeError => "node_error",
        }
    }

    /// An operator asked for this replan.
    pub fn is_operator(self) -> bool {
        matches!(self, Self::OperatorRejected | Self::OperatorReplan)
    }
}

/// Why a run is replanned, carried by every frame of a replan round (and read back from them
/// when a run resumes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplanInfo {
    pub reason: ReplanReason,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_goal_conditions: Vec<GoalConditionResult>,
    /// What the operator asked for (operator rejections and replans), given to the planner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// The REPLAN signal that asked for this replan (`capability_signal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<Box<SignalInfo>>,
    /// The runtime policy that asked for this replan (`policy_runtime_replan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Box<PolicyInfo>>,
    /// The node whose failure asked for this replan (`node_error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_error: Option<Box<FailedNode>>,
}

/// A node that failed: which, and its error's code and (bounded) message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedNode {
    pub node_id: String,
    pub capability_id: String,
    pub code: String,
    pub message: String,
}

/// A runtime policy that fired: which, on what trigger, after which node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyInfo {
    pub policy_id: String,
    pub trigger_kind: TriggerKind,
    /// The action's name (`retry`: a node runs again after failing its post-conditions).
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    /// The operator request whose decision this action follows (a `hitl` policy's
    /// `approveAction` or `rejectAction`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl PolicyInfo {
    /// The action of a node that runs again after its output failed its post-conditions.
    pub const RETRY: &'static str = "retry";
}

/// A capability's REPLAN signal: which node sent it and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalInfo {
    pub node_id: String,
    pub capability_id: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

impl ReplanInfo {
    /// A replan asked for by an operator (`operator_rejected`, `operator_replan`).
    pub fn operator(reason: ReplanReason, feedback: Option<String>) -> Self {
        Self { feedback, ..Self::empty(reason) }
    }

    fn empty(reason: ReplanReason) -> Self {
        Self {
            reason,
            failed_goal_conditions: Vec::new(),
            feedback: None,
            signal: None,
            policy: None,
            node_error: None,
        }
    }

    /// A replan after failed goal conditions (`goal_condition_failed`).
    pub fn goal_conditions(failed: Vec<GoalConditionResult>) -> Self {
        Self { failed_goal_conditions: failed, ..Self::empty(ReplanReason::GoalConditionFailed) }
    }

    /// A replan a capability asked for (`capability_signal`).
    pub fn capability_signal(signal: SignalInfo) -> Self {
        Self { signal: Some(Box::new(signal)), ..Self::empty(ReplanReason::CapabilitySignal) }
    }

    /// A replan after a node failed in a way a different plan may avoid (`node_error`).
    pub fn node_error(failed: FailedNode) -> Self {
        Self { node_error: Some(Box::new(failed)), ..Self::empty(ReplanReason::NodeError) }
    }

    /// A replan a runtime policy asked for: `policy_runtime_replan`, or `post_condition_failed`
    /// for an output that kept failing its post-conditions.
    pub fn runtime_policy(reason: ReplanReason, policy: PolicyInfo) -> Self {
        Self { policy: Some(Box::new(policy)), ..Self::empty(reason) }
    }

    /// What a `trigger.details` says about this replan: the signal, policy or failed node that
    /// asked for it, else the failed goal conditions, else the operator's feedback.
    pub fn details(&self) -> Value {
        let details = match (&self.signal, &self.policy) {
            (Some(signal), _) => serde_json::to_value(signal),
            (None, Some(policy)) => serde_json::to_value(policy),
            (None, None) if self.node_error.is_some() => serde_json::to_value(&self.node_error),
            (None, None) if !self.failed_goal_conditions.is_empty() => {
                Ok(serde_json::json!({"failedGoalConditions": self.failed_goal_conditions}))
            }
            (None, None) => Ok(serde_json::json!({"feedback": self.feedback})),
        };
        details.unwrap_or_default()
    }
}

/// A registered capability's state, as `plan_requested` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapabilityStatus {
    Active,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilitySummary {
    pub capability_id: String,
    pub display_name: String,
    pub status: CapabilityStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanRequested {
    pub attempt: u32,
    pub phase: Phase,
    pub capabilities: Vec<CapabilitySummary>,
    /// The run's replan caps and what it used of them, this request's replan included.
    pub budget: BudgetView,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replan: Option<ReplanInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanRejected {
    pub attempt: u32,
    pub phase: Phase,
    pub diagnostics: Vec<Diagnostic>,
    /// What the model calls whose outcome this frame records used (`crate::usage`); none
    /// without model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<Usage>>,
}

/// The plan as frames show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    pub run_id: String,
    /// Shared with every state the frame is folded into (the coordinator's, each stream's): a
    /// plan is installed without copying its nodes or indexing it again.
    #[serde(flatten)]
    pub plan: Arc<IndexedPlan>,
}

impl PlanView {
    pub fn new(run_id: String, plan: Plan) -> Self {
        Self { run_id, plan: Arc::new(IndexedPlan::from(plan)) }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanGenerated {
    pub plan: PlanView,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replan: Option<ReplanInfo>,
    /// What the model calls whose outcome this frame records used (`crate::usage`); none
    /// without model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<Usage>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trigger {
    pub reason: ReplanReason,
    pub details: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanUpdated {
    pub previous_version: u32,
    pub version: u32,
    pub trigger: Trigger,
    pub replan: ReplanInfo,
    pub nodes: Vec<PlanNode>,
    pub edges: Vec<Edge>,
}

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Log {
    pub severity: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// The `log` frame of a run that pauses until operators act: which status it waits in, and
/// for which nodes. (Its fields in the order a JSON object of them is written.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pause {
    /// The status the run waits in.
    pub event: String,
    pub node_ids: Vec<String>,
}

/// The `log` frame of a run picked up again after a restart: the nodes that had started but
/// not finished run again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resumed {
    pub interrupted_nodes: Vec<String>,
    /// The status the run was in.
    pub resumed_from: String,
}

impl Log {
    /// The messages of pause frames, by reason.
    pub const PAUSES: [&'static str; 3] =
        ["awaiting_policy_decision", "awaiting_human_assignment", "awaiting_clarification"];

    pub fn info(message: impl Into<String>, details: Option<Value>) -> Self {
        Self { severity: "info".into(), message: message.into(), details }
    }

    /// The frame that pauses a run in `status` for `nodes` (`message`: one of [`Self::PAUSES`]).
    pub fn paused(message: &'static str, status: &str, nodes: Vec<String>) -> Self {
        let details = Pause { event: status.to_string(), node_ids: nodes };
        Self::info(message, serde_json::to_value(details).ok())
    }

    /// What a pause frame says.
    pub fn pause(&self) -> Option<Pause> {
        Self::PAUSES.contains(&self.message.as_str()).then(|| typed(self.details.as_ref()?)).flatten()
    }

    /// What a frame announcing a restart says.
    pub fn resumed(&self) -> Option<Resumed> {
        self.message.starts_with(Self::RESUMED).then(|| typed(self.details.as_ref()?)).flatten()
    }

    /// How the message of a restart's frame begins.
    pub const RESUMED: &'static str = "Resumed after a restart";
}

/// A JSON value read as `T`, if it has that shape.
fn typed<T: DeserializeOwned>(value: &Value) -> Option<T> {
    T::deserialize(value).ok()
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompleteStatus {
    Completed,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Complete {
    pub status: CompleteStatus,
    pub output: Value,
    #[serde(rename = "goal_condition_results", default, skip_serializing_if = "Option::is_none")]
    pub goal_condition_results: Option<Vec<GoalConditionResult>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The latest post-condition results of every node whose capability has post-conditions.
    #[serde(rename = "post_condition_results", default, skip_serializing_if = "Vec::is_empty")]
    pub post_condition_results: Vec<PostConditionSummary>,
    /// The run's usage: every model call it made, with a breakdown by model (`byModel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<Usage>>,
}

impl Complete {
    /// The code and message of the error a run ended with (empty when it completed).
    pub fn error_summary(&self) -> (&str, &str) {
        let field =
            |key: &str| self.error.as_ref().and_then(|e| e.get(key)).and_then(Value::as_str).unwrap_or_default();
        (field("code"), field("message"))
    }
}

/// What an operator request asks for.
#[cfg_attr(feature = "diesel", derive(diesel::expression::AsExpression, diesel::deserialize::FromSqlRow))]
#[cfg_attr(feature = "diesel", diesel(sql_type = diesel::sql_types::Text))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HitlKind {
    /// Approve or reject (a plan, or the result before completion).
    Approval,
    /// Do a human node's work: submit its output or decline.
    HumanTask,
    /// Answer a node's question (its capability sent a CLARIFY signal).
    Clarify,
    /// Raise the run's budget (approve, with `budget`) or end the run (reject).
    Budget,
}

/// What an operator request is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HitlSubject {
    /// A new plan version, before any of its steps runs.
    Plan,
    /// The run's result, before it completes.
    Completion,
    /// A human node.
    Node,
    /// A runtime policy's `pause` or `hitl` action.
    Policy,
    /// The run's budget, which it reached.
    Budget,
}

crate::stored_as_text!(HitlKind, "request kind");

impl HitlKind {
    pub const ALL: [HitlKind; 4] = [Self::Approval, Self::HumanTask, Self::Clarify, Self::Budget];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approval => "approval",
            Self::HumanTask => "human_task",
            Self::Clarify => "clarify",
            Self::Budget => "budget",
        }
    }
}

impl HitlSubject {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Completion => "completion",
            Self::Node => "node",
            Self::Policy => "policy",
            Self::Budget => "budget",
        }
    }
}

/// An operator request as `hitl_request` frames (and the read endpoints) show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HitlRequestInfo {
    pub id: String,
    pub kind: HitlKind,
    pub subject: HitlSubject,
    pub question: String,
    pub plan_version: u32,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// What the operator reviews: for a completion, the composed output and goal results.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub context: Value,
}

/// The `context` of a runtime policy's request: the policy, what its decision leads to, and
/// for an output that failed its post-conditions, that output.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRequest {
    #[serde(flatten)]
    pub policy: PolicyInfo,
    #[serde(default)]
    pub approve_action: Option<String>,
    #[serde(default)]
    pub reject_action: Option<String>,
    #[serde(default)]
    pub label: Option<String>,
    /// The output that failed its post-conditions; approving the request accepts it.
    #[serde(default)]
    pub candidate_output: Option<Value>,
    #[serde(default)]
    pub post_condition_results: Vec<GoalConditionResult>,
}

/// What the run was about to do when it reached a limit: where it goes on once raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPhase {
    /// Ask the planner (for a draft of the plan being made).
    Planning,
    /// Run the plan's nodes.
    Execution,
}

/// The `context` of a budget request: the limit reached, where the run stopped, and its budget
/// and spending then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRequest {
    pub limit: Limit,
    pub max: Amount,
    pub spent: Amount,
    pub phase: BudgetPhase,
    /// The replan the planner was to be asked for (a repair, say): asked for once raised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replan: Option<ReplanInfo>,
    pub budget: BudgetLimits,
    pub spent_so_far: Spent,
}

/// The `context` of a node's question.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuestionContext {
    pub capability_id: String,
    pub label: String,
}

impl HitlRequestInfo {
    /// A runtime policy's request: its policy.
    pub fn policy(&self) -> Option<PolicyInfo> {
        self.policy_request().map(|r| r.policy)
    }

    /// A runtime policy's request, whole.
    pub fn policy_request(&self) -> Option<PolicyRequest> {
        (self.subject == HitlSubject::Policy).then(|| typed(&self.context)).flatten()
    }

    /// The capability and label of the node a question or a human task is about.
    pub fn node_context(&self) -> Option<QuestionContext> {
        typed(&self.context)
    }
}

impl NodeStart {
    /// The most JSON text one input value keeps in a `node_start` frame.
    pub const INPUT_BYTES: usize = 4 * 1024;

    /// A human node's task, as the request it opens in plan version `plan_version`: the
    /// assignment is its context.
    pub fn task(&self, plan_version: u32) -> Option<HitlRequestInfo> {
        let assignment = self.assignment.as_ref().filter(|_| self.executor_type == ExecutorType::Human)?;
        let task: TaskIdentity = typed(assignment)?;
        Some(HitlRequestInfo {
            id: task.task_id,
            kind: HitlKind::HumanTask,
            subject: HitlSubject::Node,
            question: HUMAN_TASK_QUESTION.into(),
            plan_version,
            created_at: task.created_at,
            node_id: Some(self.node_id.clone()),
            context: assignment.clone(),
        })
    }
}

/// The question a human node's task asks.
pub const HUMAN_TASK_QUESTION: &str = "Submit this node's output, or decline the task.";

/// What identifies a human node's task in its assignment.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskIdentity {
    task_id: String,
    created_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HitlRequest {
    pub request: HitlRequestInfo,
    /// A node's question: the usage of the calls that asked it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<Usage>>,
}

/// Where a request went when it left `pending`.
#[cfg_attr(feature = "diesel", derive(diesel::expression::AsExpression, diesel::deserialize::FromSqlRow))]
#[cfg_attr(feature = "diesel", diesel(sql_type = diesel::sql_types::Text))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestStatus {
    Pending,
    /// A decision answered it.
    Resolved,
    /// A replan discarded what it asked about.
    Superseded,
    /// The run ended first.
    Cancelled,
}

crate::stored_as_text!(RequestStatus, "request status");

impl RequestStatus {
    pub const ALL: [RequestStatus; 4] = [Self::Pending, Self::Resolved, Self::Superseded, Self::Cancelled];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Resolved => "resolved",
            Self::Superseded => "superseded",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A request that left `pending`, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClosedRequest {
    pub id: String,
    pub kind: HitlKind,
    pub subject: HitlSubject,
    pub status: RequestStatus,
}

/// What an operator decided.
#[cfg_attr(feature = "diesel", derive(diesel::expression::AsExpression, diesel::deserialize::FromSqlRow))]
#[cfg_attr(feature = "diesel", diesel(sql_type = diesel::sql_types::Text))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Approved,
    Rejected,
    /// A human task's output.
    Submitted,
    /// A human task refused, or a question left unanswered.
    Declined,
    /// A node's question answered.
    Answered,
}

crate::stored_as_text!(Verdict, "decision");

impl Verdict {
    pub const ALL: [Verdict; 5] = [Self::Approved, Self::Rejected, Self::Submitted, Self::Declined, Self::Answered];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Submitted => "submitted",
            Self::Declined => "declined",
            Self::Answered => "answered",
        }
    }
}

/// An operator's decision, as `hitl_resolved` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionInfo {
    pub decision: Verdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// The answer to a clarify request, given to the node that asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Who decided, as authenticated: the name of the operator's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HitlResolved {
    pub request: ClosedRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionInfo>,
    /// The replan the decision asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replan: Option<ReplanInfo>,
    /// An approved budget request: the run's limits from now on, as the operator raised them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetLimits>,
}

/// The run reached a limit of its budget ([`crate::budget`]): no model call starts until an
/// operator raises it (`action: pause`, followed by a `budget` request) — or the run fails
/// (`action: fail`, followed by `complete`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetExceeded {
    pub limit: Limit,
    pub max: Amount,
    pub spent: Amount,
    pub action: OnExceeded,
    /// Nodes whose next attempt was held back (they had started): they run again once the
    /// budget allows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_nodes: Vec<String>,
    /// The usage of calls no other frame records: the earlier attempts of the held nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<Usage>>,
}

/// A runtime policy acted without replanning (`emit`, `goto`, `pause`), or a node runs again
/// after failing its post-conditions (`retry`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyUpdate {
    #[serde(flatten)]
    pub policy: PolicyInfo,
    /// `emit`: the event and its payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// `pause`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub payload: Value,
    /// `goto`: the node run again, this policy's attempts so far and its cap, and every node
    /// that runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reset_nodes: Vec<String>,
    /// `retry` after failed post-conditions: the results of the attempt that failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_condition_results: Vec<GoalConditionResult>,
}

impl PolicyUpdate {
    /// A node runs again after its output failed its post-conditions.
    pub fn is_post_condition_retry(&self) -> bool {
        self.policy.action == PolicyInfo::RETRY && self.policy.trigger_kind == TriggerKind::OnPostConditionFailed
    }
}

/// A replan asked for by something other than failed goal conditions: an operator, a REPLAN
/// signal, a runtime policy, failed post-conditions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTriggered {
    pub run_id: String,
    pub trigger: Trigger,
    pub replan: ReplanInfo,
    /// The usage of the calls of nodes whose attempt the replan supersedes (the signal that
    /// asked for it, replies that came while it was on its way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<Usage>>,
}
