//! Where a run stands, rebuilt from its committed event log: what a coordinator needs to carry on
//! after a restart. Pure: no I/O.
//!
//! The log is the one source. Every state change of a run is committed together with the frames
//! that report it, so the frames say exactly what was done: which plan is current, which nodes
//! completed (with their outputs), which goal conditions failed last and why a replan was asked
//! for. What a frame does not report was not committed and is done again.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::budget::ReplanCounts;
use super::context::RunContext;
use super::operator::HUMAN_OUTPUT_INVALID;
use super::status::RunStatus;
use crate::capability::Clarification;
use crate::condition::GoalConditionResult;
use crate::events::payload::{PostConditionSummary, ReplanInfo};
use crate::plan::{NodeStatus, Plan};
use crate::planner::CompletedWork;
use crate::policy::Fired;

/// What a resumed coordinator does first.
#[derive(Debug, Clone, PartialEq)]
pub enum Resume {
    /// Ask the planner: for a first plan, or again for the replan this reason asked for.
    Plan(Option<ReplanInfo>),
    /// Ask the planner for a new run's first plan: its `plan_requested` was committed with the
    /// run's creation.
    Requested,
    /// Run the current plan's unfinished nodes, then evaluate the goal conditions.
    Execute,
    /// A node's failure was committed before the run could fail: the run fails with it.
    NodeFailed(NodeFailure),
}

/// A committed `node_error`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFailure {
    pub node_id: String,
    pub capability_id: String,
    pub code: String,
    pub message: String,
}

/// The counters a run row keeps (the replan budget and the planner's attempt number).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub planner_attempts: u32,
    pub replans: ReplanCounts,
}

/// A run's committed state.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub status: RunStatus,
    pub counters: Counters,
    /// When the run started (its `start` frame).
    pub started_at: DateTime<Utc>,
    /// The `seq` of the last committed frame; 0 before any.
    pub last_seq: u64,
    pub plan: Option<Plan>,
    /// The current plan's nodes; nodes that were in flight are `pending` again.
    pub nodes: HashMap<String, NodeStatus>,
    /// Work completed in any plan version, by node id, in completion order.
    pub completed: Vec<CompletedWork>,
    /// The goal conditions that failed last.
    pub repair: Vec<GoalConditionResult>,
    pub context: RunContext,
    /// Nodes that had started but whose outcome was not committed: they run again.
    pub interrupted: Vec<String>,
    /// An operator approved the run's result (asked once per run).
    pub completion_approved: bool,
    /// When an operator last decided (the run's time limit counts from then, not from its start).
    pub operator_at: Option<DateTime<Utc>>,
    /// The questions nodes asked operators (CLARIFY signals) and their answers.
    pub clarifications: Vec<Clarification>,
    /// What the run's runtime policies have done.
    pub policies: Fired,
    pub post_conditions: PostConditionState,
    /// A runtime policy's `pause`/`hitl` request waits for an operator.
    pub policy_request_open: bool,
    /// An operator decided on a policy's `hitl` request; its follow-up action is not done yet.
    pub policy_follow_up: Option<PolicyFollowUp>,
    pub next: Resume,
}

/// An operator's decision on a runtime policy's request, for its follow-up action.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyFollowUp {
    pub request_id: String,
    pub policy_id: String,
    pub node_id: Option<String>,
    pub approved: bool,
}

/// Post-conditions of a run's nodes: the latest results of completed nodes (summarised on
/// `complete`) and the failed attempts of nodes that run again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PostConditionState {
    pub passed: Vec<PostConditionSummary>,
    /// Failed attempts so far and the failures of the last one, by node id.
    pub failing: HashMap<String, (u32, Vec<GoalConditionResult>)>,
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

/// Why a run's log cannot be resumed from.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CheckpointError {
    #[error("a {0} run is not resumed")]
    NotActive(RunStatus),
    #[error("the event log has no `start` frame")]
    NoStart,
    #[error("frame {seq} ({kind}) is unreadable: {reason}")]
    Unreadable { seq: u64, kind: String, reason: String },
}

impl Checkpoint {
    /// A run that has just started: its inputs, nothing done.
    pub fn fresh(inputs: &Map<String, Value>, started_at: DateTime<Utc>) -> Self {
        let at = started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        Self {
            status: RunStatus::Pending,
            counters: Counters::default(),
            started_at,
            last_seq: 1,
            plan: None,
            nodes: HashMap::new(),
            completed: Vec::new(),
            repair: Vec::new(),
            context: RunContext::seeded(inputs, &at),
            interrupted: Vec::new(),
            completion_approved: false,
            operator_at: None,
            clarifications: Vec::new(),
            policies: Fired::default(),
            post_conditions: PostConditionState::default(),
            policy_request_open: false,
            policy_follow_up: None,
            next: Resume::Plan(None),
        }
    }

    /// Replays the whole event log (frames as JSON, in `seq` order) of a run whose row holds
    /// `status` and `counters`.
    pub fn replay(
        status: RunStatus,
        counters: Counters,
        inputs: &Map<String, Value>,
        frames: &[Value],
    ) -> Result<Self, CheckpointError> {
        if !status.is_active() {
            return Err(CheckpointError::NotActive(status));
        }
        let mut log = Replay::default();
        for frame in frames {
            log.apply(frame)?;
        }
        let started_at = log.started_at.ok_or(CheckpointError::NoStart)?;
        let mut nodes = log.nodes;
        let mut interrupted: Vec<String> =
            nodes.iter().filter(|(_, status)| **status == NodeStatus::Running).map(|(id, _)| id.clone()).collect();
        interrupted.sort_by_key(|id| log.plan.as_ref().and_then(|p| p.nodes.iter().position(|n| &n.id == id)));
        for id in &interrupted {
            nodes.insert(id.clone(), NodeStatus::Pending);
        }
        let next = match (status, log.failed) {
            (RunStatus::Running, Some(failure)) => Resume::NodeFailed(failure),
            (RunStatus::Running, None) if log.plan.is_some() => Resume::Execute,
            // Pending, planning, or running without a plan (the plan's commit is what moves a
            // run to running, so this is a log flexrun did not write): plan.
            _ => Resume::Plan(log.plan.as_ref().and(log.replan)),
        };
        Ok(Self {
            status,
            counters,
            started_at,
            last_seq: log.last_seq,
            context: RunContext::replay(inputs, frames),
            plan: log.plan,
            nodes,
            completed: log.completed,
            repair: log.repair,
            interrupted,
            completion_approved: log.completion_approved,
            operator_at: log.operator_at,
            clarifications: log.clarifications,
            policies: log.policies,
            post_conditions: log.post_conditions,
            policy_request_open: !log.policy_requests.is_empty(),
            policy_follow_up: log.policy_follow_up,
            next,
        })
    }
}

/// The state folded from the frames so far.
#[derive(Default)]
struct Replay {
    started_at: Option<DateTime<Utc>>,
    last_seq: u64,
    plan: Option<Plan>,
    nodes: HashMap<String, NodeStatus>,
    completed: Vec<CompletedWork>,
    repair: Vec<GoalConditionResult>,
    /// The reason of the last `plan_requested`, or of an operator's replan since.
    replan: Option<ReplanInfo>,
    failed: Option<NodeFailure>,
    completion_approved: bool,
    operator_at: Option<DateTime<Utc>>,
    clarifications: Vec<Clarification>,
    policies: Fired,
    post_conditions: PostConditionState,
    /// Open requests of runtime policies: request id → (policy id, node id).
    policy_requests: HashMap<String, (String, Option<String>)>,
    policy_follow_up: Option<PolicyFollowUp>,
}

impl Replay {
    fn apply(&mut self, frame: &Value) -> Result<(), CheckpointError> {
        let seq = frame["seq"].as_u64().unwrap_or_default();
        let kind = frame["type"].as_str().unwrap_or_default();
        let payload = &frame["payload"];
        let node_id = || frame["nodeId"].as_str().unwrap_or_default().to_string();
        let field = |value: &Value, what: &str| -> Result<String, CheckpointError> {
            value.as_str().map(String::from).ok_or_else(|| unreadable(seq, kind, format!("no {what}")))
        };
        let timestamp = || -> Result<DateTime<Utc>, CheckpointError> {
            let at = field(&frame["timestamp"], "timestamp")?;
            let at = DateTime::parse_from_rfc3339(&at).map_err(|e| unreadable(seq, kind, e.to_string()))?;
            Ok(at.with_timezone(&Utc))
        };
        self.last_seq = seq;
        match kind {
            "start" => self.started_at = Some(timestamp()?),
            "plan_requested" => self.replan = parse_optional(&payload["replan"], seq, kind)?,
            "plan_generated" => {
                let plan: Plan = parse(&payload["plan"], seq, kind)?;
                self.nodes = plan.nodes.iter().map(|n| (n.id.clone(), n.status)).collect();
                self.plan = Some(plan);
                // A new plan supersedes what runtime policies of the old one were waiting on.
                self.policy_requests.clear();
                self.failed = None;
            }
            "node_start" => {
                // A human node waits for its output; it was not interrupted.
                let human = payload["executorType"] == "human";
                self.nodes.insert(node_id(), if human { NodeStatus::AwaitingHuman } else { NodeStatus::Running });
            }
            "node_complete" => {
                let id = node_id();
                let node = self
                    .plan
                    .as_ref()
                    .and_then(|p| p.node(&id))
                    .ok_or_else(|| unreadable(seq, kind, format!("node \"{id}\" is not in the current plan")))?;
                let work = CompletedWork {
                    node_id: id.clone(),
                    stage: node.stage.clone(),
                    capability_id: node.capability_id.clone(),
                    output_facets: node.output_facets.clone(),
                    output: payload["output"].clone(),
                };
                let results = parse_optional(&payload["postConditionResults"], seq, kind)?.unwrap_or_default();
                self.post_conditions.passed(&id, &work.capability_id, results);
                self.completed.retain(|w| w.node_id != id);
                self.completed.push(work);
                self.nodes.insert(id, NodeStatus::Completed);
            }
            // A rejected human submission: the node still waits.
            "node_error" if payload["error"]["code"] == HUMAN_OUTPUT_INVALID => {}
            "node_error" => {
                let id = node_id();
                self.nodes.insert(id.clone(), NodeStatus::Failed);
                self.failed.get_or_insert(NodeFailure {
                    node_id: id,
                    capability_id: field(&payload["capabilityId"], "capabilityId")?,
                    code: field(&payload["error"]["code"], "error code")?,
                    message: field(&payload["error"]["message"], "error message")?,
                });
            }
            "goal_condition_failed" => self.repair = parse(&payload["failedGoalConditions"], seq, kind)?,
            "hitl_request" if payload["request"]["subject"] == "policy" => {
                let request = &payload["request"];
                self.policy_acted(&request["context"]);
                let policy_id = field(&request["context"]["policyId"], "policyId")?;
                let node = request["nodeId"].as_str().map(String::from);
                self.policy_requests.insert(field(&request["id"], "request id")?, (policy_id, node));
            }
            // A node asked a question: it waits for the answer.
            "hitl_request" if payload["request"]["kind"] == "clarify" => {
                let request = &payload["request"];
                let node_id = field(&request["nodeId"], "nodeId")?;
                self.nodes.insert(node_id.clone(), NodeStatus::AwaitingHitl);
                self.clarifications.push(Clarification {
                    request_id: field(&request["id"], "request id")?,
                    node_id,
                    question: field(&request["question"], "question")?,
                    asked_at: field(&request["createdAt"], "createdAt")?,
                    answer: None,
                    answered_at: None,
                });
            }
            "policy_update" if payload["action"] == "retry" => {
                let failures: Vec<GoalConditionResult> = parse(&payload["postConditionResults"], seq, kind)?;
                let attempts = payload["attempts"].as_u64().unwrap_or_default() as u32;
                let failing = failures.into_iter().filter(|r| !r.satisfied).collect();
                self.post_conditions.failing.insert(node_id(), (attempts, failing));
            }
            "policy_update" => self.policy_acted(payload),
            "hitl_resolved" | "policy_triggered" => {
                self.policy_acted(&payload["replan"]["policy"]);
                // Only an operator's action restarts the clock of the run's time limit.
                let reason = payload["trigger"]["reason"].as_str().unwrap_or_default();
                if kind == "hitl_resolved" || reason.starts_with("operator_") {
                    self.operator_at = Some(timestamp()?);
                }
                if let Some(replan) = parse_optional(&payload["replan"], seq, kind)? {
                    self.replan = Some(replan);
                }
                let approved = payload["decision"]["decision"] == "approved";
                self.completion_approved |= approved && payload["request"]["subject"] == "completion";
                if let Some((policy_id, node_id)) =
                    payload["request"]["id"].as_str().and_then(|id| self.policy_requests.remove(id))
                {
                    let request_id = payload["request"]["id"].as_str().unwrap_or_default().to_string();
                    self.policy_follow_up = payload["decision"]["decision"].as_str().map(|decision| PolicyFollowUp {
                        request_id,
                        policy_id,
                        node_id,
                        approved: decision == "approved",
                    });
                }
                if let Some(answer) = payload["decision"]["answer"].as_str() {
                    self.answer(&payload["request"]["id"], answer, field(&frame["timestamp"], "timestamp")?);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

impl Replay {
    /// A runtime policy acted (`policy` is its `PolicyInfo`, with a goto's `attempts` and
    /// `resetNodes` when it was one).
    fn policy_acted(&mut self, policy: &Value) {
        if self.policy_follow_up.as_ref().is_some_and(|f| policy["requestId"] == f.request_id.as_str()) {
            self.policy_follow_up = None;
        }
        if policy["triggerKind"] == "onStart" {
            self.policies.on_start = true;
        }
        if let (Some(id), Some(attempts)) = (policy["policyId"].as_str(), policy["attempts"].as_u64()) {
            self.policies.goto_attempts.insert(id.to_string(), attempts as u32);
        }
        for node in policy["resetNodes"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            self.nodes.insert(node.to_string(), NodeStatus::Pending);
        }
    }

    /// An operator answered a node's question: the node runs again, with the answer.
    fn answer(&mut self, request_id: &Value, answer: &str, at: String) {
        let Some(asked) = self.clarifications.iter_mut().find(|c| *request_id == c.request_id.as_str()) else {
            return;
        };
        asked.answer = Some(answer.to_string());
        asked.answered_at = Some(at);
        if self.nodes.get(&asked.node_id) == Some(&NodeStatus::AwaitingHitl) {
            self.nodes.insert(asked.node_id.clone(), NodeStatus::Pending);
        }
    }
}

fn unreadable(seq: u64, kind: &str, reason: String) -> CheckpointError {
    CheckpointError::Unreadable { seq, kind: kind.to_string(), reason }
}

fn parse<T: DeserializeOwned>(value: &Value, seq: u64, kind: &str) -> Result<T, CheckpointError> {
    T::deserialize(value).map_err(|e| unreadable(seq, kind, e.to_string()))
}

fn parse_optional<T: DeserializeOwned>(value: &Value, seq: u64, kind: &str) -> Result<Option<T>, CheckpointError> {
    if value.is_null() { Ok(None) } else { parse(value, seq, kind).map(Some) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::condition::FacetSource;

    const T0: &str = "2026-11-21T10:00:00.000Z";

    fn frame(seq: u64, kind: &str, node_id: Option<&str>, payload: Value) -> Value {
        json!({"type": kind, "seq": seq, "runId": "r", "timestamp": T0, "correlationId": "c",
               "nodeId": node_id, "payload": payload})
    }

    fn node(id: &str, capability: &str, inputs: &[&str], outputs: &[&str], status: &str) -> Value {
        json!({"id": id, "stage": id, "label": id, "capabilityId": capability, "kind": "execution",
               "inputFacets": inputs, "outputFacets": outputs, "rationale": [], "instructions": [],
               "status": status})
    }

    fn plan(version: u32, nodes: Vec<Value>) -> Value {
        let edges = if nodes.len() > 1 {
            json!([{"from": "draft", "to": "polish", "reason": "facet:post_copy"}])
        } else {
            json!([])
        };
        json!({"plan": {"runId": "r", "version": version, "nodes": nodes, "edges": edges,
                        "metadata": {"plannerModel": "m", "plannerAttempt": version, "phase": "initial",
                                     "draftNodeCount": 2}}})
    }

    fn two_nodes() -> Value {
        plan(
            1,
            vec![
                node("draft", "writer", &["brief"], &["post_copy"], "pending"),
                node("polish", "editor", &["post_copy"], &["post_copy"], "pending"),
            ],
        )
    }

    fn inputs() -> Map<String, Value> {
        json!({"brief": {"topic": "t"}}).as_object().unwrap().clone()
    }

    fn failed_goal() -> Value {
        json!([{"facet": "post_copy", "path": "/quality_score", "expression": "quality_score >= 0.8",
                "satisfied": false, "observedValue": 0.5}])
    }

    #[test]
    fn a_run_mid_node_runs_the_interrupted_node_again_and_keeps_completed_work() {
        let frames = [
            frame(1, "start", None, json!({})),
            frame(2, "plan_requested", None, json!({"attempt": 1, "phase": "initial"})),
            frame(3, "plan_generated", None, two_nodes()),
            frame(4, "node_start", Some("draft"), json!({"facets": {"output": ["post_copy"]}})),
            frame(5, "node_complete", Some("draft"), json!({"capabilityId": "writer", "output": {"text": "a"}})),
            frame(6, "node_start", Some("polish"), json!({"facets": {"output": ["post_copy"]}})),
        ];
        let checkpoint = Checkpoint::replay(RunStatus::Running, Counters::default(), &inputs(), &frames).unwrap();
        assert_eq!(checkpoint.next, Resume::Execute);
        assert_eq!(checkpoint.last_seq, 6);
        assert_eq!(checkpoint.interrupted, ["polish"]);
        assert_eq!(checkpoint.nodes["draft"], NodeStatus::Completed);
        assert_eq!(checkpoint.nodes["polish"], NodeStatus::Pending);
        assert_eq!(checkpoint.completed.len(), 1);
        assert_eq!(checkpoint.completed[0].capability_id, "writer");
        assert_eq!(checkpoint.context.facet_value("post_copy"), Some(&json!({"text": "a"})));
        assert_eq!(checkpoint.started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true), T0);
    }

    #[test]
    fn a_run_whose_nodes_all_completed_only_evaluates() {
        let frames = [
            frame(1, "start", None, json!({})),
            frame(
                2,
                "plan_generated",
                None,
                plan(1, vec![node("draft", "writer", &["brief"], &["post_copy"], "pending")]),
            ),
            frame(3, "node_start", Some("draft"), json!({"facets": {"output": ["post_copy"]}})),
            frame(4, "node_complete", Some("draft"), json!({"capabilityId": "writer", "output": {"text": "a"}})),
        ];
        let checkpoint = Checkpoint::replay(RunStatus::Running, Counters::default(), &inputs(), &frames).unwrap();
        assert_eq!(checkpoint.next, Resume::Execute);
        assert!(checkpoint.interrupted.is_empty());
        assert!(checkpoint.nodes.values().all(|s| *s == NodeStatus::Completed));
    }

    #[test]
    fn a_run_mid_replan_asks_again_for_the_same_repair() {
        let replan = json!({"reason": "goal_condition_failed", "failedGoalConditions": failed_goal()});
        let frames = [
            frame(1, "start", None, json!({})),
            frame(2, "plan_requested", None, json!({"attempt": 1, "phase": "initial"})),
            frame(
                3,
                "plan_generated",
                None,
                plan(1, vec![node("draft", "writer", &["brief"], &["post_copy"], "pending")]),
            ),
            frame(4, "node_start", Some("draft"), json!({})),
            frame(5, "node_complete", Some("draft"), json!({"output": {"text": "a"}})),
            frame(6, "goal_condition_failed", None, json!({"failedGoalConditions": failed_goal()})),
            frame(7, "plan_requested", None, json!({"attempt": 2, "phase": "replan", "replan": replan})),
        ];
        let checkpoint = Checkpoint::replay(RunStatus::Planning, Counters::default(), &inputs(), &frames).unwrap();
        let Resume::Plan(Some(info)) = &checkpoint.next else { panic!("{:?}", checkpoint.next) };
        assert_eq!(info.reason, "goal_condition_failed");
        assert_eq!(info.failed_goal_conditions.len(), 1);
        assert_eq!(checkpoint.repair, info.failed_goal_conditions);
        assert_eq!(checkpoint.plan.as_ref().map(|p| p.version), Some(1));
    }

    #[test]
    fn a_question_keeps_its_node_waiting_until_answered_then_runs_it_again_with_the_answer() {
        let request = json!({"request": {"id": "q1", "kind": "clarify", "subject": "node", "nodeId": "draft",
                                         "question": "Which market?", "planVersion": 1, "createdAt": T0}});
        let frames = [
            frame(1, "start", None, json!({})),
            frame(2, "plan_generated", None, two_nodes()),
            frame(3, "node_start", Some("draft"), json!({})),
            frame(4, "hitl_request", None, request),
        ];
        let waiting = Checkpoint::replay(RunStatus::Running, Counters::default(), &inputs(), &frames).unwrap();
        assert_eq!(waiting.nodes["draft"], NodeStatus::AwaitingHitl);
        assert!(waiting.interrupted.is_empty(), "a node waiting for its answer was not interrupted");
        assert_eq!(waiting.clarifications[0].answer, None);

        let resolved = json!({"request": {"id": "q1", "kind": "clarify", "subject": "node", "status": "resolved"},
                              "decision": {"decision": "answered", "answer": "EU only"}});
        let frames = [frames.to_vec(), vec![frame(5, "hitl_resolved", None, resolved)]].concat();
        let answered = Checkpoint::replay(RunStatus::Running, Counters::default(), &inputs(), &frames).unwrap();
        assert_eq!(answered.nodes["draft"], NodeStatus::Pending);
        let asked = &answered.clarifications[0];
        assert_eq!((asked.node_id.as_str(), asked.answer.as_deref()), ("draft", Some("EU only")));
        assert_eq!(asked.answered_at.as_deref(), Some(T0));
        assert!(answered.operator_at.is_some());
    }

    #[test]
    fn a_signal_replan_does_not_restart_the_clock_of_the_time_limit() {
        let replan = json!({"reason": "capability_signal",
                            "signal": {"nodeId": "draft", "capabilityId": "writer", "reason": "exists"}});
        let frames = [
            frame(1, "start", None, json!({})),
            frame(2, "plan_generated", None, two_nodes()),
            frame(3, "policy_triggered", None, json!({"trigger": {"reason": "capability_signal"}, "replan": replan})),
            frame(4, "plan_requested", None, json!({"attempt": 2, "phase": "replan", "replan": replan})),
        ];
        let checkpoint = Checkpoint::replay(RunStatus::Planning, Counters::default(), &inputs(), &frames).unwrap();
        assert_eq!(checkpoint.operator_at, None);
        let Resume::Plan(Some(info)) = &checkpoint.next else { panic!("{:?}", checkpoint.next) };
        assert_eq!(info.signal.as_ref().map(|s| s.reason.as_str()), Some("exists"));
    }

    #[test]
    fn policy_frames_restore_what_policies_did() {
        let frames = [
            frame(1, "start", None, json!({})),
            frame(2, "plan_generated", None, two_nodes()),
            frame(3, "policy_update", None, json!({"policyId": "hello", "triggerKind": "onStart", "action": "emit"})),
            frame(4, "node_start", Some("draft"), json!({})),
            frame(5, "node_complete", Some("draft"), json!({"output": {"text": "a"}})),
            frame(
                6,
                "policy_update",
                Some("draft"),
                json!({"policyId": "again", "triggerKind": "onNodeComplete", "action": "goto", "next": "draft",
                       "attempts": 1, "maxAttempts": 2, "resetNodes": ["draft", "polish"]}),
            ),
        ];
        let checkpoint = Checkpoint::replay(RunStatus::Running, Counters::default(), &inputs(), &frames).unwrap();
        assert!(checkpoint.policies.on_start);
        assert_eq!(checkpoint.policies.goto_attempts["again"], 1);
        assert_eq!(checkpoint.nodes["draft"], NodeStatus::Pending, "a goto runs the completed node again");
        assert_eq!(checkpoint.completed.len(), 1, "its earlier output stays until it is replaced");
    }

    #[test]
    fn a_policy_request_waits_then_its_decision_is_followed_up_once() {
        let request = json!({"request": {"id": "p1", "kind": "approval", "subject": "policy", "nodeId": "draft",
            "question": "?", "planVersion": 1, "createdAt": T0,
            "context": {"policyId": "review", "triggerKind": "onNodeComplete", "action": "hitl"}}});
        let mut frames = vec![
            frame(1, "start", None, json!({})),
            frame(2, "plan_generated", None, two_nodes()),
            frame(3, "hitl_request", Some("draft"), request),
        ];
        let open = Checkpoint::replay(RunStatus::Running, Counters::default(), &inputs(), &frames).unwrap();
        assert!(open.policy_request_open);
        assert_eq!(open.policy_follow_up, None);

        let resolved = json!({"request": {"id": "p1", "kind": "approval", "subject": "policy", "status": "resolved"},
                              "decision": {"decision": "rejected"}});
        frames.push(frame(4, "hitl_resolved", None, resolved));
        let decided = Checkpoint::replay(RunStatus::Running, Counters::default(), &inputs(), &frames).unwrap();
        assert!(!decided.policy_request_open);
        let expected = PolicyFollowUp {
            request_id: "p1".into(),
            policy_id: "review".into(),
            node_id: Some("draft".into()),
            approved: false,
        };
        assert_eq!(decided.policy_follow_up, Some(expected));

        let done = json!({"policyId": "review", "triggerKind": "onNodeComplete", "action": "emit", "requestId": "p1"});
        frames.push(frame(5, "policy_update", None, done));
        let followed = Checkpoint::replay(RunStatus::Running, Counters::default(), &inputs(), &frames).unwrap();
        assert_eq!(followed.policy_follow_up, None, "a follow-up that was done is not done again");
    }

    #[test]
    fn a_run_before_its_first_plan_plans() {
        let frames = [frame(1, "start", None, json!({})), frame(2, "plan_requested", None, json!({"attempt": 1}))];
        let checkpoint = Checkpoint::replay(RunStatus::Planning, Counters::default(), &inputs(), &frames).unwrap();
        assert_eq!(checkpoint.next, Resume::Plan(None));
        assert_eq!(checkpoint.context.facet_value("brief"), Some(&json!({"topic": "t"})));
    }

    #[test]
    fn a_committed_node_failure_fails_the_run() {
        let frames = [
            frame(1, "start", None, json!({})),
            frame(2, "plan_generated", None, two_nodes()),
            frame(3, "node_start", Some("draft"), json!({})),
            frame(
                4,
                "node_error",
                Some("draft"),
                json!({"capabilityId": "writer", "error": {"code": "capability_timeout", "message": "slow"}}),
            ),
        ];
        let checkpoint = Checkpoint::replay(RunStatus::Running, Counters::default(), &inputs(), &frames).unwrap();
        let Resume::NodeFailed(failure) = checkpoint.next else { panic!() };
        assert_eq!((failure.node_id.as_str(), failure.code.as_str()), ("draft", "capability_timeout"));
    }

    #[test]
    fn unreadable_logs_and_ended_runs_are_refused() {
        assert_eq!(
            Checkpoint::replay(RunStatus::Completed, Counters::default(), &inputs(), &[]).unwrap_err(),
            CheckpointError::NotActive(RunStatus::Completed)
        );
        assert_eq!(
            Checkpoint::replay(RunStatus::Pending, Counters::default(), &inputs(), &[]).unwrap_err(),
            CheckpointError::NoStart
        );
        let frames = [frame(1, "start", None, json!({})), frame(2, "plan_generated", None, json!({"plan": 3}))];
        let error = Checkpoint::replay(RunStatus::Running, Counters::default(), &inputs(), &frames).unwrap_err();
        assert!(matches!(error, CheckpointError::Unreadable { seq: 2, .. }), "{error}");
    }
}
