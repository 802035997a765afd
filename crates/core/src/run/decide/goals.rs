//! The end of a plan: the composed output, the output contract and the goal conditions — the
//! run completes, waits for its result's approval, replans to repair, or fails.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::ending::{completed, failed};
use super::execution::approval;
use super::{Failure, Run};
use crate::condition::{self, FacetSource, GoalConditionResult};
use crate::contract::{OutputContract, SchemaViolation};
use crate::events::Event;
use crate::events::payload::*;

/// What the evaluation of a plan's outcome comes to.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    pub events: Vec<Event>,
    /// The evaluation, to be kept with the run (none when the output broke its contract).
    pub record: Option<Evaluation>,
    pub then: Then,
}

/// A plan version's outcome as evaluated: kept one per plan version, the latest kept
/// (`run_outputs`). The output and the results are JSON text, written once here: the values
/// themselves go on into the run's frames.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub plan_version: u32,
    pub status: EvaluationStatus,
    pub output_json: String,
    pub results_json: String,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// Whether a plan version's outcome met every goal condition (`run_outputs.status`).
#[cfg_attr(feature = "diesel", derive(diesel::expression::AsExpression, diesel::deserialize::FromSqlRow))]
#[cfg_attr(feature = "diesel", diesel(sql_type = diesel::sql_types::Text))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvaluationStatus {
    Satisfied,
    Unsatisfied,
}

impl EvaluationStatus {
    pub const ALL: [EvaluationStatus; 2] = [Self::Satisfied, Self::Unsatisfied];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Satisfied => "satisfied",
            Self::Unsatisfied => "unsatisfied",
        }
    }
}

crate::stored_as_text!(EvaluationStatus, "evaluation status");

/// How the run goes on after its goals were evaluated.
#[derive(Debug, Clone, PartialEq)]
pub enum Then {
    /// It ended (completed or failed) or waits for the approval of its result.
    Stop,
    /// It replans to repair the failed conditions.
    Replan(ReplanInfo),
}

/// Composes the output, checks the output contract and the goal conditions.
pub fn evaluate(run: &Run) -> Evaluated {
    let output = compose_output(run);
    let violations = contract_violations(run, &output);
    if !violations.is_empty() {
        let prelude = vec![Event::ValidationError(ValidationError {
            node_id: None,
            scope: ValidationScope::FinalOutput,
            errors: violations,
            usage: None,
        })];
        let mut failure =
            Failure::new("final_output_invalid", "The composed output does not match the output contract");
        failure.output = output;
        return Evaluated { events: failed(run.state, failure, prelude), record: None, then: Then::Stop };
    }
    let facts = run.goal_data(&run.state.context);
    let results = condition::evaluate_all(&run.envelope.goal_conditions, &facts);
    let satisfied = condition::all_satisfied(&results);
    let record = Some(record(run, &output, &results, satisfied));
    if satisfied && run.envelope.approval.completion && !run.state.completion_approved {
        let context = json!({"output": output, "goal_condition_results": results});
        let events = vec![approval(run, HitlSubject::Completion, context)];
        return Evaluated { events, record, then: Then::Stop };
    }
    if satisfied {
        return Evaluated { events: completed(run.state, output, results), record, then: Then::Stop };
    }
    let failed_conditions: Vec<GoalConditionResult> = results.iter().filter(|r| !r.satisfied).cloned().collect();
    match run.budget().grant_goal_condition_replan() {
        Ok(attempt) => {
            let event = Event::GoalConditionFailed(GoalConditionFailed {
                run_id: run.state.run_id.to_string(),
                trigger: Trigger {
                    reason: ReplanReason::GoalConditionFailed,
                    details: json!({"failedGoalConditions": failed_conditions}),
                },
                failed_goal_conditions: failed_conditions.clone(),
                attempt,
                limit: run.replan_limits.max_goal_condition_replans,
            });
            let then = Then::Replan(ReplanInfo::goal_conditions(failed_conditions));
            Evaluated { events: vec![event], record, then }
        }
        Err(refused) => {
            let (attempts, limit) = refused.attempts_and_limit(&run.state.replans);
            let mut failure =
                Failure::new(refused.code(), refused.message()).detail("attempts", attempts).detail("limit", limit);
            failure.output = output;
            failure.goal_condition_results = Some(results);
            Evaluated { events: failed(run.state, failure, Vec::new()), record, then: Then::Stop }
        }
    }
}

/// The run's output per its contract: the listed facets (`facets`), the schema's top-level
/// properties found as facets (`json_schema`), else the last plan node's output.
pub fn compose_output(run: &Run) -> Value {
    let state = run.state;
    let from_facets = |names: &mut dyn Iterator<Item = &String>| -> Map<String, Value> {
        names.filter_map(|name| state.context.facet_value(name).map(|v| (name.clone(), v.clone()))).collect()
    };
    let last_output = || {
        let last = state.plan().and_then(|p| p.nodes.last());
        last.and_then(|node| state.output_of(&node.id)).cloned().unwrap_or(Value::Null)
    };
    match &run.envelope.output_contract {
        OutputContract::Facets { facets } => Value::Object(from_facets(&mut facets.iter())),
        OutputContract::JsonSchema { schema, .. } => {
            let properties = schema.source().get("properties").and_then(Value::as_object);
            let picked = properties.map(|p| from_facets(&mut p.keys())).unwrap_or_default();
            if picked.is_empty() { last_output() } else { Value::Object(picked) }
        }
        OutputContract::Freeform { .. } => last_output(),
    }
}

/// How the composed output breaks the envelope's output contract: its JSON Schema, or the
/// facets it lists that no node produced.
fn contract_violations(run: &Run, output: &Value) -> Vec<SchemaViolation> {
    match &run.envelope.output_contract {
        OutputContract::JsonSchema { schema, .. } => schema.violations(output),
        OutputContract::Facets { facets } => facets
            .iter()
            .filter(|facet| output.get(facet.as_str()).is_none())
            .map(|facet| SchemaViolation {
                instance_path: crate::validation::pointer([facet]),
                keyword: "required".into(),
                message: format!("no node produced facet \"{facet}\""),
            })
            .collect(),
        OutputContract::Freeform { .. } => Vec::new(),
    }
}

fn record(run: &Run, output: &Value, results: &[GoalConditionResult], satisfied: bool) -> Evaluation {
    Evaluation {
        plan_version: run.state.plan_version(),
        status: if satisfied { EvaluationStatus::Satisfied } else { EvaluationStatus::Unsatisfied },
        output_json: output.to_string(),
        results_json: serde_json::to_string(results).unwrap_or_default(),
        at: run.now,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::events::FrameKind;
    use crate::run::decide::testing::*;
    use crate::run::status::RunStatus;

    /// A run whose one node wrote `post_copy` with `score`.
    fn done(fixture: &Fixture, score: f64) -> crate::run::state::RunState {
        fixture.fold(&[
            run_started(),
            requested(1, None),
            generated(plan(1, vec![node("draft", "writer", &["brief"], &["post_copy"])]), None),
            node_start("draft", "writer"),
            node_complete("draft", "writer", json!({"text": "t", "quality_score": score})),
        ])
    }

    fn kinds(events: &[Event]) -> Vec<FrameKind> {
        events.iter().map(Event::kind).collect()
    }

    #[test]
    fn satisfied_goals_complete_the_run_with_the_composed_output() {
        let fixture = Fixture::new(json!({}));
        let state = done(&fixture, 0.9);
        let evaluated = evaluate(&fixture.run(&state));
        assert_eq!(kinds(&evaluated.events), [FrameKind::Complete]);
        assert_eq!(evaluated.then, Then::Stop);
        let Event::Complete(complete) = &evaluated.events[0] else { unreachable!() };
        assert_eq!(complete.output, json!({"post_copy": {"text": "t", "quality_score": 0.9}}));
        assert_eq!(complete.goal_condition_results.as_ref().map(|r| r[0].satisfied), Some(true));
        assert_eq!(evaluated.record.map(|r| r.status), Some(EvaluationStatus::Satisfied));
    }

    #[test]
    fn failed_goals_ask_for_a_repair_while_the_budget_allows_then_fail_the_run() {
        let fixture = Fixture::new(json!({"policies": {"replan": {"maxGoalConditionReplans": 1}}}));
        let mut state = done(&fixture, 0.5);
        let evaluated = evaluate(&fixture.run(&state));
        assert_eq!(kinds(&evaluated.events), [FrameKind::GoalConditionFailed]);
        let Then::Replan(replan) = &evaluated.then else { panic!("{:?}", evaluated.then) };
        assert_eq!(replan.reason, ReplanReason::GoalConditionFailed);
        assert_eq!(replan.failed_goal_conditions[0].observed_value, Some(json!(0.5)));
        apply_all(&mut state, &evaluated.events);
        assert_eq!(state.replans.goal_condition, 1, "recording the frame counts the replan");

        let exhausted = evaluate(&fixture.run(&state));
        assert_eq!(exhausted.then, Then::Stop);
        apply_all(&mut state, &exhausted.events);
        assert_eq!(state.status, RunStatus::Failed);
        assert_eq!(state.end.as_ref().map(|e| e.error_summary().0), Some("goal_condition_replan_limit"));
    }

    /// Reaching `maxReplans` before the goal-condition cap fails the run with the total's numbers,
    /// as its message says, not the goal-condition cap's.
    #[test]
    fn a_run_out_of_replans_reports_the_total_it_used() {
        let replan = json!({"maxGoalConditionReplans": 2, "maxReplans": 1});
        let fixture = Fixture::new(json!({"policies": {"replan": replan}}));
        let mut state = done(&fixture, 0.5);
        state.replans.total = 1;
        let evaluated = evaluate(&fixture.run(&state));
        apply_all(&mut state, &evaluated.events);
        let end = state.end.as_ref().expect("the run ended");
        let error = end.error.as_ref().expect("with an error");
        assert_eq!(error["code"], "replan_limit", "{error}");
        assert_eq!((&error["attempts"], &error["limit"]), (&json!(1), &json!(1)), "{error}");
        assert_eq!(error["message"], "The run used all 1 replans it is allowed", "{error}");
    }

    #[test]
    fn a_result_that_needs_approval_waits_for_it_once() {
        let fixture = Fixture::new(json!({"constraints": {"requiresHitlApproval": true}}));
        let mut state = done(&fixture, 0.9);
        let evaluated = evaluate(&fixture.run(&state));
        assert_eq!(kinds(&evaluated.events), [FrameKind::HitlRequest]);
        apply_all(&mut state, &evaluated.events);
        assert_eq!(state.status, RunStatus::AwaitingHitl);
        let id = state.pending_request().map(|r| r.id.clone()).unwrap_or_default();
        apply_all(
            &mut state,
            &[resolved(&id, HitlKind::Approval, HitlSubject::Completion, Some(verdict(Verdict::Approved)))],
        );
        assert_eq!(kinds(&evaluate(&fixture.run(&state)).events), [FrameKind::Complete], "approved once");
    }

    #[test]
    fn an_output_that_breaks_its_contract_fails_the_run_without_evaluating() {
        let fixture = Fixture::new(json!({"outputContract": {"mode": "facets", "facets": ["post_copy", "review"]}}));
        let state = done(&fixture, 0.9);
        let evaluated = evaluate(&fixture.run(&state));
        assert_eq!(kinds(&evaluated.events), [FrameKind::ValidationError, FrameKind::Complete]);
        assert_eq!(evaluated.record, None);
        let Event::ValidationError(error) = &evaluated.events[0] else { unreachable!() };
        assert_eq!(error.errors[0].instance_path, "/review");
    }
}
