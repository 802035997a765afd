//! A run's own frames: how it starts (`start`), what it logs — a pause, a resumption — and how
//! it ends (`complete`), or stops at its budget (`budget_exceeded`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::budget::{Amount, BudgetLimits, Limit, OnExceeded};
use crate::condition::GoalConditionResult;
use crate::replan_budget::ReplanLimits;
use crate::run::fork::ForkedFrom;
use crate::usage::Usage;

use super::{PostConditionSummary, typed};

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
