//! Test fixtures of runs: an envelope, capabilities, and the events of a run built without a
//! server, folded into a [`RunState`] by the real `apply`.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};

use super::{Run, RunLimits};
use crate::capability::{Capabilities, Capability, EndpointAllowlist};
use crate::envelope::{self, TaskEnvelope};
use crate::events::payload::*;
use crate::events::{Event, Seq};
use crate::facet::FacetCatalog;
use crate::plan::{Edge, NodeStatus, Plan, PlanMetadata, PlanNode};
use crate::replan_budget::ReplanLimits;
use crate::run::state::{At, RunState};
use crate::settings::ReplanSettings;

/// The time every fixture event happens at.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 21, 10, 0, 0).single().unwrap_or_default()
}

/// The fixture run's id.
pub fn run_id() -> crate::run::RunId {
    crate::run::RunId::parse("r").unwrap_or_else(|_| crate::run::RunId::generate())
}

/// Sequence number `n`.
pub fn seq(n: u64) -> Seq {
    Seq::new(n).unwrap_or_default()
}

/// What a run's decisions read besides its state.
pub struct Fixture {
    pub envelope: TaskEnvelope,
    pub capabilities: Capabilities,
    pub limits: RunLimits,
    pub replan_limits: ReplanLimits,
    pub facets: FacetCatalog,
}

impl Fixture {
    /// A run writing `post_copy` from a `brief` (writer, then editor), with a goal on its
    /// quality; `envelope` fields override the default ones.
    pub fn new(overrides: Value) -> Self {
        let mut raw = json!({
            "objective": "Write a post",
            "inputs": {"brief": {"topic": "flexrun"}},
            "outputContract": {"mode": "facets", "facets": ["post_copy"]},
            "goal_condition": [{"facet": "post_copy", "path": "/quality_score",
                                "condition": {"dsl": "quality_score >= 0.8"}}],
        });
        if let (Some(raw), Some(overrides)) = (raw.as_object_mut(), overrides.as_object()) {
            raw.extend(overrides.clone());
        }
        let capabilities: Capabilities = [
            capability("writer", &["brief"], &["post_copy"], json!({})),
            capability("editor", &["post_copy"], &["post_copy"], json!({})),
            capability("reviewer", &["post_copy"], &["review"], json!({"agentType": "human"})),
            capability(
                "checked",
                &["brief"],
                &["post_copy"],
                json!({"metadata": {"postConditionPolicy": {"maxRetries": 1}}, "postConditions": [
                {"facet": "post_copy", "path": "/quality_score", "condition": {"dsl": "quality_score >= 0.8"}}]}),
            ),
        ]
        .into_iter()
        .map(|c| (c.id.clone(), c))
        .collect();
        let catalog = crate::capability::catalog(&[], &capabilities);
        let envelope = envelope::from_value(raw, &catalog).expect("fixture envelope is valid");
        // The defaults of `config/flexrun.toml`.
        let replan = ReplanSettings { enabled: true, max_goal_condition_replans: 2, max_replans: 4 };
        let replan_limits = ReplanLimits::resolve(&envelope.replan, &replan);
        let limits = RunLimits { max_plan_nodes: 100, post_condition_max_retries: 1, max_clarifications_per_run: 3 };
        Self {
            envelope,
            capabilities,
            limits,
            replan_limits,
            facets: FacetCatalog::new(BTreeMap::new()).expect("empty facet catalog"),
        }
    }

    /// The run in `state` as its decisions see it, at [`t0`].
    pub fn run<'a>(&'a self, state: &'a RunState) -> Run<'a> {
        Run {
            state,
            envelope: &self.envelope,
            capabilities: &self.capabilities,
            limits: self.limits,
            replan_limits: self.replan_limits,
            facets: &self.facets,
            now: t0(),
        }
    }

    /// A fresh run of this envelope with `events` applied.
    pub fn fold(&self, events: &[Event]) -> RunState {
        let mut state = RunState::new(&run_id(), "c");
        let events: Vec<Event> = events.iter().cloned().map(|event| self.started(event)).collect();
        apply_all(&mut state, &events);
        state
    }

    /// `event`, a `start` given this envelope's inputs and replan caps as a run's first frame has them.
    fn started(&self, event: Event) -> Event {
        match event {
            Event::Start(start) => Event::Start(Start {
                inputs: Some(self.envelope.inputs.clone()),
                replan_limits: Some(self.replan_limits),
                budget: crate::budget::BudgetLimits::resolve(&self.envelope.budget, &Default::default())
                    .expect("fixture budget"),
                ..start
            }),
            other => other,
        }
    }
}

/// Applies `events` after the state's last one.
pub fn apply_all(state: &mut RunState, events: &[Event]) {
    for event in events {
        let at = At { seq: state.last_seq.next(), timestamp: t0() };
        state.apply(at, event).unwrap_or_else(|e| panic!("{e}: {event:?}"));
    }
}

fn capability(id: &str, inputs: &[&str], outputs: &[&str], extra: Value) -> Arc<Capability> {
    let mut registration = json!({
        "capabilityId": id, "version": "1", "displayName": id, "summary": "s", "kind": "execution",
        "inputFacets": inputs, "outputFacets": outputs,
        "outputContract": {"mode": "json_schema", "schema": {"type": "object"}}
    });
    if let (Some(registration), Some(extra)) = (registration.as_object_mut(), extra.as_object()) {
        registration.extend(extra.clone());
    }
    Arc::new(Capability::parse(registration, &EndpointAllowlist::default()).expect("fixture capability"))
}

pub fn run_started() -> Event {
    Event::Start(bare_start())
}

/// A `start` that records nothing but its ids (as runs stored before it recorded more).
pub fn bare_start() -> Start {
    Start {
        run_id: "r".into(),
        thread_id: None,
        correlation_id: "c".into(),
        inputs: None,
        replan_limits: None,
        budget: None,
        forked_from: None,
        trace: None,
    }
}

pub fn requested(attempt: u32, replan: Option<ReplanInfo>) -> Event {
    let used = crate::replan_budget::ReplanCounts::default();
    let limits = ReplanLimits { enabled: true, max_goal_condition_replans: 2, max_replans: 4 };
    Event::PlanRequested(PlanRequested {
        attempt,
        phase: if replan.is_some() { Phase::Replan } else { Phase::Initial },
        capabilities: Vec::new(),
        budget: crate::replan_budget::BudgetView { limits, used },
        replan,
    })
}

/// A plan node of `capability`, id = stage.
pub fn node(id: &str, capability: &str, inputs: &[&str], outputs: &[&str]) -> PlanNode {
    let strings = |names: &[&str]| names.iter().map(|s| s.to_string()).collect();
    PlanNode {
        id: id.into(),
        stage: id.into(),
        label: id.into(),
        capability_id: capability.into(),
        kind: "execution".into(),
        input_facets: strings(inputs),
        output_facets: strings(outputs),
        rationale: Vec::new(),
        instructions: Vec::new(),
        arguments: None,
        status: NodeStatus::Pending,
    }
}

/// Plan `version` of `nodes`, each depending on the one before.
pub fn plan(version: u32, nodes: Vec<PlanNode>) -> Plan {
    let edges = nodes
        .windows(2)
        .map(|pair| Edge { from: pair[0].id.clone(), to: pair[1].id.clone(), reason: "depends_on".into() })
        .collect();
    let metadata = PlanMetadata {
        planner_model: "m".into(),
        planner_attempt: version,
        phase: Phase::Initial,
        draft_node_count: 2,
    };
    Plan { version, nodes, edges, metadata }
}

/// The fixture's plan: `draft` (writer) then `polish` (editor).
pub fn two_nodes() -> Plan {
    plan(
        1,
        vec![
            node("draft", "writer", &["brief"], &["post_copy"]),
            node("polish", "editor", &["post_copy"], &["post_copy"]),
        ],
    )
}

pub fn generated(plan: Plan, replan: Option<ReplanInfo>) -> Event {
    Event::PlanGenerated(PlanGenerated { plan: PlanView::new("r".into(), plan), replan, usage: None })
}

pub fn node_start(id: &str, capability: &str) -> Event {
    Event::NodeStart(NodeStart {
        node_id: id.into(),
        capability_id: capability.into(),
        label: id.into(),
        kind: "execution".into(),
        started_at: "t".into(),
        executor_type: ExecutorType::Ai,
        facets: Facets { input: Vec::new(), output: Vec::new() },
        inputs: None,
        assignment: None,
    })
}

pub fn node_complete(id: &str, capability: &str, output: Value) -> Event {
    Event::NodeComplete(NodeComplete {
        node_id: id.into(),
        capability_id: capability.into(),
        label: id.into(),
        completed_at: "2026-11-21T10:00:00.000Z".into(),
        output,
        executor_type: None,
        post_condition_results: Vec::new(),
        usage: None,
        reused_from: None,
    })
}

pub fn node_error(id: &str, capability: &str, code: &str) -> Event {
    Event::NodeError(NodeError {
        node_id: id.into(),
        capability_id: capability.into(),
        label: id.into(),
        error: ErrorInfo::new(code, "it broke"),
        usage: None,
    })
}

/// A request of `kind` about `subject` (for `node`).
pub fn request(id: &str, kind: HitlKind, subject: HitlSubject, node: Option<&str>, context: Value) -> Event {
    Event::HitlRequest(HitlRequest {
        request: HitlRequestInfo {
            id: id.into(),
            kind,
            subject,
            question: "?".into(),
            plan_version: 1,
            created_at: "2026-11-21T10:00:00.000Z".into(),
            node_id: node.map(String::from),
            context,
        },
        usage: None,
    })
}

pub fn resolved(id: &str, kind: HitlKind, subject: HitlSubject, decision: Option<DecisionInfo>) -> Event {
    let status = if decision.is_some() { RequestStatus::Resolved } else { RequestStatus::Superseded };
    Event::HitlResolved(HitlResolved {
        request: ClosedRequest { id: id.into(), kind, subject, status },
        decision,
        replan: None,
        budget: None,
    })
}

pub fn verdict(decision: Verdict) -> DecisionInfo {
    DecisionInfo { decision, feedback: None, answer: None, operator: None, note: None, principal: None }
}

/// A goal result on `post_copy/quality_score`.
pub fn goal(satisfied: bool, observed: f64) -> crate::condition::GoalConditionResult {
    crate::condition::GoalConditionResult {
        facet: "post_copy".into(),
        path: "/quality_score".into(),
        expression: "quality_score >= 0.8".into(),
        satisfied,
        dsl: Some("quality_score >= 0.8".into()),
        json_logic: None,
        observed_value: Some(json!(observed)),
        error: None,
    }
}

/// The events of a run of one node, `review` (capability `human.review`), paused on request `q1`
/// of `kind`: a plan approval, `review`'s human task or question, or its budget.
pub fn paused_on(kind: HitlKind) -> Vec<Event> {
    let review = plan(1, vec![node("review", "human.review", &["brief"], &["review"])]);
    let mut events = vec![run_started(), requested(1, None), generated(review, None)];
    match kind {
        HitlKind::Approval => events.push(request("q1", kind, HitlSubject::Plan, None, Value::Null)),
        HitlKind::HumanTask => {
            let assignment = json!({"taskId": "q1", "createdAt": "t", "capabilityId": "human.review",
                                    "label": "Review"});
            events.push(Event::NodeStart(NodeStart {
                executor_type: ExecutorType::Human,
                assignment: Some(assignment),
                ..review_start()
            }));
            events.push(Event::Log(Log::paused(Log::PAUSES[1], "awaiting_human", vec!["review".into()])));
        }
        HitlKind::Clarify => {
            events.push(Event::NodeStart(review_start()));
            let context = json!({"capabilityId": "human.review", "label": "Review"});
            events.push(request("q1", kind, HitlSubject::Node, Some("review"), context));
            events.push(Event::Log(Log::paused(Log::PAUSES[2], "awaiting_hitl", vec!["review".into()])));
        }
        HitlKind::Budget => {
            let context = json!({"limit": "modelCalls", "max": 1, "spent": 1, "phase": "execution",
                                 "budget": {"maxModelCalls": 1}, "spentSoFar": {"modelCalls": 1, "totalTokens": 0, "costUsd": 0}});
            events.push(request("q1", kind, HitlSubject::Budget, None, context));
        }
    }
    events
}

/// `review`'s `node_start`, an AI step's.
pub fn review_start() -> NodeStart {
    match node_start("review", "human.review") {
        Event::NodeStart(start) => start,
        _ => unreachable!("node_start makes a node_start"),
    }
}
