//! Why a run plans again: the reason and what caused it — a failed node, a runtime policy, a
//! capability's REPLAN signal — carried by every frame of a replan round; and a runtime policy
//! that acted (`policy_update`, `policy_triggered`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::condition::GoalConditionResult;
use crate::runtime_policy::TriggerKind;
use crate::usage::Usage;

use super::Trigger;

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
