//! The planner's frames: the request for a plan with the capabilities offered, a plan refused by
//! validation, and a plan generated or updated.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plan::{Diagnostic, Edge, IndexedPlan, Phase, Plan, PlanNode};
use crate::replan_budget::BudgetView;
use crate::usage::Usage;

use super::{ReplanInfo, ReplanReason};

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
