//! Operator requests and decisions: what a run asks (a plan or result to approve, a node's
//! question, a human node's task, a policy's or the budget's decision), how a request closes,
//! and what an operator decided.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::budget::{Amount, BudgetLimits, Limit, Spent};
use crate::capability::ExecutorType;
use crate::condition::GoalConditionResult;
use crate::usage::Usage;

use super::{NodeStart, PolicyInfo, ReplanInfo, typed};

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
