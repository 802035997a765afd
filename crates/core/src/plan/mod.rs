//! Plans: a versioned DAG of capability steps. Pure data and graph logic (readiness, cycles);
//! the planner builds plans, the run coordinator walks them. A draft that cannot become a plan
//! is answered with [`Diagnostic`]s.

mod diagnostic;
mod graph;
mod stored;

use serde::{Deserialize, Serialize};

pub use diagnostic::Diagnostic;
pub use graph::{IndexedPlan, blocked_by_cycles};
pub use stored::StoredNodeStatus;

/// The state of one node within a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    Pending,
    Running,
    /// A human node waiting for an operator to submit its output.
    AwaitingHuman,
    /// A node that asked an operator a question (a CLARIFY signal); it runs again once answered.
    AwaitingHitl,
    Completed,
    Failed,
}

impl NodeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::AwaitingHuman => "awaiting_human",
            Self::AwaitingHitl => "awaiting_hitl",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }
}

/// A plan node's id: its planner `stage` with every run of characters outside `[A-Za-z0-9_-]`
/// folded to `_`, so it is stable across plan versions and safe in paths and logs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct NodeId(String);

/// Text that is not a node id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a node id: a node id is 1 to {max} letters, digits, `-` or `_`", max = NodeId::MAX_LEN)]
pub struct InvalidNodeId;

impl NodeId {
    pub const MAX_LEN: usize = 200;

    /// The id a stage name becomes (empty if it has nothing to keep).
    pub fn from_stage(stage: &str) -> Self {
        let mut id = String::with_capacity(stage.len());
        for c in stage.trim().chars() {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                id.push(c);
            } else if !id.ends_with('_') {
                id.push('_');
            }
        }
        Self(id)
    }

    /// A node id sent by a client or read back from a frame.
    pub fn parse(text: &str) -> Result<Self, InvalidNodeId> {
        let valid = (1..=Self::MAX_LEN).contains(&text.len())
            && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if valid { Ok(Self(text.to_string())) } else { Err(InvalidNodeId) }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

impl std::ops::Deref for NodeId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for NodeId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
impl From<&str> for NodeId {
    fn from(text: &str) -> Self {
        Self::from_stage(text)
    }
}

impl PartialEq<str> for NodeId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for NodeId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for NodeId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<NodeId> for String {
    fn eq(&self, other: &NodeId) -> bool {
        *self == other.0
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanNode {
    /// Stable across plan versions: derived from the planner's `stage`.
    pub id: NodeId,
    pub stage: String,
    pub label: String,
    pub capability_id: String,
    pub kind: String,
    pub input_facets: Vec<String>,
    pub output_facets: Vec<String>,
    pub rationale: Vec<String>,
    pub instructions: Vec<String>,
    /// An MCP tool's arguments (checked against its input schema; `{"$facet": …}` values are
    /// taken from facets when the node runs). Only MCP nodes have them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// `completed` for a node whose earlier completion carries into this version, else `pending`.
    pub status: NodeStatus,
}

/// `to` may start only after `from` completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edge {
    pub from: NodeId,
    pub to: NodeId,
    /// `depends_on` (explicit in the draft) or `facet:<name>` (derived from who produces a facet).
    pub reason: String,
}

/// A plan version of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub version: u32,
    pub nodes: Vec<PlanNode>,
    pub edges: Vec<Edge>,
    pub metadata: PlanMetadata,
}

/// `initial` for the first plan of a run, `replan` afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Initial,
    Replan,
    /// A fork's first plan: a version of its parent's, installed without a planner call.
    Fork,
}

/// How a plan came to be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanMetadata {
    pub planner_model: String,
    /// The run-wide planner attempt that produced this plan.
    pub planner_attempt: u32,
    pub phase: Phase,
    pub draft_node_count: usize,
}

#[cfg(test)]
mod tests {
    use crate::hash::HashMap;

    use super::*;

    fn node(id: &str) -> PlanNode {
        PlanNode {
            id: id.into(),
            stage: id.into(),
            label: id.into(),
            capability_id: "cap".into(),
            kind: "execution".into(),
            input_facets: vec![],
            output_facets: vec![],
            rationale: vec![],
            instructions: vec![],
            arguments: None,
            status: NodeStatus::Pending,
        }
    }

    fn edge(from: &str, to: &str) -> Edge {
        Edge { from: from.into(), to: to.into(), reason: "depends_on".into() }
    }

    fn plan(ids: &[&str], edges: Vec<Edge>) -> IndexedPlan {
        IndexedPlan::from(Plan {
            version: 1,
            nodes: ids.iter().map(|id| node(id)).collect(),
            edges,
            metadata: PlanMetadata {
                planner_model: "m".into(),
                planner_attempt: 1,
                phase: Phase::Initial,
                draft_node_count: ids.len(),
            },
        })
    }

    #[test]
    fn independent_nodes_are_ready_together() {
        let p = plan(&["a", "b", "c"], vec![edge("a", "c"), edge("b", "c")]);
        let ids = |nodes: Vec<&PlanNode>| nodes.iter().map(|n| n.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(p.ready(&HashMap::default())), ["a", "b"]);
        let mut status = HashMap::from_iter([(NodeId::from("a"), NodeStatus::Completed)]);
        assert_eq!(ids(p.ready(&status)), ["b"]);
        status.insert("b".into(), NodeStatus::Running);
        assert!(p.ready(&status).is_empty());
        status.insert("b".into(), NodeStatus::Completed);
        assert_eq!(ids(p.ready(&status)), ["c"]);
    }

    #[test]
    fn nodes_predecessors_and_what_follows_are_found_by_id() {
        let p = plan(&["a", "b", "c", "d"], vec![edge("a", "c"), edge("b", "c"), edge("c", "d"), edge("x", "d")]);
        assert_eq!(p.node("c").map(|n| n.id.as_str()), Some("c"));
        assert!(p.node("x").is_none());
        assert_eq!(p.predecessors("c").collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(p.predecessors("d").collect::<Vec<_>>(), ["c"], "an edge from an unknown node is left out");
        assert_eq!(p.downstream("b"), ["b", "c", "d"].map(NodeId::from));
        assert!(p.downstream("x").is_empty());
    }

    #[test]
    fn cycles_are_found() {
        let ids: Vec<NodeId> = ["a", "b", "c", "d"].map(NodeId::from).into();
        assert!(blocked_by_cycles(&ids, &[edge("a", "b"), edge("b", "c")]).is_empty());
        let cyclic = blocked_by_cycles(&ids, &[edge("a", "b"), edge("b", "c"), edge("c", "b"), edge("c", "d")]);
        assert_eq!(cyclic, ["b", "c", "d"]);
    }
}
