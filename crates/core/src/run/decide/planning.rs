//! Planning decisions: the planner request of each attempt, what a draft comes to (a plan
//! version, or a rejection with diagnostics) and how a round that produced no plan fails.

use serde_json::Value;

use super::{Failure, Run};
use crate::events::Event;
use crate::events::payload::*;
use crate::plan::Diagnostic;
use crate::plan::{Plan, PlanMetadata};
use crate::planner::{self, CompletedWork, DraftContext, RequiredFacet};

/// The `plan_requested` of the run's next planner attempt.
pub fn request(run: &Run, phase: Phase, replan: Option<ReplanInfo>) -> Event {
    let capabilities = run
        .capabilities
        .values()
        .map(|c| CapabilitySummary {
            capability_id: c.id.clone(),
            display_name: c.display_name.clone(),
            status: CapabilityStatus::Active,
        })
        .collect();
    Event::PlanRequested(PlanRequested {
        attempt: run.state.planner_attempts + 1,
        phase,
        capabilities,
        budget: run.budget().view(),
        replan,
    })
}

/// What a planning round is about: the phase and, for a replan, why.
pub fn phase(replan: &Option<ReplanInfo>) -> Phase {
    if replan.is_some() { Phase::Replan } else { Phase::Initial }
}

/// What the planner is told about a replan: why, and what the run did so far.
pub fn replan_prompt<'a>(run: &Run<'a>, replan: &'a Option<ReplanInfo>) -> Option<planner::Replan<'a>> {
    let (info, previous_plan) = (replan.as_ref()?, run.state.plan()?);
    Some(planner::Replan {
        reason: info.reason.as_str(),
        failed_goal_conditions: &info.failed_goal_conditions,
        feedback: info.feedback.as_deref(),
        signal: info.signal.as_deref(),
        policy: info.policy.as_deref(),
        node_error: info.node_error.as_deref(),
        completed: run.state.completed(),
        previous_plan,
    })
}

/// Compiles a draft of planner attempt `attempt` into the run's next plan version.
pub fn compile(run: &Run, draft: &Value, attempt: u32, phase: Phase, model: &str) -> Result<Plan, Vec<Diagnostic>> {
    let mut required: Vec<RequiredFacet> = run
        .envelope
        .output_contract
        .facets()
        .iter()
        .map(|facet| RequiredFacet { facet: facet.clone(), because: "output_contract" })
        .collect();
    for goal in &run.envelope.goal_conditions {
        required.push(RequiredFacet { facet: goal.facet.clone(), because: "goal_condition" });
    }
    let available = run.state.context.facet_names().cloned().collect();
    let completed = run.state.completed().iter().map(|w: &CompletedWork| (w.node_id.clone(), w.capability_id.clone()));
    let cx = DraftContext {
        capabilities: run.capabilities,
        available_facets: &available,
        required_facets: &required,
        completed: &completed.collect(),
        version: run.state.plan_version() + 1,
        metadata: PlanMetadata {
            planner_model: model.to_string(),
            planner_attempt: attempt,
            phase,
            draft_node_count: draft.get("nodes").and_then(Value::as_array).map_or(0, Vec::len),
        },
        max_nodes: run.limits.max_plan_nodes,
    };
    planner::draft::compile(draft, &cx)
}

/// The frames that install `plan`: `plan_generated`, and `plan_updated` when it replaces one.
pub fn install(run: &Run, plan: Plan, replan: Option<ReplanInfo>) -> Vec<Event> {
    let previous = run.state.plan().map(|p| p.version);
    let mut events = Vec::with_capacity(2);
    let updated = match (previous, &replan) {
        (Some(previous_version), Some(info)) => Some(Event::PlanUpdated(PlanUpdated {
            previous_version,
            version: plan.version,
            trigger: Trigger { reason: info.reason, details: info.details() },
            replan: info.clone(),
            nodes: plan.nodes.clone(),
            edges: plan.edges.clone(),
        })),
        _ => None,
    };
    events.push(Event::PlanGenerated(PlanGenerated {
        plan: PlanView::new(run.state.run_id.to_string(), plan),
        replan,
        usage: None,
    }));
    events.extend(updated);
    events
}

/// The frame of a draft that failed validation; another draft follows (or the round fails).
pub fn rejected(attempt: u32, phase: Phase, diagnostics: Vec<Diagnostic>) -> Event {
    Event::PlanRejected(PlanRejected { attempt, phase, diagnostics, usage: None })
}

/// How a round fails whose drafts were all rejected (the last with `diagnostics`).
pub fn no_valid_plan(diagnostics: &[Diagnostic]) -> Failure {
    Failure::new("plan_rejected", format!("The planner produced no valid plan in {} attempts", planner::DRAFT_ATTEMPTS))
        .detail("diagnostics", serde_json::to_value(diagnostics).unwrap_or_default())
}

/// How a run fails whose planner call failed (`transient` ones after `retries` retries).
pub fn planner_failed(error: &impl std::fmt::Display, transient: bool, retries: u32) -> Failure {
    let retried = if transient { format!(" after {retries} retries") } else { String::new() };
    Failure::new("planner_error", format!("The planner call failed{retried}: {error}")).detail("transient", transient)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::events::FrameKind;
    use crate::run::decide::testing::*;

    #[test]
    fn each_request_is_the_next_attempt_with_the_budget_used_so_far() {
        let fixture = Fixture::new(json!({}));
        let mut state = fixture.fold(&[run_started(), requested(1, None)]);
        state.replans.total = 1;
        let event = super::request(&fixture.run(&state), Phase::Initial, None);
        let Event::PlanRequested(asked) = event else { panic!("{event:?}") };
        assert_eq!(asked.attempt, 2);
        assert_eq!(asked.budget.used.total, 1);
        assert_eq!(asked.capabilities.len(), fixture.capabilities.len());
    }

    #[test]
    fn a_valid_draft_compiles_into_the_next_version_and_a_replan_also_says_what_changed() {
        let fixture = Fixture::new(json!({}));
        let state = fixture.fold(&[run_started(), requested(1, None)]);
        let draft = json!({"nodes": [{"stage": "draft", "capabilityId": "writer"}]});
        let plan = compile(&fixture.run(&state), &draft, 1, Phase::Initial, "m").expect("valid draft");
        assert_eq!((plan.version, plan.nodes[0].id.as_str()), (1, "draft"));
        let events = install(&fixture.run(&state), plan.clone(), None);
        assert_eq!(events.iter().map(Event::kind).collect::<Vec<_>>(), [FrameKind::PlanGenerated]);

        let mut replanning = fixture.fold(&[run_started(), requested(1, None), generated(plan.clone(), None)]);
        let replan = ReplanInfo::goal_conditions(vec![goal(false, 0.5)]);
        apply_all(&mut replanning, &[requested(2, Some(replan.clone()))]);
        let next = compile(&fixture.run(&replanning), &draft, 2, Phase::Replan, "m").expect("valid draft");
        assert_eq!(next.version, 2);
        let events = install(&fixture.run(&replanning), next, Some(replan));
        let kinds: Vec<FrameKind> = events.iter().map(Event::kind).collect();
        assert_eq!(kinds, [FrameKind::PlanGenerated, FrameKind::PlanUpdated]);
    }

    #[test]
    fn an_invalid_draft_is_rejected_with_diagnostics() {
        let fixture = Fixture::new(json!({}));
        let state = fixture.fold(&[run_started(), requested(1, None)]);
        let draft = json!({"nodes": [{"stage": "draft", "capabilityId": "nobody"}]});
        let diagnostics = compile(&fixture.run(&state), &draft, 1, Phase::Initial, "m").unwrap_err();
        assert!(diagnostics.iter().any(|d| d.code == "CAPABILITY_NOT_REGISTERED"), "{diagnostics:?}");
        let failure = no_valid_plan(&diagnostics);
        assert_eq!(failure.code, "plan_rejected");
        assert_eq!(failure.details["diagnostics"][0]["code"], "CAPABILITY_NOT_REGISTERED");
    }
}
