//! What a run's steps do to its state: a node started, completed or failed, and the nodes an
//! ended run left waiting.

use super::{ApplyError, At, RunState};
use crate::events::Seq;
use crate::events::payload::*;
use crate::plan::NodeStatus;
use crate::planner::CompletedWork;
use crate::run::context::NodeOutput;

impl RunState {
    /// Sets the status of the current plan's node `node_id`.
    pub(super) fn set_node(
        &mut self,
        seq: Seq,
        kind: &'static str,
        node_id: &str,
        status: NodeStatus,
    ) -> Result<(), ApplyError> {
        let node = self.plan().and_then(|p| p.node(node_id)).map(|n| n.id.clone());
        let node = node.ok_or_else(|| ApplyError::UnknownNode { seq, kind, node_id: node_id.to_string() })?;
        self.nodes.insert(node, status);
        Ok(())
    }

    /// A cancel ends the nodes that waited on an operator (a question, a human task) as it ends
    /// running ones, which get a `node_error` with code `cancelled` (`decide::ending::stopped`)
    /// and so read `failed`. Derived here rather than recorded: a cancel's frames stay as they
    /// always were, and every reader of the log agrees that no node of an ended run still waits.
    pub(super) fn waiting_nodes_stopped(&mut self) {
        for status in self.nodes.values_mut() {
            if matches!(status, NodeStatus::AwaitingHitl | NodeStatus::AwaitingHuman) {
                *status = NodeStatus::Failed;
            }
        }
    }

    pub(super) fn node_started(&mut self, at: At, start: &NodeStart) -> Result<(), ApplyError> {
        match start.task(self.plan_version()) {
            // A human node waits for its output: it was not interrupted if the run stops.
            Some(task) => {
                self.set_node(at.seq, "node_start", &start.node_id, NodeStatus::AwaitingHuman)?;
                self.requests.push(task);
            }
            None => self.set_node(at.seq, "node_start", &start.node_id, NodeStatus::Running)?,
        }
        Ok(())
    }

    pub(super) fn node_completed(&mut self, at: At, complete: &NodeComplete) -> Result<(), ApplyError> {
        let version = self.plan_version();
        let plan = self.plan().cloned();
        let node = plan.as_deref().and_then(|p| p.node(&complete.node_id)).ok_or_else(|| ApplyError::UnknownNode {
            seq: at.seq,
            kind: "node_complete",
            node_id: complete.node_id.clone(),
        })?;
        self.context.record_output(NodeOutput {
            node_id: &node.id,
            capability_id: &complete.capability_id,
            plan_version: version,
            output_facets: &node.output_facets,
            output: &complete.output,
            at: &complete.completed_at,
        });
        self.post_conditions.passed(&node.id, &node.capability_id, complete.post_condition_results.clone());
        let work = CompletedWork {
            node_id: node.id.to_string(),
            stage: node.stage.clone(),
            capability_id: node.capability_id.clone(),
            output_facets: node.output_facets.clone(),
            output: complete.output.clone(),
        };
        self.record_completed(work);
        self.nodes.insert(node.id.clone(), NodeStatus::Completed);
        match &complete.reused_from {
            Some(from) => self.reused.insert(node.id.to_string(), from.clone()),
            None => self.reused.remove(node.id.as_str()),
        };
        Ok(())
    }

    /// `work` becomes its node's entry, last in completion order. A node completing again (a
    /// rerun: rare) moves to the end; a first completion costs no search.
    fn record_completed(&mut self, work: CompletedWork) {
        if self.completed_at.contains_key(&work.node_id) {
            self.completed.retain(|w| w.node_id != work.node_id);
            self.completed_at = self.completed.iter().enumerate().map(|(i, w)| (w.node_id.clone(), i)).collect();
        }
        self.completed_at.insert(work.node_id.clone(), self.completed.len());
        self.completed.push(work);
    }

    pub(super) fn node_failed(&mut self, at: At, error: &NodeError) -> Result<(), ApplyError> {
        // A rejected human submission: the node still waits.
        if error.error.code == HUMAN_OUTPUT_INVALID {
            return Ok(());
        }
        self.set_node(at.seq, "node_error", &error.node_id, NodeStatus::Failed)?;
        self.post_conditions.failing.remove(&error.node_id);
        self.failed.get_or_insert_with(|| FailedNode {
            node_id: error.node_id.clone(),
            capability_id: error.capability_id.clone(),
            code: error.error.code.clone(),
            message: error.error.message.clone(),
        });
        Ok(())
    }
}
