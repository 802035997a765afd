//! What a run does next, decided from its state: one module per phase, each a set of pure
//! functions from the run's [`RunState`] (and what the phase was given: a draft, a node's reply,
//! an operator's command) to the events to record and what follows. The coordinator and the
//! operator commands do the I/O: they call these, record the events through the run's log, and
//! act on the answer. No I/O here, so every decision is unit-tested without a database.

pub mod budget;
pub mod ending;
pub mod execution;
pub mod goals;
pub mod node_errors;
pub mod operator;
pub mod planning;
pub mod policies;
pub mod post_conditions;
pub mod signals;
#[cfg(test)]
pub(crate) mod testing;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use super::context::RunContext;
use super::state::RunState;
use crate::capability::Capabilities;
use crate::condition::{FacetSource, GoalConditionResult};
use crate::envelope::TaskEnvelope;
use crate::events::Event;
use crate::events::payload::{CompleteStatus, HitlKind, HitlRequestInfo, HitlSubject, ReplanInfo};
use crate::facet::FacetCatalog;
use crate::plan::PlanNode;
use crate::replan_budget::{ReplanBudget, ReplanLimits};

/// The configured bounds of a run's phases (`[limits]` of the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// The most nodes a plan may have.
    pub max_plan_nodes: usize,
    /// Retries of a node whose output fails its capability's post-conditions, unless the
    /// capability says otherwise.
    pub post_condition_max_retries: u32,
    /// The most questions (CLARIFY signals) a run may ask operators.
    pub max_clarifications_per_run: u32,
}

/// A run as its decisions see it: its state and what it was started with.
#[derive(Clone, Copy)]
pub struct Run<'a> {
    pub state: &'a RunState,
    pub envelope: &'a TaskEnvelope,
    /// The capabilities as registered when the current phase began.
    pub capabilities: &'a Capabilities,
    pub limits: RunLimits,
    pub replan_limits: ReplanLimits,
    pub facets: &'a FacetCatalog,
    pub now: DateTime<Utc>,
}

impl Run<'_> {
    /// Whether one more replan is granted, from the caps and what the run used.
    pub fn budget(&self) -> ReplanBudget {
        ReplanBudget::new(self.replan_limits, self.state.replans)
    }

    /// What `run.*` variables of conditions read.
    pub fn facts(&self) -> Value {
        let started = self.state.started_at.unwrap_or(self.now);
        json!({
            "latencyMs": (self.now - started).num_milliseconds(),
            "revisionCount": self.state.replans.total,
            "planVersion": self.state.plan_version(),
            "requiresHitl": self.envelope.approval.completion,
        })
    }

    /// The goal data of conditions over `context` (the run's, or a candidate's).
    pub fn goal_data<'c>(&self, context: &'c RunContext) -> GoalData<'c> {
        GoalData { context, run: self.facts() }
    }

    /// A new request of this run, made now.
    pub fn request(
        &self,
        kind: HitlKind,
        subject: HitlSubject,
        question: String,
        node: Option<&PlanNode>,
        context: Value,
    ) -> HitlRequestInfo {
        HitlRequestInfo {
            id: uuid::Uuid::now_v7().to_string(),
            kind,
            subject,
            question,
            plan_version: self.state.plan_version(),
            created_at: self.now.to_rfc3339_opts(SecondsFormat::Millis, true),
            node_id: node.map(|n| n.id.to_string()),
            context,
        }
    }
}

/// The run context with the run's facts, as conditions read them.
pub struct GoalData<'a> {
    context: &'a RunContext,
    run: Value,
}

impl FacetSource for GoalData<'_> {
    fn facet_value(&self, facet: &str) -> Option<&Value> {
        self.context.facet_value(facet)
    }

    fn snapshot(&self) -> Value {
        self.context.snapshot()
    }

    fn run_facts(&self) -> Value {
        self.run.clone()
    }
}

/// How a run that cannot go on ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// `Failed`, or `Cancelled` when an operator stopped the run.
    pub ending: CompleteStatus,
    pub code: &'static str,
    pub message: String,
    pub details: Map<String, Value>,
    pub output: Value,
    pub goal_condition_results: Option<Vec<GoalConditionResult>>,
}

impl Failure {
    /// A failure whose message is bounded like every error message in a frame
    /// ([`crate::excerpt::FRAME`]).
    pub fn new(code: &'static str, message: impl AsRef<str>) -> Self {
        Self {
            ending: CompleteStatus::Failed,
            code,
            message: crate::excerpt::excerpt(message.as_ref(), crate::excerpt::FRAME).into_owned(),
            details: Map::new(),
            output: Value::Null,
            goal_condition_results: None,
        }
    }

    pub fn detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }

    /// The run's `complete.error`: code, message and details.
    pub fn error_json(&self) -> Value {
        let mut error =
            Map::from_iter([("code".to_string(), json!(self.code)), ("message".to_string(), json!(self.message))]);
        error.extend(self.details.clone());
        Value::Object(error)
    }
}

/// How a run goes on after a node's reply, a signal or a runtime policy.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// As before (a question was asked, an event emitted, nodes reset to run again).
    Continue,
    /// A replan was granted: it starts once the nodes in flight have finished.
    Replan(ReplanInfo),
    /// The run fails (a node failed; a policy failed the run or was refused its replan).
    Failed(Failure),
}

/// A decision: the events to record, and how the run goes on.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub events: Vec<Event>,
    pub effect: Effect,
}

impl Outcome {
    pub fn effect(effect: Effect) -> Self {
        Self { events: Vec::new(), effect }
    }

    pub fn go_on(events: Vec<Event>) -> Self {
        Self { events, effect: Effect::Continue }
    }
}
