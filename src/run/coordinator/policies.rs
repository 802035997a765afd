//! Runtime policies in a running run (see [`crate::policy`]): the `onStart` policies before the
//! first node of the first plan, the `onNodeComplete` policies after each node completes.

use serde_json::{Value, json};

use super::{Coordinator, Effect, Failure, RunUpdate};
use crate::condition::{FacetSource, GoalConditionResult};
use crate::events::Event;
use crate::events::payload::{Log, PolicyInfo, PolicyUpdate, ReplanInfo};
use crate::plan::{NodeStatus, PlanNode};
use crate::policy::{self, Action, CompletedNode, RuntimePolicy};
use crate::run::budget::Reason;
use crate::run::checkpoint::PolicyFollowUp;
use crate::store::plans;

impl Coordinator {
    /// Looks at the `onStart` policies: once per run, before any node of its first plan starts.
    pub(super) fn on_start(&mut self) -> Effect {
        let fresh = self.plan_version() == 1 && self.nodes.values().all(|s| *s == NodeStatus::Pending);
        if self.fired.on_start || !fresh {
            return Effect::Continue;
        }
        self.fired.on_start = true;
        let envelope = self.envelope.clone();
        match policy::on_start(&envelope.runtime_policies) {
            Some(policy) => self.act(policy, None),
            None => Effect::Continue,
        }
    }

    /// Looks at the `onNodeComplete` policies after `node` completed: the first enabled one whose
    /// selector and condition match acts.
    pub(super) fn on_node_complete(&mut self, node: &PlanNode) -> Effect {
        let envelope = self.envelope.clone();
        if envelope.runtime_policies.is_empty() {
            return Effect::Continue;
        }
        let Some(work) = self.completed.iter().rfind(|w| w.node_id == node.id) else { return Effect::Continue };
        let completed = CompletedNode {
            node_id: &node.id,
            capability_id: &node.capability_id,
            kind: &node.kind,
            stage: &node.stage,
            output: &work.output,
        };
        let (snapshot, run) = (self.context.snapshot(), self.run_facts());
        let fired = &self.fired;
        match policy::first_match(&envelope.runtime_policies, &completed, &snapshot, &run, |p| fired.exhausted(p)) {
            Some(policy) => self.act(policy, Some(node)),
            None => Effect::Continue,
        }
    }

    /// Carries out `policy`'s action (after `node`, for an `onNodeComplete` policy).
    fn act(&mut self, policy: &RuntimePolicy, node: Option<&PlanNode>) -> Effect {
        let info = policy_info(&policy.id, policy.trigger.kind(), &policy.action, node, None);
        self.perform(&policy.action, info, node)
    }

    /// What an operator's decision on a policy's `hitl` request asks for: its `approveAction` or
    /// `rejectAction` (none: the run goes on as it was).
    pub(super) fn follow_up(&mut self, decided: PolicyFollowUp) -> Effect {
        let envelope = self.envelope.clone();
        let Some(policy) = envelope.runtime_policies.iter().find(|p| p.id == decided.policy_id) else {
            return Effect::Continue;
        };
        let Action::Hitl { approve, reject, .. } = &policy.action else { return Effect::Continue };
        let Some(action) = (if decided.approved { approve } else { reject }) else { return Effect::Continue };
        let node = decided.node_id.as_deref().and_then(|id| self.plan.as_ref()?.node(id).cloned());
        let info = policy_info(&policy.id, policy.trigger.kind(), action, node.as_ref(), Some(decided.request_id));
        self.perform(action, info, node.as_ref())
    }

    /// Does `action` (described by `info`). Frames are staged: they commit with whatever the
    /// coordinator does next.
    fn perform(&mut self, action: &Action, mut info: PolicyInfo, node: Option<&PlanNode>) -> Effect {
        let id = info.policy_id.clone();
        let failure = |code: &'static str, message: String| {
            let failure = Failure::new(code, message).detail("policyId", id.as_str());
            match node {
                Some(node) => failure.detail("nodeId", node.id.as_str()),
                None => failure,
            }
        };
        match action {
            Action::Replan { rationale } => {
                info.rationale = rationale.clone();
                match self.budget.grant_replan(Reason::RuntimePolicy) {
                    Ok(_) => Effect::Replan(ReplanInfo::runtime_policy(info)),
                    Err(refused) => Effect::Failed(failure(
                        "policy_replan_refused",
                        format!(
                            "Runtime policy \"{id}\" asked for a replan but none is granted: {}",
                            refused.message()
                        ),
                    )),
                }
            }
            Action::Fail { message } => {
                let message = message.clone().unwrap_or_else(|| format!("Runtime policy \"{id}\" failed the run"));
                Effect::Failed(failure("policy_failed", message))
            }
            Action::Emit { event, payload } => {
                self.stage(emitted(info, event, payload, Vec::new()), RunUpdate::NONE, |_| Ok(()));
                Effect::Continue
            }
            Action::Goto { next, max_attempts } => self.goto(info, next, *max_attempts, failure),
            Action::Pause { reason } => {
                let question = format!("Runtime policy \"{id}\" paused the run{}. Approve to go on.", suffix(reason));
                // As the anchor announces a pause; the request is what an operator answers.
                let paused = update(info.clone(), |u| u.reason = reason.clone());
                self.stage(vec![paused], RunUpdate::NONE, |_| Ok(()));
                self.ask_operator(info, question, node, Value::Null)
            }
            Action::Hitl { rationale, approve, reject } => {
                let question = format!("Runtime policy \"{id}\" asks for an operator's approval{}.", suffix(rationale));
                let follow_ups = json!({"approveAction": approve.as_ref().map(|a| a.name()),
                                        "rejectAction": reject.as_ref().map(|a| a.name())});
                self.ask_operator(info, question, node, follow_ups)
            }
        }
    }

    /// Runs node `next` and every node after it again (those not running or waiting now).
    fn goto(
        &mut self,
        info: PolicyInfo,
        next: &str,
        max_attempts: u32,
        failure: impl Fn(&'static str, String) -> Failure,
    ) -> Effect {
        let Some(plan) = self.plan.clone().filter(|p| p.node(next).is_some()) else {
            let message = format!(
                "Runtime policy \"{}\" goes to node \"{next}\", which the current plan does not have",
                info.policy_id
            );
            return Effect::Failed(failure("policy_goto_unknown_node", message));
        };
        let attempts = self.fired.goto_attempts.entry(info.policy_id.clone()).or_default();
        *attempts += 1;
        let attempts = *attempts;
        let reset: Vec<String> = plan
            .downstream(next)
            .into_iter()
            .filter(|id| matches!(self.nodes.get(id), None | Some(NodeStatus::Pending | NodeStatus::Completed)))
            .collect();
        for id in &reset {
            self.nodes.insert(id.clone(), NodeStatus::Pending);
        }
        let event = update(info, |u| {
            u.next = Some(next.to_string());
            u.attempts = Some(attempts);
            u.max_attempts = Some(max_attempts);
            u.reset_nodes = reset.clone();
        });
        let (run_id, version) = (self.run_id(), self.plan_version() as i32);
        self.stage(vec![event], RunUpdate::NONE, move |conn| {
            reset
                .iter()
                .try_for_each(|id| plans::node_waiting(conn, (&run_id, version, id), NodeStatus::Pending.as_str()))
        });
        Effect::Continue
    }
}

/// What a frame says about a policy that acted.
fn policy_info(
    id: &str,
    trigger_kind: &str,
    action: &Action,
    node: Option<&PlanNode>,
    request_id: Option<String>,
) -> PolicyInfo {
    PolicyInfo {
        policy_id: id.to_string(),
        trigger_kind: trigger_kind.to_string(),
        action: action.name().into(),
        node_id: node.map(|n| n.id.clone()),
        capability_id: node.map(|n| n.capability_id.clone()),
        rationale: None,
        request_id,
    }
}

/// `": <text>"`, or nothing.
fn suffix(text: &Option<String>) -> String {
    text.as_deref().map(|t| format!(": {t}")).unwrap_or_default()
}

/// The frames of an `emit` action: a `policy_update` with the event (and the post-condition
/// results that led to it, if any) and a `log` frame naming it.
pub(super) fn emitted(info: PolicyInfo, event: &str, payload: &Value, results: Vec<GoalConditionResult>) -> Vec<Event> {
    let log = Event::Log(Log {
        severity: "info".into(),
        message: event.to_string(),
        details: Some(json!({"policyId": info.policy_id, "action": "emit", "event": event, "payload": payload})),
    });
    let update = update(PolicyInfo { action: "emit".into(), ..info }, |u| {
        u.event = Some(event.to_string());
        u.payload = payload.clone();
        u.post_condition_results = results;
    });
    vec![update, log]
}

/// A `policy_update` frame about `info`, completed by `fill`.
pub(super) fn update(info: PolicyInfo, fill: impl FnOnce(&mut PolicyUpdate)) -> Event {
    let mut update = PolicyUpdate {
        policy: info,
        event: None,
        reason: None,
        payload: serde_json::Value::Null,
        next: None,
        attempts: None,
        max_attempts: None,
        reset_nodes: Vec::new(),
        post_condition_results: Vec::new(),
    };
    fill(&mut update);
    Event::PolicyUpdate(update)
}
