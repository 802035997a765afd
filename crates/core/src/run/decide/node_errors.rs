//! What a node's failure does to its run. A failure a different plan may avoid
//! ([`CapabilityError::is_repairable`]: a tool's error, a tool gone, an argument that found
//! nothing) asks for a repair replan (`node_error`) while the run's replans allow one; the
//! planner is told which node failed and why. Any other failure, or one beyond the replans, fails
//! the run.
//!
//! The same decision is made live, when the failure is recorded, and by a coordinator that picks
//! up a run whose `node_error` was committed before the run could go on: a crash between the two
//! changes nothing.

use super::ending::{node_failed, node_failure};
use super::{Effect, Outcome, Run};
use crate::capability::CapabilityError;
use crate::events::Event;
use crate::events::payload::{FailedNode, ReplanInfo};
use crate::plan::PlanNode;

/// What `node` failing with `error` records, and what follows.
pub fn on_node_error(run: &Run, node: &PlanNode, error: &CapabilityError) -> Outcome {
    let (events, _) = node_failed(node, error);
    let failed = events.iter().find_map(|event| match event {
        Event::NodeError(e) => Some(FailedNode {
            node_id: e.node_id.clone(),
            capability_id: e.capability_id.clone(),
            code: e.error.code.clone(),
            message: e.error.message.clone(),
        }),
        _ => None,
    });
    let effect = match failed {
        Some(failed) => after_node_error(run, &failed),
        None => Effect::Continue,
    };
    Outcome { events, effect }
}

/// What follows a recorded failure of node `failed`: a repair replan or the run's failure.
pub fn after_node_error(run: &Run, failed: &FailedNode) -> Effect {
    let failure = node_failure(&failed.node_id, &failed.capability_id, &failed.code, &failed.message);
    if !CapabilityError::is_repairable(&failed.code) {
        return Effect::Failed(failure);
    }
    match run.budget().grant_replan() {
        Ok(_) => Effect::Replan(ReplanInfo::node_error(failed.clone())),
        Err(refused) => Effect::Failed(failure.detail("replanRefused", refused.message())),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::events::FrameKind;
    use crate::events::payload::ReplanReason;
    use crate::run::decide::testing::*;

    fn started() -> (Fixture, crate::run::state::RunState) {
        let fixture = Fixture::new(json!({}));
        let state = fixture.fold(&[
            run_started(),
            requested(1, None),
            generated(two_nodes(), None),
            node_start("draft", "writer"),
        ]);
        (fixture, state)
    }

    #[test]
    fn a_tool_error_asks_for_a_repair_replan_that_names_the_node() {
        let (fixture, state) = started();
        let draft = two_nodes().nodes[0].clone();
        let outcome = on_node_error(&fixture.run(&state), &draft, &CapabilityError::Tool("no such order".into()));
        assert_eq!(outcome.events.iter().map(Event::kind).collect::<Vec<_>>(), [FrameKind::NodeError]);
        let Effect::Replan(replan) = outcome.effect else { panic!("{:?}", outcome.effect) };
        assert_eq!(replan.reason, ReplanReason::NodeError);
        let failed = replan.node_error.expect("the failed node");
        assert_eq!((failed.node_id.as_str(), failed.code.as_str()), ("draft", "tool_error"));
        assert!(failed.message.contains("no such order"), "{}", failed.message);
    }

    #[test]
    fn other_failures_and_failures_beyond_the_replans_fail_the_run() {
        let (fixture, mut state) = started();
        let draft = two_nodes().nodes[0].clone();
        let down = CapabilityError::Connection("refused".into());
        let outcome = on_node_error(&fixture.run(&state), &draft, &down);
        assert!(matches!(outcome.effect, Effect::Failed(ref f) if f.details["cause"] == "capability_unreachable"));

        state.replans.total = fixture.replan_limits.max_replans;
        let outcome = on_node_error(&fixture.run(&state), &draft, &CapabilityError::ToolUnavailable("gone".into()));
        let Effect::Failed(failure) = outcome.effect else { panic!("{:?}", outcome.effect) };
        assert_eq!(failure.details["cause"], "tool_unavailable");
        assert!(failure.details["replanRefused"].as_str().is_some_and(|m| m.contains("replans")), "{failure:?}");
    }
}
