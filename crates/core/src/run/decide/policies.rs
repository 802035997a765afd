//! Runtime policies in a running run (see [`crate::runtime_policy`]): the `onStart` policies before the
//! first node of the first plan, the `onNodeComplete` policies after each node completes, and
//! the follow-up of an operator's decision on a policy's request.

use serde_json::{Value, json};

use super::{Effect, Failure, Outcome, Run};
use crate::condition::{FacetSource, GoalConditionResult};
use crate::events::Event;
use crate::events::payload::*;
use crate::plan::{NodeStatus, PlanNode};
use crate::run::state::PolicyFollowUp;
use crate::runtime_policy::{self, Action, CompletedNode, RuntimePolicy};

/// The `onStart` policies: looked at once per run, before any node of its first plan starts.
pub fn on_start(run: &Run) -> Outcome {
    let state = run.state;
    let fresh = state.plan_version() == 1 && state.nodes.values().all(|s| *s == NodeStatus::Pending);
    if state.fired.on_start || !fresh {
        return Outcome::go_on(Vec::new());
    }
    match runtime_policy::on_start(&run.envelope.runtime_policies) {
        Some(policy) => act(run, policy, None),
        None => Outcome::go_on(Vec::new()),
    }
}

/// The `onNodeComplete` policies after `node` completed: the first enabled one whose selector
/// and condition match acts.
pub fn on_node_complete(run: &Run, node: &PlanNode) -> Outcome {
    let policies = &run.envelope.runtime_policies;
    let Some(output) = run.state.output_of(&node.id).filter(|_| !policies.is_empty()) else {
        return Outcome::go_on(Vec::new());
    };
    let completed = CompletedNode {
        node_id: &node.id,
        capability_id: &node.capability_id,
        kind: &node.kind,
        stage: &node.stage,
        output,
    };
    let (snapshot, facts) = (run.state.context.snapshot(), run.facts());
    let fired = &run.state.fired;
    match runtime_policy::first_match(policies, &completed, &snapshot, &facts, |p| fired.exhausted(p)) {
        Some(policy) => act(run, policy, Some(node)),
        None => Outcome::go_on(Vec::new()),
    }
}

/// What an operator's decision on a policy's `hitl` request asks for: its `approveAction` or
/// `rejectAction` (none: the run goes on as it was).
pub fn follow_up(run: &Run, decided: &PolicyFollowUp) -> Outcome {
    let Some(policy) = run.envelope.runtime_policies.iter().find(|p| p.id == decided.policy_id) else {
        return Outcome::go_on(Vec::new());
    };
    let Action::Hitl { approve, reject, .. } = &policy.action else { return Outcome::go_on(Vec::new()) };
    let Some(action) = (if decided.approved { approve } else { reject }) else { return Outcome::go_on(Vec::new()) };
    let node = decided.node_id.as_deref().and_then(|id| run.state.plan()?.node(id).cloned());
    let info = info(policy, action, node.as_ref(), Some(decided.request_id.clone()));
    perform(run, action, info, node.as_ref())
}

/// Carries out `policy`'s action (after `node`, for an `onNodeComplete` policy).
fn act(run: &Run, policy: &RuntimePolicy, node: Option<&PlanNode>) -> Outcome {
    perform(run, &policy.action, info(policy, &policy.action, node, None), node)
}

/// Does `action` (described by `info`).
fn perform(run: &Run, action: &Action, mut info: PolicyInfo, node: Option<&PlanNode>) -> Outcome {
    let id = info.policy_id.clone();
    let failure = |code: &'static str, message: String| {
        let failure = Failure::new(code, message).detail("policyId", id.as_str());
        Outcome::effect(Effect::Failed(match node {
            Some(node) => failure.detail("nodeId", node.id.as_str()),
            None => failure,
        }))
    };
    match action {
        Action::Replan { rationale } => {
            info.rationale = rationale.clone();
            match run.budget().grant_replan() {
                Ok(_) => {
                    Outcome::effect(Effect::Replan(ReplanInfo::runtime_policy(ReplanReason::PolicyRuntimeReplan, info)))
                }
                Err(refused) => failure(
                    "policy_replan_refused",
                    format!("Runtime policy \"{id}\" asked for a replan but none is granted: {}", refused.message()),
                ),
            }
        }
        Action::Fail { message } => failure(
            "policy_failed",
            message.clone().unwrap_or_else(|| format!("Runtime policy \"{id}\" failed the run")),
        ),
        Action::Emit { event, payload } => Outcome::go_on(emitted(info, event, payload, Vec::new())),
        Action::Goto { next, max_attempts } => goto(run, info, next, *max_attempts, failure),
        Action::Pause { reason } => {
            let question = format!("Runtime policy \"{id}\" paused the run{}. Approve to go on.", suffix(reason));
            // A pause is announced as `policy_update {action: "pause"}` before its request
            // (`docs/api.md`, "Runtime policies"); the request is what an operator answers.
            let paused = update(info.clone(), |u| u.reason = reason.clone());
            let mut events = vec![paused];
            events.push(ask_operator(run, info, question, node, Value::Null));
            Outcome::go_on(events)
        }
        Action::Hitl { rationale, approve, reject } => {
            let question = format!("Runtime policy \"{id}\" asks for an operator's approval{}.", suffix(rationale));
            let follow_ups = json!({"approveAction": approve.as_ref().map(|a| a.name()),
                                    "rejectAction": reject.as_ref().map(|a| a.name())});
            Outcome::go_on(vec![ask_operator(run, info, question, node, follow_ups)])
        }
    }
}

/// Runs node `next` and every node after it again (those not running or waiting now).
fn goto(
    run: &Run,
    info: PolicyInfo,
    next: &str,
    max_attempts: u32,
    failure: impl Fn(&'static str, String) -> Outcome,
) -> Outcome {
    let Some(plan) = run.state.plan().filter(|p| p.node(next).is_some()) else {
        let message = format!(
            "Runtime policy \"{}\" goes to node \"{next}\", which the current plan does not have",
            info.policy_id
        );
        return failure("policy_goto_unknown_node", message);
    };
    let attempts = run.state.fired.goto_attempts.get(&info.policy_id).copied().unwrap_or_default() + 1;
    let reset: Vec<String> = plan
        .downstream(next)
        .into_iter()
        .filter(|id| matches!(run.state.nodes.get(id), None | Some(NodeStatus::Pending | NodeStatus::Completed)))
        .map(|id| id.to_string())
        .collect();
    Outcome::go_on(vec![update(info, |u| {
        u.next = Some(next.to_string());
        u.attempts = Some(attempts);
        u.max_attempts = Some(max_attempts);
        u.reset_nodes = reset;
    })])
}

/// A runtime policy's `pause` or `hitl` request: no further node starts; once the nodes in
/// flight have finished the run waits (`awaiting_hitl`).
pub fn ask_operator(
    run: &Run,
    policy: PolicyInfo,
    question: String,
    node: Option<&PlanNode>,
    follow_ups: Value,
) -> Event {
    let mut context = serde_json::to_value(&policy).unwrap_or_default();
    if let (Some(context), Some(follow_ups)) = (context.as_object_mut(), follow_ups.as_object()) {
        context.extend(follow_ups.clone());
    }
    let request = run.request(HitlKind::Approval, HitlSubject::Policy, question, node, context);
    Event::HitlRequest(HitlRequest { request, usage: None })
}

/// What a frame says about a policy that acted.
fn info(policy: &RuntimePolicy, action: &Action, node: Option<&PlanNode>, request_id: Option<String>) -> PolicyInfo {
    PolicyInfo {
        policy_id: policy.id.clone(),
        trigger_kind: policy.trigger.kind(),
        action: action.name().into(),
        node_id: node.map(|n| n.id.to_string()),
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
pub fn emitted(info: PolicyInfo, event: &str, payload: &Value, results: Vec<GoalConditionResult>) -> Vec<Event> {
    let log = Event::Log(Log::info(
        event,
        Some(json!({"policyId": info.policy_id, "action": "emit", "event": event, "payload": payload})),
    ));
    let update = update(PolicyInfo { action: "emit".into(), ..info }, |u| {
        u.event = Some(event.to_string());
        u.payload = payload.clone();
        u.post_condition_results = results;
    });
    vec![update, log]
}

/// A `policy_update` frame about `info`, completed by `fill`.
pub fn update(info: PolicyInfo, fill: impl FnOnce(&mut PolicyUpdate)) -> Event {
    let mut update = PolicyUpdate {
        policy: info,
        event: None,
        reason: None,
        payload: Value::Null,
        next: None,
        attempts: None,
        max_attempts: None,
        reset_nodes: Vec::new(),
        post_condition_results: Vec::new(),
    };
    fill(&mut update);
    Event::PolicyUpdate(update)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::FrameKind;
    use crate::run::decide::testing::*;

    fn with(policies: Value) -> Fixture {
        Fixture::new(json!({"policies": {"runtime": policies}}))
    }

    fn kinds(outcome: &Outcome) -> Vec<FrameKind> {
        outcome.events.iter().map(Event::kind).collect()
    }

    #[test]
    fn on_start_acts_once_before_the_first_node() {
        let fixture = with(json!([{"id": "hello", "trigger": {"kind": "onStart"},
                                     "action": {"type": "emit", "event": "hello"}}]));
        let mut state = fixture.fold(&[run_started(), requested(1, None), generated(two_nodes(), None)]);
        let outcome = on_start(&fixture.run(&state));
        assert_eq!(kinds(&outcome), [FrameKind::PolicyUpdate, FrameKind::Log]);
        apply_all(&mut state, &outcome.events);
        assert!(state.fired.on_start);
        assert!(on_start(&fixture.run(&state)).events.is_empty(), "not twice");
    }

    #[test]
    fn goto_runs_nodes_again_until_its_attempts_are_used() {
        let fixture =
            with(json!([{"id": "again", "trigger": {"kind": "onNodeComplete", "selector": {"nodeId": "polish"}},
                                     "action": {"type": "goto", "next": "draft", "maxAttempts": 1}}]));
        let mut state = fixture.fold(&[
            run_started(),
            requested(1, None),
            generated(two_nodes(), None),
            node_start("draft", "writer"),
            node_complete("draft", "writer", json!({})),
            node_start("polish", "editor"),
            node_complete("polish", "editor", json!({})),
        ]);
        let polish = two_nodes().nodes[1].clone();
        let outcome = on_node_complete(&fixture.run(&state), &polish);
        let Event::PolicyUpdate(update) = &outcome.events[0] else { panic!("{outcome:?}") };
        assert_eq!(
            (update.attempts, update.reset_nodes.clone()),
            (Some(1), vec!["draft".to_string(), "polish".to_string()])
        );
        apply_all(&mut state, &outcome.events);
        assert_eq!(state.nodes["draft"], NodeStatus::Pending);
        assert!(on_node_complete(&fixture.run(&state), &polish).events.is_empty(), "its attempt is used");
    }

    #[test]
    fn a_replan_is_granted_from_the_budget_or_fails_the_run() {
        let fixture = with(json!([{"id": "rethink", "trigger": {"kind": "onNodeComplete"},
                                     "action": {"type": "replan", "rationale": "try again"}}]));
        let mut state = fixture.fold(&[
            run_started(),
            requested(1, None),
            generated(two_nodes(), None),
            node_start("draft", "writer"),
            node_complete("draft", "writer", json!({})),
        ]);
        let draft = two_nodes().nodes[0].clone();
        let Effect::Replan(replan) = on_node_complete(&fixture.run(&state), &draft).effect else { panic!() };
        assert_eq!(
            (replan.reason, replan.policy.map(|p| p.rationale)),
            (ReplanReason::PolicyRuntimeReplan, Some(Some("try again".into())))
        );
        state.replans.total = fixture.replan_limits.max_replans;
        let Effect::Failed(failure) = on_node_complete(&fixture.run(&state), &draft).effect else { panic!() };
        assert_eq!(failure.code, "policy_replan_refused");
    }

    #[test]
    fn an_operators_decision_on_a_hitl_policy_is_followed_up() {
        let fixture = with(json!([{"id": "review", "trigger": {"kind": "onNodeComplete"},
                                     "action": {"type": "hitl", "rejectAction": {"type": "fail", "message": "no"}}}]));
        let mut state = fixture.fold(&[
            run_started(),
            requested(1, None),
            generated(two_nodes(), None),
            node_start("draft", "writer"),
            node_complete("draft", "writer", json!({})),
        ]);
        let draft = two_nodes().nodes[0].clone();
        let asked = on_node_complete(&fixture.run(&state), &draft);
        assert_eq!(kinds(&asked), [FrameKind::HitlRequest]);
        apply_all(&mut state, &asked.events);
        assert!(state.awaiting_policy());
        let id = state.pending_request().map(|r| r.id.clone()).unwrap_or_default();
        apply_all(
            &mut state,
            &[resolved(&id, HitlKind::Approval, HitlSubject::Policy, Some(verdict(Verdict::Rejected)))],
        );
        let decided = state.policy_follow_up.clone().expect("a decision to follow up");
        let Effect::Failed(failure) = follow_up(&fixture.run(&state), &decided).effect else { panic!() };
        assert_eq!((failure.code, failure.message.as_str()), ("policy_failed", "no"));
    }
}
