//! A plan node's status as its stored plan version keeps it.

use serde::{Deserialize, Serialize};

use super::NodeStatus;

/// Where a node of a plan version stands (the nodes of `GET /runs/{id}`, folded from the run's
/// log by `run::nodes`): a status the plan's nodes have, or one of two ends only history shows,
/// since a plan version's nodes stay as history after the run has moved on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoredNodeStatus {
    Plan(NodeStatus),
    /// A replan dropped the node before it finished (its plan version stays, as history).
    Discarded,
    /// The run was cancelled while the node ran.
    Cancelled,
}

impl StoredNodeStatus {
    pub const ALL: [StoredNodeStatus; 8] = [
        Self::Plan(NodeStatus::Pending),
        Self::Plan(NodeStatus::Running),
        Self::Plan(NodeStatus::AwaitingHuman),
        Self::Plan(NodeStatus::AwaitingHitl),
        Self::Plan(NodeStatus::Completed),
        Self::Plan(NodeStatus::Failed),
        Self::Discarded,
        Self::Cancelled,
    ];

    /// The statuses of a node that has not finished: those a replan discards.
    pub const UNFINISHED: [StoredNodeStatus; 4] = [
        Self::Plan(NodeStatus::Pending),
        Self::Plan(NodeStatus::Running),
        Self::Plan(NodeStatus::AwaitingHuman),
        Self::Plan(NodeStatus::AwaitingHitl),
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plan(status) => status.as_str(),
            Self::Discarded => "discarded",
            Self::Cancelled => "cancelled",
        }
    }
}

impl From<NodeStatus> for StoredNodeStatus {
    fn from(status: NodeStatus) -> Self {
        Self::Plan(status)
    }
}

crate::stored_as_text!(StoredNodeStatus, "node status");

/// As its name, like [`NodeStatus`] (a run's document shows it, and the command line reads it
/// back).
impl Serialize for StoredNodeStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StoredNodeStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = String::deserialize(deserializer)?;
        word.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_status_keeps_its_name_and_a_discarded_node_was_unfinished() {
        for status in StoredNodeStatus::ALL {
            if let StoredNodeStatus::Plan(plan) = status {
                assert_eq!(plan.as_str(), status.as_str());
            }
        }
        assert!(StoredNodeStatus::UNFINISHED.iter().all(|status| StoredNodeStatus::ALL.contains(status)));
        let finished = [NodeStatus::Completed, NodeStatus::Failed].map(StoredNodeStatus::from);
        assert!(finished.iter().all(|status| !StoredNodeStatus::UNFINISHED.contains(status)));
    }
}
