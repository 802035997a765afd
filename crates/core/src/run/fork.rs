//! A fork: a new run that starts from a point of another run, reusing the work done before it.
//! From the parent's log and what the fork asks for, [`resolve`] works out the plan the new run
//! starts with (a version of the parent's, renumbered 1) and which of its nodes are reused — with
//! the parent's output, or one the fork gives — instead of run again. No I/O: the server reads the
//! log, checks replaced outputs against their capabilities, and commits what this decides.
//!
//! The fork point:
//! - `fromVersion: N` alone — version N is executed again, reusing only the nodes N kept from
//!   earlier versions (`completed` in it), with their outputs from before N was generated;
//! - `fromNode: X` (in version N, the latest by default) — everything the parent completed up to
//!   the end of version N is reused, except X and every node after it (X itself is reused when
//!   `outputs` gives its output: only what follows runs again);
//! - neither — the latest version, everything completed reused.
//!
//! Then a replaced output (`outputs`) makes the nodes after that node run again, and so does a
//! changed input facet for the nodes that read it (and the nodes after them).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::payload::{NodeComplete, PlanGenerated, PlanView};
use crate::events::{Event, Seq};
use crate::plan::{IndexedPlan, NodeId, NodeStatus, Phase, Plan, PlanMetadata};

/// Where a fork starts, as its request gives it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ForkPoint {
    pub from_version: Option<u32>,
    pub from_node: Option<String>,
    /// The parent as it stood right after its frame `as_of` (a LangGraph checkpoint): the plan
    /// version current then, and only the completions logged up to it done.
    pub as_of: Option<Seq>,
}

/// What a fork changes: outputs of completed nodes, and the input facets whose values differ
/// from the parent's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ForkChanges {
    pub outputs: BTreeMap<String, Value>,
    pub changed_inputs: BTreeSet<String>,
}

/// Where a run was forked from (`start.forkedFrom`, the run document).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkedFrom {
    pub run_id: String,
    /// The parent's plan version the fork started from.
    pub version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The parent's frame the fork started after (a fork from a LangGraph checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<u64>,
}

/// Where a reused node's output comes from (`node_complete.reusedFrom`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReusedFrom {
    pub run_id: String,
    pub node_id: String,
    /// The seq of the parent's `node_complete`.
    pub seq: u64,
    /// The fork gave this node's output instead of the parent's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replaced: bool,
}

/// A node the fork does not run: its output and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Reused {
    pub node_id: String,
    pub capability_id: String,
    pub label: String,
    pub output: Value,
    pub from: ReusedFrom,
}

/// What a fork starts with.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkPlan {
    pub forked_from: ForkedFrom,
    /// The parent's version, as the fork's version 1: reused nodes `completed`, the others
    /// `pending`.
    pub plan: Plan,
    /// In plan order.
    pub reused: Vec<Reused>,
}

/// Why a fork cannot start; each names the request's field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForkError {
    #[error("the run has no plan yet: there is nothing to fork from")]
    NoPlan,
    #[error("the run has no plan version {version} (its versions are 1 to {latest})")]
    UnknownVersion { version: u32, latest: u32 },
    #[error("the run has no frame {seq} (its last is {last})")]
    UnknownFrame { seq: u64, last: u64 },
    #[error("plan version {version} has no node `{node}`")]
    UnknownNode { node: String, version: u32, pointer: String },
    #[error("node `{node}` had not completed at the fork point: there is no output to replace")]
    NotCompleted { node: String },
    #[error(
        "node `{node}` runs again in this fork (it is or follows `fromNode`, follows a node whose output is \
         given, or reads a changed input): its output cannot be given"
    )]
    RunsAgain { node: String },
}

impl ForkError {
    /// The JSON Pointer of the request's field at fault.
    pub fn pointer(&self) -> String {
        match self {
            Self::NoPlan | Self::UnknownVersion { .. } => "/fromVersion".into(),
            Self::UnknownFrame { .. } => "/asOf".into(),
            Self::UnknownNode { pointer, .. } => pointer.clone(),
            Self::NotCompleted { node } | Self::RunsAgain { node, .. } => format!("/outputs/{}", escape(node)),
        }
    }
}

/// What a fork needs of its parent's log — its plan versions and node completions — gathered
/// frame by frame as the log is read ([`ParentLog::push`]), so a reader of the parent keeps
/// these and not the rest of the log (retries, starts, requests, usage).
#[derive(Debug, Default)]
pub struct ParentLog {
    /// Each version with the seq of the frame that installed it, oldest first.
    versions: Vec<(Seq, Arc<IndexedPlan>)>,
    /// Every `node_complete` with its seq, in log order.
    completions: Vec<(Seq, NodeComplete)>,
    last: Seq,
}

impl ParentLog {
    /// Takes in the parent's frame `seq`, `event`; frames come in log order.
    pub fn push(&mut self, seq: Seq, event: &Event) {
        match event {
            Event::PlanGenerated(generated) => self.versions.push((seq, generated.plan.plan.clone())),
            Event::NodeComplete(complete) => self.completions.push((seq, complete.clone())),
            _ => {}
        }
        self.last = seq;
    }
}

/// Works out what a fork of run `run_id`, logged as `parent`, starts with.
pub fn resolve(
    run_id: &str,
    parent: &ParentLog,
    point: &ForkPoint,
    changes: &ForkChanges,
) -> Result<ForkPlan, ForkError> {
    let latest = u32::try_from(parent.versions.len()).unwrap_or(u32::MAX);
    if latest == 0 {
        return Err(ForkError::NoPlan);
    }
    let version = match point.as_of {
        Some(at) if at > parent.last => return Err(ForkError::UnknownFrame { seq: at.get(), last: parent.last.get() }),
        // The version current right after that frame.
        Some(at) => u32::try_from(parent.versions.iter().filter(|(seq, _)| *seq <= at).count()).unwrap_or(u32::MAX),
        None => point.from_version.unwrap_or(latest),
    };
    if version == 0 {
        return Err(ForkError::NoPlan);
    }
    let index = usize::try_from(version).ok().filter(|v| (1..=parent.versions.len()).contains(v)).map(|v| v - 1);
    let index = index.ok_or(ForkError::UnknownVersion { version, latest })?;
    let (installed_at, plan) = (parent.versions[index].0, &*parent.versions[index].1);
    // Completions up to the cut count as done: those of the version's own execution, and earlier
    // ones of the nodes the version kept (`completed` in it; a node it marked `pending` was to run
    // again).
    let cut = match (point.as_of, point.from_version, &point.from_node) {
        (Some(at), ..) => at.next(),
        (None, Some(_), None) => installed_at,
        _ => parent.versions.get(index + 1).map_or(Seq::MAX, |(seq, _)| *seq),
    };
    let kept = |id: &str| plan.node(id).is_some_and(|n| n.status == NodeStatus::Completed);
    let done: BTreeMap<&str, (Seq, &NodeComplete)> = parent
        .completions
        .iter()
        .filter(|(seq, c)| *seq < cut && (*seq > installed_at || kept(&c.node_id)))
        .map(|(seq, c)| (c.node_id.as_str(), (*seq, c)))
        .collect();

    let mut again: BTreeSet<NodeId> = BTreeSet::new();
    if let Some(node) = &point.from_node {
        if plan.node(node).is_none() {
            return Err(ForkError::UnknownNode { node: node.clone(), version, pointer: "/fromNode".into() });
        }
        // `outputs` giving X's own output: X is reused with it, only what follows runs again.
        let replaced = changes.outputs.contains_key(node);
        again.extend(plan.downstream(node).into_iter().filter(|id| !(replaced && id.as_str() == node)));
    }
    for node in changes.outputs.keys() {
        if plan.node(node).is_none() {
            let pointer = format!("/outputs/{}", escape(node));
            return Err(ForkError::UnknownNode { node: node.clone(), version, pointer });
        }
        if !done.contains_key(node.as_str()) {
            return Err(ForkError::NotCompleted { node: node.clone() });
        }
        again.extend(plan.downstream(node).into_iter().filter(|id| id.as_str() != node));
    }
    for node in plan.nodes.iter().filter(|n| n.input_facets.iter().any(|f| changes.changed_inputs.contains(f))) {
        again.extend(plan.downstream(&node.id));
    }
    // Only once every reason to run a node again is known: an output given for one of those
    // would be dropped.
    if let Some(node) = changes.outputs.keys().find(|node| again.iter().any(|id| id.as_str() == node.as_str())) {
        return Err(ForkError::RunsAgain { node: node.clone() });
    }

    let mut reused = Vec::new();
    let mut nodes = plan.nodes.clone();
    for node in &mut nodes {
        let parent_output = done.get(node.id.as_str()).filter(|_| !again.contains(&node.id));
        node.status = if parent_output.is_some() { NodeStatus::Completed } else { NodeStatus::Pending };
        let Some((seq, complete)) = parent_output else { continue };
        let replaced = changes.outputs.get(node.id.as_str());
        reused.push(Reused {
            node_id: node.id.to_string(),
            capability_id: complete.capability_id.clone(),
            label: complete.label.clone(),
            output: replaced.cloned().unwrap_or_else(|| complete.output.clone()),
            from: ReusedFrom {
                run_id: run_id.to_string(),
                node_id: node.id.to_string(),
                seq: seq.get(),
                replaced: replaced.is_some(),
            },
        });
    }
    let metadata = PlanMetadata {
        planner_model: plan.metadata.planner_model.clone(),
        planner_attempt: 0,
        phase: Phase::Fork,
        draft_node_count: plan.metadata.draft_node_count,
    };
    Ok(ForkPlan {
        forked_from: ForkedFrom {
            run_id: run_id.to_string(),
            version,
            node_id: point.from_node.clone(),
            as_of: point.as_of.map(Seq::get),
        },
        plan: Plan { version: 1, nodes, edges: plan.edges.clone(), metadata },
        reused,
    })
}

impl ForkPlan {
    /// The frames of the fork's first commit after its `start`: the plan installed, then a
    /// `node_complete` for each reused node (with no usage: nothing was called).
    pub fn frames(self, run_id: &str, now: &str) -> Vec<Event> {
        let mut events = Vec::with_capacity(1 + self.reused.len());
        events.push(Event::PlanGenerated(PlanGenerated {
            plan: PlanView::new(run_id.to_string(), self.plan),
            replan: None,
            usage: None,
        }));
        events.extend(self.reused.into_iter().map(|reused| {
            Event::NodeComplete(NodeComplete {
                node_id: reused.node_id,
                capability_id: reused.capability_id,
                label: reused.label,
                completed_at: now.to_string(),
                output: reused.output,
                executor_type: None,
                post_condition_results: Vec::new(),
                usage: None,
                reused_from: Some(reused.from),
            })
        }));
        events
    }
}

/// A node id as a JSON Pointer token.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests;
