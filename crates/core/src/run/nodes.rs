//! The nodes of every plan version of a run and where each stands — the table a run's document
//! shows — folded from the run's log. A plan version's nodes stay as history after the run moved
//! on: a replan discards the ones that had not finished, a cancellation marks the ones it
//! stopped. Pure: [`NodeTable::apply`] takes each event with the run's state before it, as
//! readers fold a log.
//!
//! Nothing here is stored: the frames say all of it, so a reader builds the table in the same
//! pass that folds the run's state, and a commit writes only the frame.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::state::{At, RunState};
use crate::condition::GoalConditionResult;
use crate::events::Event;
use crate::events::payload::{CANCELLED, Complete, CompleteStatus, ErrorInfo, HUMAN_OUTPUT_INVALID, HitlKind};
use crate::plan::{NodeStatus, Plan, StoredNodeStatus};

/// One node of one plan version.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRecord {
    pub plan_version: u32,
    pub node_id: String,
    /// Its place in its plan version's node list.
    pub position: usize,
    pub capability_id: String,
    pub status: StoredNodeStatus,
    /// What it produced (a node carried over completed into a new version keeps its output).
    pub output: Option<Value>,
    /// How it failed: `code`, `message`, and the details an operator's refusal gave.
    pub error: Option<Value>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    /// The capability's post-conditions on its output (none: it has none, or has not completed).
    pub post_condition_results: Option<Vec<GoalConditionResult>>,
}

/// The nodes of a run's plan versions, in version then plan order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeTable {
    nodes: Vec<NodeRecord>,
    /// Where the latest version's nodes begin: events name nodes of the latest version only.
    latest: usize,
}

impl NodeTable {
    pub fn into_nodes(self) -> Vec<NodeRecord> {
        self.nodes
    }

    /// Follows `event` (at `at`), given the run's state `before` it.
    pub fn apply(&mut self, before: &RunState, at: At, event: &Event) {
        let now = at.timestamp;
        match event {
            Event::PlanGenerated(generated) => self.add_version(before, &generated.plan.plan, now),
            Event::NodeStart(start) => {
                let human = start.task(before.plan_version()).is_some();
                if let Some(node) = self.node_mut(&start.node_id) {
                    node.status = if human { NodeStatus::AwaitingHuman } else { NodeStatus::Running }.into();
                    node.started_at = Some(now);
                }
            }
            Event::NodeComplete(complete) => {
                if let Some(node) = self.node_mut(&complete.node_id) {
                    node.status = NodeStatus::Completed.into();
                    node.output = Some(complete.output.clone());
                    node.error = None;
                    node.completed_at = Some(now);
                    if !complete.post_condition_results.is_empty() {
                        node.post_condition_results = Some(complete.post_condition_results.clone());
                    }
                }
            }
            // A human task's invalid output leaves the node waiting for a valid one.
            Event::NodeError(error) if error.error.code != HUMAN_OUTPUT_INVALID => {
                if let Some(node) = self.node_mut(&error.node_id) {
                    let cancelled = error.error.code == CANCELLED;
                    node.status = if cancelled { StoredNodeStatus::Cancelled } else { NodeStatus::Failed.into() };
                    node.output = None;
                    node.error = Some(error_value(&error.error));
                    node.completed_at = Some(now);
                }
            }
            Event::HitlRequest(request) => {
                if let (HitlKind::Clarify, Some(node_id)) = (request.request.kind, &request.request.node_id) {
                    self.set_status(node_id, NodeStatus::AwaitingHitl);
                }
            }
            Event::HitlResolved(resolved) if resolved.replan.is_some() => self.discard_unfinished(),
            Event::PolicyTriggered(_) => self.discard_unfinished(),
            Event::PolicyUpdate(update) => {
                for node_id in &update.reset_nodes {
                    self.set_status(node_id, NodeStatus::Pending);
                }
            }
            Event::BudgetExceeded(exceeded) => {
                for node_id in &exceeded.held_nodes {
                    self.set_status(node_id, NodeStatus::Pending);
                }
            }
            Event::Complete(complete) if complete.status == CompleteStatus::Cancelled => {
                self.cancel_waiting(complete, now);
            }
            Event::Start(_)
            | Event::PlanRequested(_)
            | Event::PlanRejected(_)
            | Event::PlanUpdated(_)
            | Event::NodeError(_)
            | Event::HitlResolved(_)
            | Event::ValidationError(_)
            | Event::GoalConditionFailed(_)
            | Event::Log(_)
            | Event::Retry(_)
            | Event::Complete(_) => {}
        }
    }

    /// A new plan version's nodes; a node carried over completed keeps its output.
    fn add_version(&mut self, before: &RunState, plan: &Plan, now: DateTime<Utc>) {
        self.latest = self.nodes.len();
        self.nodes.extend(plan.nodes.iter().enumerate().map(|(position, node)| {
            let carried = before.output_of(&node.id).filter(|_| node.status == NodeStatus::Completed);
            NodeRecord {
                plan_version: plan.version,
                node_id: node.id.to_string(),
                position,
                capability_id: node.capability_id.clone(),
                status: node.status.into(),
                output: carried.cloned(),
                error: None,
                started_at: None,
                completed_at: carried.map(|_| now),
                post_condition_results: None,
            }
        }));
    }

    fn node_mut(&mut self, node_id: &str) -> Option<&mut NodeRecord> {
        self.nodes.get_mut(self.latest..)?.iter_mut().find(|node| node.node_id == node_id)
    }

    fn set_status(&mut self, node_id: &str, status: NodeStatus) {
        if let Some(node) = self.node_mut(node_id) {
            node.status = status.into();
        }
    }

    /// A cancel ends the latest version's nodes that waited on an operator (a question, a human
    /// task) as it ends running ones: `cancelled`, with the cancel's code and message as their
    /// error. A running node gets that from its own `node_error`; a waiting one has no frame of
    /// its own, so it is derived from the run's `complete` (the log stays as it was recorded).
    fn cancel_waiting(&mut self, complete: &Complete, now: DateTime<Utc>) {
        let (code, message) = complete.error_summary();
        let waiting = [NodeStatus::AwaitingHitl.into(), NodeStatus::AwaitingHuman.into()];
        let nodes = self.nodes.get_mut(self.latest..).unwrap_or_default();
        for node in nodes.iter_mut().filter(|n| waiting.contains(&n.status)) {
            node.status = StoredNodeStatus::Cancelled;
            node.output = None;
            node.error = Some(error_value(&ErrorInfo::new(code, message)));
            node.completed_at = Some(now);
        }
    }

    /// A replan drops the latest version's nodes that had not finished.
    fn discard_unfinished(&mut self) {
        let unfinished = self.nodes.get_mut(self.latest..).unwrap_or_default();
        for node in unfinished.iter_mut().filter(|n| StoredNodeStatus::UNFINISHED.contains(&n.status)) {
            node.status = StoredNodeStatus::Discarded;
        }
    }
}

/// A node's error as its document shows it: the code, the message and any details.
fn error_value(error: &ErrorInfo) -> Value {
    let mut value = json!({"code": error.code, "message": error.message});
    if let Some(fields) = value.as_object_mut() {
        fields.extend(error.details.iter().map(|(key, detail)| (key.clone(), detail.clone())));
    }
    value
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;
    use serde_json::json;

    use super::*;
    use crate::events::payload::ReplanInfo;
    use crate::run::decide::signals::announce;
    use crate::run::decide::testing::*;

    /// The table of a run of the fixture after `events`, each a second after the one before.
    fn folded(fixture: &Fixture, events: &[Event]) -> (RunState, NodeTable) {
        let mut state = fixture.fold(&[run_started()]);
        let mut table = NodeTable::default();
        for event in events {
            table.apply_next(&mut state, event);
        }
        (state, table)
    }

    impl NodeTable {
        fn apply_next(&mut self, state: &mut RunState, event: &Event) {
            let seq = state.last_seq.next();
            let seconds = i64::try_from(seq.get()).unwrap_or_default();
            let at = At { seq, timestamp: t0() + TimeDelta::seconds(seconds) };
            self.apply(state, at, event);
            state.apply(at, event).unwrap_or_else(|e| panic!("{e}: {event:?}"));
        }

        fn get(&self, version: u32, node_id: &str) -> &NodeRecord {
            self.nodes.iter().find(|n| n.plan_version == version && n.node_id == node_id).expect("the node")
        }
    }

    fn at(seq: i64) -> Option<DateTime<Utc>> {
        Some(t0() + TimeDelta::seconds(seq))
    }

    #[test]
    fn a_node_runs_completes_and_fails_as_its_frames_say() {
        let fixture = Fixture::new(json!({}));
        let (_, table) = folded(
            &fixture,
            &[
                requested(1, None),
                generated(two_nodes(), None),
                node_start("draft", "writer"),
                node_complete("draft", "writer", json!({"text": "hi"})),
                node_start("polish", "editor"),
                node_error("polish", "editor", "model_error"),
            ],
        );
        let draft = table.get(1, "draft");
        assert_eq!((draft.position, draft.capability_id.as_str()), (0, "writer"));
        assert_eq!(draft.status, NodeStatus::Completed.into());
        assert_eq!(
            (draft.output.clone(), draft.started_at, draft.completed_at),
            (Some(json!({"text": "hi"})), at(4), at(5))
        );
        let polish = table.get(1, "polish");
        assert_eq!((polish.status, polish.output.clone()), (NodeStatus::Failed.into(), None));
        assert_eq!(polish.error, Some(json!({"code": "model_error", "message": "it broke"})));
        assert_eq!((polish.started_at, polish.completed_at), (at(6), at(7)));
    }

    #[test]
    fn a_replan_discards_the_unfinished_and_carries_the_completed_with_their_output() {
        let fixture = Fixture::new(json!({}));
        let (mut state, mut table) = folded(
            &fixture,
            &[
                requested(1, None),
                generated(two_nodes(), None),
                node_start("draft", "writer"),
                node_complete("draft", "writer", json!({"text": "hi"})),
                node_start("polish", "editor"),
            ],
        );
        let replan = ReplanInfo::goal_conditions(Vec::new());
        let triggered = announce(&fixture.run(&state), &replan);
        let mut second = two_nodes();
        second.version = 2;
        second.nodes[0].status = NodeStatus::Completed;
        for event in [triggered, requested(2, Some(replan.clone())), generated(second, Some(replan))] {
            table.apply_next(&mut state, &event);
        }
        assert_eq!(table.get(1, "polish").status, StoredNodeStatus::Discarded, "it had not finished");
        assert_eq!(table.get(1, "draft").status, NodeStatus::Completed.into(), "history stays");
        let carried = table.get(2, "draft");
        assert_eq!(
            (carried.status, carried.output.clone()),
            (NodeStatus::Completed.into(), Some(json!({"text": "hi"})))
        );
        assert_eq!((carried.started_at, carried.completed_at), (None, at(9)));
        assert_eq!(table.get(2, "polish").status, NodeStatus::Pending.into());
        assert_eq!(table.nodes.len(), 4);
    }

    #[test]
    fn a_refusal_keeps_its_details_a_cancel_ends_the_node_and_an_invalid_submission_changes_nothing() {
        let fixture = Fixture::new(json!({}));
        let (mut state, mut table) =
            folded(&fixture, &[requested(1, None), generated(two_nodes(), None), node_start("draft", "writer")]);
        let mut invalid = node_error("draft", "writer", HUMAN_OUTPUT_INVALID);
        table.apply(&state, At { seq: state.last_seq.next(), timestamp: t0() }, &invalid);
        assert_eq!(table.get(1, "draft").status, NodeStatus::Running.into());

        if let Event::NodeError(error) = &mut invalid {
            error.error = ErrorInfo::new("human_task_declined", "declined");
            error.error.details.insert("reason".into(), json!("off brand"));
        }
        table.apply_next(&mut state, &invalid);
        let draft = table.get(1, "draft");
        assert_eq!(
            draft.error,
            Some(json!({"code": "human_task_declined", "message": "declined", "reason": "off brand"}))
        );
        assert_eq!(draft.status, NodeStatus::Failed.into());

        let (mut state, mut table) =
            folded(&fixture, &[requested(1, None), generated(two_nodes(), None), node_start("draft", "writer")]);
        table.apply_next(&mut state, &node_error("draft", "writer", CANCELLED));
        assert_eq!(table.get(1, "draft").status, StoredNodeStatus::Cancelled);
    }

    /// A node waiting on a question or a human task when its run is cancelled ends `cancelled`,
    /// with the cancel's code and message, as a running node does from its `node_error`.
    #[test]
    fn a_cancel_ends_a_node_that_waited_on_an_operator_as_cancelled() {
        use crate::events::payload::HitlKind;
        use crate::run::decide::operator::decide;
        use crate::run::operator::{Actor, Command};

        let fixture = Fixture::new(json!({}));
        for (kind, waited) in
            [(HitlKind::Clarify, NodeStatus::AwaitingHitl), (HitlKind::HumanTask, NodeStatus::AwaitingHuman)]
        {
            let events = paused_on(kind);
            let (mut state, mut table) = folded(&fixture, &events[1..]);
            assert_eq!(table.get(1, "review").status, waited.into(), "{kind:?}");
            let limits = state.replan_limits.expect("started");
            let cancel = Command::Cancel { stopped: false, actor: Actor::default() };
            let decision = decide(&state, limits, cancel, t0(), |_, _| Vec::new()).expect("a cancel");
            for event in &decision.events {
                table.apply_next(&mut state, event);
            }
            let review = table.get(1, "review");
            assert_eq!(review.status, StoredNodeStatus::Cancelled, "{kind:?}");
            assert_eq!(review.error, Some(json!({"code": "cancelled", "message": "An operator cancelled the run"})));
            assert_eq!(review.completed_at, at(i64::try_from(state.last_seq.get()).unwrap_or_default()));
        }
    }
}
