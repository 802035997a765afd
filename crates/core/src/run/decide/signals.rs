//! What a capability's signal does to a run (see [`crate::capability::signal`]): a question
//! (CLARIFY) waits for an operator's answer; a REPLAN asks for a new plan.

use serde_json::{Value, json};

use super::ending::node_error;
use super::{Effect, Outcome, Run};
use crate::capability::Signal;
use crate::events::Event;
use crate::events::payload::*;
use crate::plan::PlanNode;

/// What `node`'s `signal` comes to.
pub fn on_signal(run: &Run, node: &PlanNode, signal: Signal) -> Outcome {
    match signal {
        Signal::Clarify { question, context } => clarification(run, node, question, context),
        Signal::Replan { reason, details } => replan(run, node, reason, details.unwrap_or(Value::Null)),
    }
}

/// A node asks an operator `question`: the request opens and the node waits (`awaiting_hitl`);
/// it runs again with the answer. Beyond the run's allowance of questions the node fails.
fn clarification(run: &Run, node: &PlanNode, question: String, context: Option<Value>) -> Outcome {
    let limit = run.limits.max_clarifications_per_run;
    if run.state.clarifications.len() >= usize::try_from(limit).unwrap_or(usize::MAX) {
        let message = format!(
            "capability {} asked a question (\"{question}\") but this run's nodes already asked all {limit} \
             questions it allows",
            node.capability_id
        );
        let (events, failure) = node_error(node, "clarification_limit", message, Vec::new());
        return Outcome { events, effect: Effect::Failed(failure) };
    }
    let details = json!({"capabilityId": node.capability_id, "label": node.label, "context": context});
    let request = run.request(HitlKind::Clarify, HitlSubject::Node, question, Some(node), details);
    Outcome::go_on(vec![Event::HitlRequest(HitlRequest { request, usage: None })])
}

/// A capability found the remaining plan invalid. A granted replan is announced when it starts
/// ([`announce`]); a refused one fails the node with the signal's reason in its error.
fn replan(run: &Run, node: &PlanNode, reason: String, details: Value) -> Outcome {
    match run.budget().grant_replan() {
        Ok(_) => Outcome::effect(Effect::Replan(ReplanInfo::capability_signal(SignalInfo {
            node_id: node.id.to_string(),
            capability_id: node.capability_id.clone(),
            reason,
            details,
        }))),
        Err(refused) => {
            let message = format!(
                "capability {} signalled REPLAN (\"{reason}\") but no replan is granted: {}",
                node.capability_id,
                refused.message()
            );
            let (events, failure) = node_error(node, "replan_signal_refused", message, Vec::new());
            let failure = failure.detail("signal", json!({"reason": reason, "details": details}));
            Outcome { events, effect: Effect::Failed(failure) }
        }
    }
}

/// The `policy_triggered` frame of a granted replan that a signal or a runtime policy asked for,
/// recorded with the replan's first `plan_requested`: the current plan's unfinished nodes are
/// discarded, and requests still open for them are superseded.
pub fn announce(run: &Run, replan: &ReplanInfo) -> Event {
    Event::PolicyTriggered(PolicyTriggered {
        run_id: run.state.run_id.to_string(),
        trigger: Trigger { reason: replan.reason, details: replan.details() },
        replan: replan.clone(),
        usage: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::FrameKind;
    use crate::run::decide::testing::*;

    #[test]
    fn a_question_opens_a_request_until_the_run_asked_its_allowance() {
        let fixture = Fixture::new(json!({}));
        let state = fixture.fold(&[
            run_started(),
            requested(1, None),
            generated(two_nodes(), None),
            node_start("draft", "writer"),
        ]);
        let draft = two_nodes().nodes[0].clone();
        let ask = || Signal::Clarify { question: "Which market?".into(), context: None };
        let outcome = on_signal(&fixture.run(&state), &draft, ask());
        assert_eq!(outcome.effect, Effect::Continue);
        let Event::HitlRequest(request) = &outcome.events[0] else { panic!() };
        assert_eq!((request.request.kind, request.request.question.as_str()), (HitlKind::Clarify, "Which market?"));

        let mut limited = Fixture::new(json!({}));
        limited.limits.max_clarifications_per_run = 0;
        let refused = on_signal(&limited.run(&state), &draft, ask());
        assert_eq!(refused.events.iter().map(Event::kind).collect::<Vec<_>>(), [FrameKind::NodeError]);
        assert!(matches!(refused.effect, Effect::Failed(ref f) if f.details["cause"] == "clarification_limit"));
    }

    #[test]
    fn a_replan_signal_is_granted_from_the_budget_or_fails_its_node() {
        let fixture = Fixture::new(json!({}));
        let mut state = fixture.fold(&[run_started(), requested(1, None), generated(two_nodes(), None)]);
        let draft = two_nodes().nodes[0].clone();
        let signal = || Signal::Replan { reason: "exists".into(), details: None };
        let Effect::Replan(replan) = on_signal(&fixture.run(&state), &draft, signal()).effect else { panic!() };
        assert_eq!(replan.signal.map(|s| s.reason), Some("exists".to_string()));
        state.replans.total = fixture.replan_limits.max_replans;
        let refused = on_signal(&fixture.run(&state), &draft, signal());
        assert!(matches!(refused.effect, Effect::Failed(ref f) if f.details["cause"] == "replan_signal_refused"));
    }
}
