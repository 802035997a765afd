//! Capability post-conditions: checked on each candidate output before its node may complete. A
//! failure runs the node again (with the failures in its context) while attempts are left, then
//! does what the matching `onPostConditionFailed` policy says — by default, the node fails.

use serde_json::{Value, json};

use super::ending::node_error;
use super::policies::{ask_operator, emitted, update};
use super::{Effect, Outcome, Run};
use crate::condition::{self, GoalConditionResult};
use crate::events::payload::{PolicyInfo, ReplanInfo, ReplanReason};
use crate::plan::PlanNode;
use crate::run::context::NodeOutput;
use crate::runtime_policy::{self, Action, CompletedNode, RuntimePolicy, Trigger, TriggerKind};

/// `node`'s post-conditions evaluated on the run context as `output` would leave it (empty when
/// its capability has none).
pub fn results(run: &Run, node: &PlanNode, output: &Value) -> Vec<GoalConditionResult> {
    let Some(capability) = run.capabilities.get(&node.capability_id) else { return Vec::new() };
    if capability.post_conditions.is_empty() {
        return Vec::new();
    }
    let mut candidate = run.state.context.clone();
    candidate.record_output(NodeOutput {
        node_id: &node.id,
        capability_id: &node.capability_id,
        plan_version: run.state.plan_version(),
        output_facets: &node.output_facets,
        output,
        at: "",
    });
    condition::evaluate_all(&capability.post_conditions, &run.goal_data(&candidate))
}

/// The `onPostConditionFailed` policy for `node` (if one matches) and the attempts it gets after
/// a failure: the policy's `maxRetries`, else its capability's, else the configured.
pub fn budget(run: &Run, node: &PlanNode, output: &Value) -> (Option<RuntimePolicy>, u32) {
    let completed = CompletedNode {
        node_id: &node.id,
        capability_id: &node.capability_id,
        kind: &node.kind,
        stage: &node.stage,
        output,
    };
    let policy = runtime_policy::on_post_condition_failed(&run.envelope.runtime_policies, &completed).cloned();
    let from_policy = policy.as_ref().and_then(|p| match p.trigger {
        Trigger::OnPostConditionFailed { max_retries, .. } => max_retries,
        _ => None,
    });
    let from_capability = run.capabilities.get(&node.capability_id).and_then(|c| c.post_condition_retries);
    (policy, from_policy.or(from_capability).unwrap_or(run.limits.post_condition_max_retries))
}

/// What `node`'s output that failed its post-conditions (`results`) comes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Failed {
    /// Attempts are left: the node runs again, announced by these frames.
    Retry(Vec<crate::events::Event>),
    /// No attempt is left: the policy's action (or the node's failure).
    Decided(Outcome),
}

/// `node`'s output failed its post-conditions. While attempts are left: a
/// `policy_update {action: "retry"}` and the node's next attempt. Then the policy's action:
/// `replan` (counted as a post-condition replan), `emit` (announced, then the node fails),
/// `hitl` (an operator may accept the output anyway), or `fail`.
pub fn failed(run: &Run, node: &PlanNode, output: &Value, results: Vec<GoalConditionResult>) -> Failed {
    let (policy, max_retries) = budget(run, node, &Value::Null);
    let attempts = run.state.post_conditions.failing.get(node.id.as_str()).map_or(0, |(a, _)| *a) + 1;
    let info = PolicyInfo {
        policy_id: policy.as_ref().map_or_else(|| format!("{}.postConditions", node.capability_id), |p| p.id.clone()),
        trigger_kind: TriggerKind::OnPostConditionFailed,
        action: PolicyInfo::RETRY.into(),
        node_id: Some(node.id.to_string()),
        capability_id: Some(node.capability_id.clone()),
        rationale: None,
        request_id: None,
    };
    if attempts <= max_retries {
        return Failed::Retry(vec![update(info, |u| {
            u.attempts = Some(attempts);
            u.max_attempts = Some(max_retries);
            u.post_condition_results = results;
        })]);
    }
    let failed: Vec<&GoalConditionResult> = results.iter().filter(|r| !r.satisfied).collect();
    let expressions: Vec<&str> = failed.iter().map(|r| r.expression.as_str()).collect();
    let message = format!(
        "output failed its capability's post-conditions after {attempts} attempt(s): {}",
        expressions.join("; ")
    );
    let fail = |message: String, prelude| {
        let (events, failure) = node_error(node, "post_condition_failed", message, prelude);
        Outcome { events, effect: Effect::Failed(failure) }
    };
    Failed::Decided(match policy.as_ref().map(|p| &p.action) {
        Some(Action::Replan { rationale }) => {
            let info =
                PolicyInfo { action: "replan".into(), rationale: rationale.clone().or(Some(message.clone())), ..info };
            match run.budget().grant_replan() {
                Ok(_) => {
                    Outcome::effect(Effect::Replan(ReplanInfo::runtime_policy(ReplanReason::PostConditionFailed, info)))
                }
                Err(refused) => fail(format!("{message}; no replan is granted: {}", refused.message()), Vec::new()),
            }
        }
        Some(Action::Emit { event, payload }) => fail(message, emitted(info, event, payload, results)),
        Some(Action::Hitl { rationale, approve, reject }) => {
            let question = format!(
                "Node \"{}\" failed its capability's post-conditions ({}){}. Approve to accept its output anyway.",
                node.id,
                expressions.join("; "),
                rationale.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
            );
            let details = json!({
                "approveAction": approve.as_ref().map(|a| a.name()),
                "rejectAction": reject.as_ref().map(|a| a.name()),
                "label": node.label, "candidateOutput": output, "postConditionResults": results,
            });
            let info = PolicyInfo { action: "hitl".into(), ..info };
            Outcome::go_on(vec![ask_operator(run, info, question, Some(node), details)])
        }
        Some(Action::Fail { message: Some(custom) }) => fail(custom.clone(), Vec::new()),
        _ => fail(message, Vec::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Event, FrameKind};
    use crate::run::decide::testing::*;

    fn checked() -> PlanNode {
        node("draft", "checked", &["brief"], &["post_copy"])
    }

    fn fixture(policies: Value) -> Fixture {
        Fixture::new(json!({"policies": {"runtime": policies}}))
    }

    fn running(fixture: &Fixture) -> crate::run::state::RunState {
        fixture.fold(&[
            run_started(),
            requested(1, None),
            generated(plan(1, vec![checked()]), None),
            node_start("draft", "checked"),
        ])
    }

    #[test]
    fn a_failing_output_runs_the_node_again_then_fails_it() {
        let fixture = fixture(json!([]));
        let mut state = running(&fixture);
        let low = json!({"quality_score": 0.5});
        let results = results(&fixture.run(&state), &checked(), &low);
        assert!(!condition::all_satisfied(&results));
        assert!(condition::all_satisfied(&super::results(
            &fixture.run(&state),
            &checked(),
            &json!({"quality_score": 0.9})
        )));
        let Failed::Retry(events) = failed(&fixture.run(&state), &checked(), &low, results.clone()) else { panic!() };
        apply_all(&mut state, &events);
        assert_eq!(state.post_conditions.failing["draft"].0, 1, "one attempt failed");
        let Failed::Decided(outcome) = failed(&fixture.run(&state), &checked(), &low, results) else { panic!() };
        assert_eq!(outcome.events.iter().map(Event::kind).collect::<Vec<_>>(), [FrameKind::NodeError]);
        let Effect::Failed(failure) = outcome.effect else { panic!() };
        assert_eq!(failure.details["cause"], "post_condition_failed");
    }

    #[test]
    fn a_policy_may_replan_instead() {
        let fixture = fixture(json!([{"id": "fix", "trigger": {"kind": "onPostConditionFailed", "maxRetries": 0},
                                        "action": {"type": "replan"}}]));
        let state = running(&fixture);
        let low = json!({"quality_score": 0.5});
        let results = results(&fixture.run(&state), &checked(), &low);
        let Failed::Decided(outcome) = failed(&fixture.run(&state), &checked(), &low, results) else { panic!() };
        let Effect::Replan(replan) = outcome.effect else { panic!("{outcome:?}") };
        assert_eq!(replan.reason, ReplanReason::PostConditionFailed);
        assert_eq!(replan.policy.map(|p| p.policy_id), Some("fix".to_string()));
    }
}
