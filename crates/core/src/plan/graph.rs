//! A plan's graph, indexed once when the plan is installed: node positions by id, and each
//! node's predecessors and successors. Without it every question a run asks at each step ("which
//! nodes may start?", "what does this node wait for?") scanned every edge for every node, and a
//! step of a 1,000-node plan cost a million comparisons.

use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Edge, NodeId, NodeStatus, Plan, PlanNode};
use crate::hash::{HashMap, HashSet};

/// Positions, predecessors and successors of nodes given by id; edges naming an unknown node
/// are left out.
#[derive(Debug, Clone, Default)]
struct Graph {
    position: HashMap<NodeId, usize>,
    predecessors: Vec<Vec<usize>>,
    successors: Vec<Vec<usize>>,
}

impl Graph {
    fn new<'a>(ids: impl IntoIterator<Item = &'a NodeId>, edges: &[Edge]) -> Self {
        let ids: Vec<&NodeId> = ids.into_iter().collect();
        let position: HashMap<NodeId, usize> = ids.iter().enumerate().map(|(i, id)| ((*id).clone(), i)).collect();
        let mut predecessors = vec![Vec::new(); ids.len()];
        let mut successors = vec![Vec::new(); ids.len()];
        for edge in edges {
            if let (Some(&from), Some(&to)) = (position.get(&edge.from), position.get(&edge.to)) {
                predecessors[to].push(from);
                successors[from].push(to);
            }
        }
        Self { position, predecessors, successors }
    }
}

/// A plan with its graph indexed: what a run executes. Reads like the [`Plan`] it holds.
#[derive(Debug, Clone)]
pub struct IndexedPlan {
    plan: Plan,
    graph: Graph,
}

impl From<Plan> for IndexedPlan {
    fn from(plan: Plan) -> Self {
        let graph = Graph::new(plan.nodes.iter().map(|n| &n.id), &plan.edges);
        Self { plan, graph }
    }
}

impl Deref for IndexedPlan {
    type Target = Plan;

    fn deref(&self) -> &Plan {
        &self.plan
    }
}

/// Written as the plan it holds: the index is derived, never stored.
impl Serialize for IndexedPlan {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.plan.serialize(serializer)
    }
}

/// Read as a plan, indexed as it is read.
impl<'de> Deserialize<'de> for IndexedPlan {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Plan::deserialize(deserializer).map(Self::from)
    }
}

/// The index is derived from the plan: two indexed plans are equal when their plans are.
impl PartialEq for IndexedPlan {
    fn eq(&self, other: &Self) -> bool {
        self.plan == other.plan
    }
}

impl IndexedPlan {
    pub fn node(&self, id: &str) -> Option<&PlanNode> {
        self.graph.position.get(id).and_then(|&i| self.plan.nodes.get(i))
    }

    /// Nodes that may start now: not started, and every predecessor completed. In plan order.
    pub fn ready<'a>(&'a self, status: &HashMap<NodeId, NodeStatus>) -> Vec<&'a PlanNode> {
        let is = |node: &PlanNode, wanted| status.get(&node.id).copied().unwrap_or(NodeStatus::Pending) == wanted;
        let nodes = &self.plan.nodes;
        nodes
            .iter()
            .zip(&self.graph.predecessors)
            .filter(|(node, before)| {
                is(node, NodeStatus::Pending) && before.iter().all(|&p| is(&nodes[p], NodeStatus::Completed))
            })
            .map(|(node, _)| node)
            .collect()
    }

    /// `id` and every node after it (reachable along edges), in plan order.
    pub fn downstream(&self, id: &str) -> Vec<NodeId> {
        let Some(&start) = self.graph.position.get(id) else { return Vec::new() };
        let mut reached = vec![false; self.plan.nodes.len()];
        reached[start] = true;
        let mut frontier = vec![start];
        while let Some(from) = frontier.pop() {
            for &to in &self.graph.successors[from] {
                if !reached[to] {
                    reached[to] = true;
                    frontier.push(to);
                }
            }
        }
        self.plan.nodes.iter().zip(reached).filter(|(_, r)| *r).map(|(n, _)| n.id.clone()).collect()
    }

    /// The ids of direct predecessors of `id`.
    pub fn predecessors<'a>(&'a self, id: &str) -> impl Iterator<Item = &'a str> + 'a {
        let before = self.graph.position.get(id).map(|&i| self.graph.predecessors[i].as_slice()).unwrap_or_default();
        before.iter().map(|&p| self.plan.nodes[p].id.as_str())
    }
}

/// Nodes that can never start because they lie on a cycle of `edges` or after one (empty for a
/// DAG), sorted.
pub fn blocked_by_cycles(node_ids: &[NodeId], edges: &[Edge]) -> Vec<String> {
    // Kahn's algorithm: whatever cannot be removed lies on, or behind, a cycle.
    let graph = Graph::new(node_ids, edges);
    let mut incoming: Vec<usize> = graph.predecessors.iter().map(Vec::len).collect();
    let mut ready: Vec<usize> = (0..node_ids.len()).filter(|&i| incoming[i] == 0).collect();
    let mut removed: HashSet<usize> = HashSet::default();
    while let Some(node) = ready.pop() {
        removed.insert(node);
        for &to in &graph.successors[node] {
            incoming[to] -= 1;
            if incoming[to] == 0 {
                ready.push(to);
            }
        }
    }
    let mut blocked: Vec<String> =
        node_ids.iter().enumerate().filter(|(i, _)| !removed.contains(i)).map(|(_, id)| id.to_string()).collect();
    blocked.sort();
    blocked
}
