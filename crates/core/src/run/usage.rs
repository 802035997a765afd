//! A run's model usage: which frame records a call's usage ([`Unrecorded::attach`]), and what the
//! committed frames add up to ([`RunUsage`], part of the run's state).
//!
//! A call's usage is recorded on the frame that records its outcome, in the same commit: a
//! planner call's on the `plan_generated` or `plan_rejected` of its draft, an `ai` capability
//! call's on its node's next `node_complete`, `node_error`, `validation_error` or question
//! (`hitl_request`) — so a node's retries and post-condition attempts are counted on the frame
//! that ends them —, the calls of nodes whose attempt a replan supersedes on its
//! `policy_triggered`, and what no such frame took by the end (a planner call the run failed
//! on) on `complete`. Usage is therefore as
//! durable as the frames: a call cut off by a crash before its outcome was committed is lost
//! with the outcome, and the call is made again when the run resumes.

use std::collections::BTreeMap;

use crate::budget::Spent;
use crate::events::Event;
use crate::events::payload::HitlKind;
use crate::hash::HashMap;
use crate::usage::{CallUsage, Usage};

/// Whose calls: the planner's, or a plan node's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Caller {
    Planner,
    Node(String),
}

/// Calls made whose outcome is not staged yet, held by the run's writer.
#[derive(Debug, Default)]
pub struct Unrecorded {
    calls: HashMap<Caller, Vec<CallUsage>>,
}

impl Unrecorded {
    /// A call that got an answer (retried or not: it was paid for).
    pub fn add(&mut self, caller: Caller, call: CallUsage) {
        self.calls.entry(caller).or_default().push(call);
    }

    /// Puts the usage of the calls `event` records on it: the planner's calls on a draft's
    /// frame, a node's on the frame that ends its attempt, and on `complete` the run's total
    /// (`before`, what the committed and staged frames add up to) with every call left over.
    pub fn attach(&mut self, event: &mut Event, before: &RunUsage) {
        let (caller, slot) = match event {
            Event::PlanGenerated(p) => (Caller::Planner, &mut p.usage),
            Event::PlanRejected(p) => (Caller::Planner, &mut p.usage),
            Event::NodeComplete(n) => (Caller::Node(n.node_id.clone()), &mut n.usage),
            Event::NodeError(n) => (Caller::Node(n.node_id.clone()), &mut n.usage),
            Event::ValidationError(v) => match &v.node_id {
                Some(node_id) => (Caller::Node(node_id.clone()), &mut v.usage),
                None => return,
            },
            Event::HitlRequest(h) => match &h.request.node_id {
                Some(node_id) if h.request.kind == HitlKind::Clarify => (Caller::Node(node_id.clone()), &mut h.usage),
                _ => return,
            },
            Event::PolicyTriggered(triggered) => {
                let superseded: Vec<CallUsage> = self
                    .calls
                    .extract_if(|caller, _| matches!(caller, Caller::Node(_)))
                    .flat_map(|(_, calls)| calls)
                    .collect();
                triggered.usage = Usage::of_calls(&superseded).map(Box::new);
                return;
            }
            Event::BudgetExceeded(exceeded) => {
                let held: Vec<CallUsage> = exceeded
                    .held_nodes
                    .iter()
                    .filter_map(|id| self.calls.remove(&Caller::Node(id.clone())))
                    .flatten()
                    .collect();
                exceeded.usage = Usage::of_calls(&held).map(Box::new);
                return;
            }
            Event::Complete(complete) => {
                let mut total = before.total.clone();
                let left: Vec<CallUsage> = self.calls.drain().flat_map(|(_, calls)| calls).collect();
                if let Some(left) = Usage::of_calls(&left) {
                    total.add(&left);
                }
                complete.usage = Some(Box::new(total));
                return;
            }
            _ => return,
        };
        if let Some(calls) = self.calls.remove(&caller) {
            *slot = Usage::of_calls(&calls).map(Box::new);
        }
    }
}

impl Unrecorded {
    /// Adds what the calls not yet recorded spent to `spent` (a budget counts them too).
    pub fn add_to(&self, spent: &mut Spent) {
        self.calls.values().flatten().for_each(|call| spent.add_call(call));
    }
}

/// What a run's frames' usage adds up to: in all (by model), by plan version (the drafts that
/// made it and the steps run under it) and by node of each version.
#[derive(Debug, Clone, PartialEq)]
pub struct RunUsage {
    pub total: Usage,
    pub versions: BTreeMap<u32, Usage>,
    /// By plan version and node id.
    pub nodes: BTreeMap<(u32, String), Usage>,
    /// What the frames recorded as a budget counts it (known counts and costs).
    pub spent: Spent,
    /// Rejected drafts' usage, counted to the version the planning round ends with.
    planning: Usage,
}

impl Default for RunUsage {
    fn default() -> Self {
        Self {
            total: Usage::by_model(),
            versions: BTreeMap::new(),
            nodes: BTreeMap::new(),
            spent: Spent::default(),
            planning: Usage::default(),
        }
    }
}

impl RunUsage {
    /// Adds the usage `event` records; `version` is the plan version current before it.
    pub fn apply(&mut self, event: &Event, version: u32) {
        match event {
            Event::PlanRejected(rejected) => {
                if let Some(usage) = &rejected.usage {
                    self.planning.add(usage);
                    self.total.add(usage);
                    self.spent.add_usage(usage);
                }
            }
            Event::PlanGenerated(generated) => {
                let mut made = std::mem::take(&mut self.planning);
                if let Some(usage) = &generated.usage {
                    made.add(usage);
                    self.total.add(usage);
                    self.spent.add_usage(usage);
                }
                self.versions.entry(generated.plan.plan.version).or_default().add(&made);
            }
            Event::NodeComplete(n) => self.node(&n.node_id, n.usage.as_deref(), version),
            Event::NodeError(n) => self.node(&n.node_id, n.usage.as_deref(), version),
            Event::ValidationError(v) => {
                if let Some(node_id) = &v.node_id {
                    self.node(node_id, v.usage.as_deref(), version);
                }
            }
            Event::HitlRequest(h) => {
                if let Some(node_id) = &h.request.node_id {
                    self.node(node_id, h.usage.as_deref(), version);
                }
            }
            // Several nodes' calls, perhaps: counted to the version and the run only.
            Event::PolicyTriggered(triggered) => self.version(triggered.usage.as_deref(), version),
            Event::BudgetExceeded(exceeded) => self.version(exceeded.usage.as_deref(), version),
            // The run's total as its writer added it up, calls no other frame took included.
            Event::Complete(complete) => {
                if let Some(total) = &complete.usage {
                    self.total = Usage::clone(total);
                }
            }
            _ => {}
        }
    }

    fn node(&mut self, node_id: &str, usage: Option<&Usage>, version: u32) {
        let Some(usage) = usage else { return };
        self.nodes.entry((version, node_id.to_string())).or_default().add(usage);
        self.version(Some(usage), version);
    }

    fn version(&mut self, usage: Option<&Usage>, version: u32) {
        let Some(usage) = usage else { return };
        self.versions.entry(version).or_default().add(usage);
        self.total.add(usage);
        self.spent.add_usage(usage);
    }
}
