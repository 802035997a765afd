//! Where a run stands: one value, [`RunState`], changed only by [`RunState::apply`].
//!
//! A run's event log is the one source of its state. The coordinator applies every event as it
//! records it; recovery, a node taking a run over, operator commands and every reader fold the
//! committed log with the same function. So a replayed run cannot differ from the run that was
//! live, and a new reader needs no fold of its own. Pure: no I/O.

mod nodes;
mod requests;
#[cfg(test)]
mod tests;

use crate::hash::HashMap;
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;

use super::context::RunContext;
use super::id::RunId;
use super::status::{RunStatus, UnknownStatus};
use super::usage::RunUsage;
use crate::budget::BudgetLimits;
use crate::capability::Clarification;
use crate::condition::GoalConditionResult;
use crate::events::payload::*;
use crate::events::{DecodedFrame, Event, Seq};
use crate::plan::{IndexedPlan, NodeId, NodeStatus};
use crate::planner::CompletedWork;
use crate::replan_budget::{ReplanCounts, ReplanLimits};
use crate::runtime_policy::Fired;

pub use requests::PolicyFollowUp;

/// Where an event sits in its run's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    pub seq: Seq,
    pub timestamp: DateTime<Utc>,
}

/// Post-conditions of a run's nodes: the latest results of completed nodes (summarised on
/// `complete`) and the failed attempts of nodes that run again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PostConditionState {
    pub passed: Vec<PostConditionSummary>,
    /// Failed attempts so far and the failures of the last one, by node id.
    pub failing: HashMap<String, (u32, Vec<GoalConditionResult>)>,
}

/// A plan version of a run: the plan, when it was installed, and the replan that made it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanVersion {
    pub plan: Arc<IndexedPlan>,
    pub at: DateTime<Utc>,
    /// Why the plan was replaced by this one (`None` for the first plan).
    pub replan: Option<ReplanInfo>,
}

/// The state of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunState {
    pub run_id: RunId,
    pub correlation_id: String,
    pub status: RunStatus,
    /// When the run started (its `start` frame); `None` before it.
    pub started_at: Option<DateTime<Utc>>,
    /// The `seq` of the last event applied; 0 before any.
    pub last_seq: Seq,
    /// When the last event applied was recorded.
    pub last_at: Option<DateTime<Utc>>,
    /// Planner calls asked for so far (the `attempt` of the last `plan_requested`).
    pub planner_attempts: u32,
    /// The replans granted so far, by what asked for them.
    pub replans: ReplanCounts,
    /// Every plan version, oldest first; the last is the current plan.
    pub plans: Vec<PlanVersion>,
    /// The current plan's nodes.
    pub nodes: HashMap<NodeId, NodeStatus>,
    /// Work completed in any plan version, by node id, in completion order.
    completed: Vec<CompletedWork>,
    /// Where each node's entry is in `completed`: a node's output is found without a search.
    completed_at: HashMap<String, usize>,
    /// The goal conditions that failed last: given to nodes that run again to repair them.
    pub repair: Vec<GoalConditionResult>,
    /// Why the planner was asked last, or why an operator or a trigger asked for a replan since.
    pub replan: Option<ReplanInfo>,
    /// A node failure committed before the run could fail with it.
    pub failed: Option<FailedNode>,
    /// Operator requests still open (approvals, questions, human tasks), oldest first.
    pub requests: Vec<HitlRequestInfo>,
    /// The questions nodes asked operators and their answers, oldest first.
    pub clarifications: Vec<Clarification>,
    /// An operator approved the run's result (asked once per run).
    pub completion_approved: bool,
    /// Nodes of the current plan an operator approved to run (steps of destructive tools).
    pub approved_nodes: Vec<String>,
    /// When an operator last decided: the run's time limit counts from then.
    pub operator_at: Option<DateTime<Utc>>,
    /// What the run's runtime policies have done.
    pub fired: Fired,
    pub post_conditions: PostConditionState,
    /// An operator decided on a runtime policy's request; its follow-up action is still to do.
    pub policy_follow_up: Option<PolicyFollowUp>,
    pub context: RunContext,
    /// How the run ended (its `complete` frame).
    pub end: Option<Complete>,
    /// The replan caps the run was started with (its `start` frame).
    pub replan_limits: Option<ReplanLimits>,
    /// The run this one was forked from (its `start` says).
    pub forked_from: Option<crate::run::fork::ForkedFrom>,
    /// A fork's nodes whose output was taken instead of running them, by node id.
    pub reused: HashMap<String, crate::run::fork::ReusedFrom>,
    /// The run's budget: as started with (`start`), or as an operator last raised it.
    pub budget: Option<BudgetLimits>,
    /// What the run's model calls used, as its frames record it.
    pub usage: RunUsage,
    /// The run's trace (its `start` says), when it is traced.
    pub trace: Option<crate::trace::RunTrace>,
}

/// Why an event cannot be applied: the log is not one flexrun wrote (or a bug wrote it).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApplyError {
    #[error("frame {got} follows frame {last}: the log has a gap")]
    Gap { last: Seq, got: Seq },
    #[error("frame {seq} ({kind}) moves the run from {from} to {to}, which the state machine forbids")]
    Transition { seq: Seq, kind: &'static str, from: RunStatus, to: RunStatus },
    #[error("frame {seq} ({kind}) names node \"{node_id}\", which the current plan does not have")]
    UnknownNode { seq: Seq, kind: &'static str, node_id: String },
    #[error("frame {seq} ({kind}) comes before the run's `start`")]
    NotStarted { seq: Seq, kind: &'static str },
    #[error("frame {seq} is unreadable: {reason}")]
    Unreadable { seq: Seq, reason: String },
}

impl RunState {
    /// A run that has not started yet: its identity. Its `start` frame brings the rest.
    pub fn new(run_id: &RunId, correlation_id: &str) -> Self {
        Self {
            run_id: run_id.clone(),
            correlation_id: correlation_id.to_string(),
            status: RunStatus::Pending,
            started_at: None,
            last_seq: Seq::ZERO,
            last_at: None,
            planner_attempts: 0,
            replans: ReplanCounts::default(),
            plans: Vec::new(),
            nodes: HashMap::default(),
            completed: Vec::new(),
            completed_at: HashMap::default(),
            repair: Vec::new(),
            replan: None,
            failed: None,
            requests: Vec::new(),
            clarifications: Vec::new(),
            completion_approved: false,
            approved_nodes: Vec::new(),
            operator_at: None,
            fired: Fired::default(),
            post_conditions: PostConditionState::default(),
            policy_follow_up: None,
            context: RunContext::default(),
            end: None,
            replan_limits: None,
            forked_from: None,
            reused: HashMap::default(),
            budget: None,
            usage: RunUsage::default(),
            trace: None,
        }
    }

    /// A run whose log cannot be folded (or whose envelope no longer validates): it knows only
    /// where its log ends and the status its row holds, enough to record how it ends.
    pub fn unreadable(run_id: &RunId, correlation_id: &str, status: RunStatus, last_seq: Seq) -> Self {
        Self { status, last_seq, started_at: Some(Utc::now()), ..Self::new(run_id, correlation_id) }
    }

    /// Folds a run's committed log (frames in `seq` order, as stored) into its state.
    pub fn replay(
        run_id: &RunId,
        correlation_id: &str,
        frames: impl IntoIterator<Item = DecodedFrame>,
    ) -> Result<Self, ApplyError> {
        let mut state = Self::new(run_id, correlation_id);
        for frame in frames {
            state.apply(At { seq: frame.seq, timestamp: frame.timestamp }, &frame.event)?;
        }
        Ok(state)
    }

    /// The current plan.
    pub fn plan(&self) -> Option<&Arc<IndexedPlan>> {
        self.plans.last().map(|v| &v.plan)
    }

    /// The current plan's version (0 before the first plan).
    pub fn plan_version(&self) -> u32 {
        self.plan().map_or(0, |p| p.version)
    }

    /// A runtime policy's `pause`/`hitl` request is open: no node may start.
    pub fn awaiting_policy(&self) -> bool {
        self.requests.iter().any(|r| r.subject == HitlSubject::Policy)
    }

    /// The request an operator answers next: the newest open one.
    pub fn pending_request(&self) -> Option<&HitlRequestInfo> {
        self.requests.last()
    }

    /// The current plan's nodes in `status`, in plan order.
    pub fn nodes_in(&self, status: NodeStatus) -> Vec<String> {
        let plan = self.plan().map(|p| p.nodes.as_slice()).unwrap_or_default();
        plan.iter().filter(|n| self.nodes.get(&n.id) == Some(&status)).map(|n| n.id.to_string()).collect()
    }

    /// The latest output of a node, from any plan version.
    pub fn output_of(&self, node_id: &str) -> Option<&Value> {
        self.completed_at.get(node_id).and_then(|&i| self.completed.get(i)).map(|w| &w.output)
    }

    /// Work completed in any plan version, one entry per node (its latest), in completion order.
    pub fn completed(&self) -> &[CompletedWork] {
        &self.completed
    }

    /// Applies one event of the log: the only way a run's state changes.
    pub fn apply(&mut self, at: At, event: &Event) -> Result<(), ApplyError> {
        if at.seq != self.last_seq.next() {
            return Err(ApplyError::Gap { last: self.last_seq, got: at.seq });
        }
        if self.started_at.is_none() && !matches!(event, Event::Start(_)) {
            return Err(ApplyError::NotStarted { seq: at.seq, kind: event.kind().as_str() });
        }
        let kind = event.kind().as_str();
        let moved = |state: &mut Self, to: RunStatus| state.move_to(at.seq, kind, to);
        if let Some(reason) = event.granted_replan() {
            count(&mut self.replans, reason);
        }
        self.usage.apply(event, self.plan_version());
        match event {
            Event::Start(start) => self.start(at, start),
            Event::PlanRequested(request) => {
                self.planner_attempts = request.attempt;
                self.replan = request.replan.clone();
                moved(self, RunStatus::Planning)?;
            }
            Event::PlanGenerated(generated) => {
                let plan = Arc::clone(&generated.plan.plan);
                self.nodes = plan.nodes.iter().map(|n| (n.id.clone(), n.status)).collect();
                self.plans.push(PlanVersion { plan, at: at.timestamp, replan: generated.replan.clone() });
                self.failed = None;
                // A new plan's steps are approved anew.
                self.approved_nodes.clear();
                // What runtime policies of the old plan waited on was superseded with it.
                self.requests.retain(|r| r.subject != HitlSubject::Policy);
                moved(self, RunStatus::Running)?;
            }
            Event::NodeStart(start) => self.node_started(at, start)?,
            Event::NodeComplete(complete) => self.node_completed(at, complete)?,
            Event::NodeError(error) => self.node_failed(at, error)?,
            Event::GoalConditionFailed(failed) => {
                self.repair = failed.failed_goal_conditions.clone();
            }
            Event::PolicyTriggered(triggered) => {
                let reason = triggered.replan.reason;
                self.replan = Some(triggered.replan.clone());
                // A replan supersedes every open request.
                self.requests.clear();
                self.policy_acted(triggered.replan.policy.as_deref());
                if reason.is_operator() {
                    self.operator_at = Some(at.timestamp);
                }
                if reason == ReplanReason::OperatorReplan {
                    moved(self, RunStatus::Planning)?;
                }
            }
            Event::PolicyUpdate(update) => self.policy_updated(at, update)?,
            Event::HitlRequest(request) => self.request_opened(at, &request.request)?,
            Event::HitlResolved(resolved) => self.request_closed(at, resolved)?,
            Event::Log(log) => {
                if let Some(pause) = log.pause() {
                    let to = pause
                        .event
                        .parse()
                        .map_err(|e: UnknownStatus| ApplyError::Unreadable { seq: at.seq, reason: e.to_string() })?;
                    moved(self, to)?;
                }
                if let Some(resumed) = log.resumed() {
                    for id in &resumed.interrupted_nodes {
                        self.set_node(at.seq, "log", id, NodeStatus::Pending)?;
                    }
                }
            }
            Event::Complete(complete) => {
                self.end = Some(complete.clone());
                // Nobody answers a request of a run that ended.
                self.requests.clear();
                if complete.status == CompleteStatus::Cancelled {
                    self.waiting_nodes_stopped();
                }
                moved(self, ending(complete.status))?;
            }
            Event::BudgetExceeded(exceeded) => {
                // Their next attempt was held back: they run again once the budget allows.
                for id in &exceeded.held_nodes {
                    self.set_node(at.seq, "budget_exceeded", id, NodeStatus::Pending)?;
                }
            }
            Event::PlanRejected(_) | Event::PlanUpdated(_) | Event::ValidationError(_) | Event::Retry(_) => {}
        }
        self.last_seq = at.seq;
        self.last_at = Some(at.timestamp);
        Ok(())
    }

    fn move_to(&mut self, seq: Seq, kind: &'static str, to: RunStatus) -> Result<(), ApplyError> {
        if self.status != to {
            if !self.status.can_become(to) {
                return Err(ApplyError::Transition { seq, kind, from: self.status, to });
            }
            self.status = to;
        }
        Ok(())
    }

    fn start(&mut self, at: At, start: &Start) {
        self.started_at = Some(at.timestamp);
        self.replan_limits = start.replan_limits;
        self.budget = start.budget;
        self.forked_from = start.forked_from.clone();
        self.trace = start.trace;
        let inputs = start.inputs.clone().unwrap_or_default();
        self.context = RunContext::seeded(inputs, &rfc3339(at.timestamp));
    }

    fn policy_updated(&mut self, at: At, update: &PolicyUpdate) -> Result<(), ApplyError> {
        if update.is_post_condition_retry() {
            if let Some(node_id) = &update.policy.node_id {
                let failing = update.post_condition_results.iter().filter(|r| !r.satisfied).cloned().collect();
                self.post_conditions.failing.insert(node_id.clone(), (update.attempts.unwrap_or_default(), failing));
            }
            return Ok(());
        }
        self.policy_acted(Some(&update.policy));
        if let Some(attempts) = update.attempts {
            self.fired.goto_attempts.insert(update.policy.policy_id.clone(), attempts);
        }
        for node in &update.reset_nodes {
            self.set_node(at.seq, "policy_update", node, NodeStatus::Pending)?;
        }
        Ok(())
    }

    /// A runtime policy acted: `onStart` policies are not looked at again, and the follow-up of
    /// an operator's decision it carries out is done.
    fn policy_acted(&mut self, policy: Option<&PolicyInfo>) {
        let Some(policy) = policy else { return };
        if self.policy_follow_up.as_ref().is_some_and(|f| policy.request_id.as_deref() == Some(&f.request_id)) {
            self.policy_follow_up = None;
        }
        if policy.trigger_kind == TriggerKind::OnStart {
            self.fired.on_start = true;
        }
    }
}

impl PostConditionState {
    /// A node completed with `results` (empty: its capability has none).
    pub fn passed(&mut self, node_id: &str, capability_id: &str, results: Vec<GoalConditionResult>) {
        self.failing.remove(node_id);
        self.passed.retain(|p| p.node_id != node_id);
        if !results.is_empty() {
            let summary =
                PostConditionSummary { node_id: node_id.into(), capability_id: capability_id.into(), results };
            self.passed.push(summary);
        }
    }
}

/// Counts one replan granted for `reason`.
fn count(counts: &mut ReplanCounts, reason: ReplanReason) {
    let counter = match reason {
        ReplanReason::GoalConditionFailed => &mut counts.goal_condition,
        ReplanReason::CapabilitySignal => &mut counts.capability_signal,
        ReplanReason::PolicyRuntimeReplan => &mut counts.runtime_policy,
        ReplanReason::PostConditionFailed => &mut counts.post_condition,
        ReplanReason::OperatorRejected | ReplanReason::OperatorReplan => &mut counts.operator,
        ReplanReason::NodeError => &mut counts.node_error,
    };
    *counter += 1;
    counts.total += 1;
}

/// The status a run ends in.
fn ending(status: CompleteStatus) -> RunStatus {
    match status {
        CompleteStatus::Completed => RunStatus::Completed,
        CompleteStatus::Failed => RunStatus::Failed,
        CompleteStatus::Cancelled => RunStatus::Cancelled,
    }
}

/// The frame timestamp format (RFC 3339, milliseconds, `Z`).
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}
