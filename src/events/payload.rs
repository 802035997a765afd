//! Payloads of each frame type, with the anchor's field names (spec §4).

use crate::run::budget::BudgetView;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::condition::GoalConditionResult;
use crate::contract::SchemaViolation;
pub use crate::plan::Phase;
use crate::plan::{Diagnostic, Edge, Plan, PlanNode};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Start {
    pub run_id: String,
    pub thread_id: Option<String>,
    pub correlation_id: String,
}

/// Why a run is replanned, carried by every frame of a replan round (and read back from them
/// when a run resumes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplanInfo {
    pub reason: String,
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
}

/// A runtime policy that fired: which, on what trigger, after which node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyInfo {
    pub policy_id: String,
    /// `onStart` or `onNodeComplete`.
    pub trigger_kind: String,
    /// The action's name.
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
    pub fn operator(reason: &str, feedback: Option<String>) -> Self {
        Self { reason: reason.into(), feedback, ..Self::empty() }
    }

    fn empty() -> Self {
        Self { reason: String::new(), failed_goal_conditions: Vec::new(), feedback: None, signal: None, policy: None }
    }

    /// A replan after failed goal conditions (`goal_condition_failed`).
    pub fn goal_conditions(failed: Vec<GoalConditionResult>) -> Self {
        Self { reason: "goal_condition_failed".into(), failed_goal_conditions: failed, ..Self::empty() }
    }

    /// A replan a capability asked for (`capability_signal`).
    pub fn capability_signal(signal: SignalInfo) -> Self {
        Self { reason: "capability_signal".into(), signal: Some(Box::new(signal)), ..Self::empty() }
    }

    /// What a `trigger.details` says about this replan: the signal or policy that asked for it,
    /// else the failed goal conditions, else the operator's feedback.
    pub fn details(&self) -> Value {
        let details = match (&self.signal, &self.policy) {
            (Some(signal), _) => serde_json::to_value(signal),
            (None, Some(policy)) => serde_json::to_value(policy),
            (None, None) if !self.failed_goal_conditions.is_empty() => {
                Ok(serde_json::json!({"failedGoalConditions": self.failed_goal_conditions}))
            }
            (None, None) => Ok(serde_json::json!({"feedback": self.feedback})),
        };
        details.unwrap_or_default()
    }

    /// A replan a runtime policy asked for (`policy_runtime_replan`).
    pub fn runtime_policy(policy: PolicyInfo) -> Self {
        Self { reason: "policy_runtime_replan".into(), policy: Some(Box::new(policy)), ..Self::empty() }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilitySummary {
    pub capability_id: String,
    pub display_name: String,
    pub status: &'static str,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanRequested {
    pub attempt: u32,
    pub phase: Phase,
    pub capabilities: Vec<CapabilitySummary>,
    /// The run's replan caps and what it used of them, this request's replan included.
    pub budget: BudgetView,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replan: Option<ReplanInfo>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanRejected {
    pub attempt: u32,
    pub phase: Phase,
    pub diagnostics: Vec<Diagnostic>,
}

/// The plan as frames show it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    pub run_id: String,
    #[serde(flatten)]
    pub plan: Plan,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanGenerated {
    pub plan: PlanView,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replan: Option<ReplanInfo>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Trigger {
    pub reason: String,
    pub details: Value,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanUpdated {
    pub previous_version: u32,
    pub version: u32,
    pub trigger: Trigger,
    pub replan: ReplanInfo,
    pub nodes: Vec<PlanNode>,
    pub edges: Vec<Edge>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Facets {
    pub input: Vec<String>,
    pub output: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStart {
    #[serde(skip)]
    pub node_id: String,
    pub capability_id: String,
    pub label: String,
    pub kind: String,
    pub started_at: String,
    pub executor_type: &'static str,
    pub facets: Facets,
    /// A human node's task: who is asked for what, and where to answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assignment: Option<Value>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeComplete {
    #[serde(skip)]
    pub node_id: String,
    pub capability_id: String,
    pub label: String,
    pub completed_at: String,
    pub output: Value,
    /// `human` for an output a person submitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_type: Option<&'static str>,
    /// The capability's post-conditions on this output (all hold).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub post_condition_results: Vec<GoalConditionResult>,
}

/// The post-condition results of a completed node, as `complete` summarises them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostConditionSummary {
    pub node_id: String,
    pub capability_id: String,
    pub results: Vec<GoalConditionResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ErrorInfo {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeError {
    #[serde(skip)]
    pub node_id: String,
    pub capability_id: String,
    pub label: String,
    pub error: ErrorInfo,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidationError {
    #[serde(skip)]
    pub node_id: Option<String>,
    /// `capability_output` or `final_output`.
    pub scope: &'static str,
    pub errors: Vec<SchemaViolation>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalConditionFailed {
    pub run_id: String,
    pub trigger: Trigger,
    pub failed_goal_conditions: Vec<GoalConditionResult>,
    pub attempt: u32,
    pub limit: u32,
}

/// A transient failure about to be retried.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    #[serde(skip)]
    pub node_id: Option<String>,
    /// `planner` or `capability`.
    pub scope: &'static str,
    /// 1 for the first retry.
    pub attempt: u32,
    pub max_retries: u32,
    pub delay_ms: u64,
    pub error: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Log {
    pub severity: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompleteStatus {
    Completed,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Complete {
    pub status: CompleteStatus,
    pub output: Value,
    #[serde(rename = "goal_condition_results", skip_serializing_if = "Option::is_none")]
    pub goal_condition_results: Option<Vec<GoalConditionResult>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The latest post-condition results of every node whose capability has post-conditions.
    #[serde(rename = "post_condition_results", skip_serializing_if = "Vec::is_empty")]
    pub post_condition_results: Vec<PostConditionSummary>,
}

/// What an operator request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HitlKind {
    /// Approve or reject (a plan, or the result before completion).
    Approval,
    /// Do a human node's work: submit its output or decline.
    HumanTask,
    /// Answer a node's question (its capability sent a CLARIFY signal).
    Clarify,
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
}

impl HitlKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approval => "approval",
            Self::HumanTask => "human_task",
            Self::Clarify => "clarify",
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

#[derive(Debug, Clone, Serialize)]
pub struct HitlRequest {
    pub request: HitlRequestInfo,
}

/// A request that left `pending`, and why.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClosedRequest {
    pub id: String,
    pub kind: HitlKind,
    pub subject: HitlSubject,
    /// `resolved`, `superseded` or `cancelled`.
    pub status: &'static str,
}

/// An operator's decision, as `hitl_resolved` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionInfo {
    /// `approved`, `rejected`, `submitted`, `declined` or `answered` (a clarify request).
    pub decision: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// The answer to a clarify request, given to the node that asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HitlResolved {
    pub request: ClosedRequest,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionInfo>,
    /// The replan the decision asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replan: Option<ReplanInfo>,
}

/// A replan asked for by something other than failed goal conditions (here: an operator).
/// A runtime policy acted without replanning (`emit`, `goto`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyUpdate {
    #[serde(flatten)]
    pub policy: PolicyInfo,
    /// `emit`: the event and its payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// `pause`: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub payload: Value,
    /// `goto`: the node run again, this policy's attempts so far and its cap, and every node
    /// that runs again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reset_nodes: Vec<String>,
    /// `retry` after failed post-conditions: the results of the attempt that failed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub post_condition_results: Vec<GoalConditionResult>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTriggered {
    pub run_id: String,
    pub trigger: Trigger,
    pub replan: ReplanInfo,
}
