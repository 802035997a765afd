//! The end of a plan: the composed output, the output contract, the goal conditions — complete,
//! repair replan or failure — and how a run fails.

use serde_json::{Map, Value, json};

use super::{Coordinator, Failure, GoalData, RunUpdate, Step};
use crate::condition::{self, FacetSource, GoalConditionResult};
use crate::contract::{OutputContract, SchemaViolation};
use crate::events::Event;
use crate::events::payload::*;
use crate::run::status::RunStatus;
use crate::store::hitl;
use crate::store::plans::{self, RunOutputRow};
use crate::store::runs::Outcome;
use crate::store::{DbConn, StoreError};

impl Coordinator {
    /// Composes the output, checks the output contract and the goal conditions; completes the run,
    /// or asks for a repair replan, or fails when the budget is spent.
    pub(super) async fn evaluate_goals(&mut self) -> Result<Step<ReplanInfo>, StoreError> {
        let output = self.compose_output();
        let violations = self.contract_violations(&output);
        if !violations.is_empty() {
            let prelude = vec![Event::ValidationError(ValidationError {
                node_id: None,
                scope: "final_output",
                errors: violations,
            })];
            let mut failure =
                Failure::new("final_output_invalid", "The composed output does not match the output contract");
            failure.output = output;
            return self.fail(failure, prelude).await.map(|_| Step::Ended);
        }
        let facts = GoalData { context: &self.context, run: self.run_facts() };
        let results = condition::evaluate_all(&self.envelope.goal_conditions, &facts);
        let satisfied = condition::all_satisfied(&results);
        let record = self.output_row(&output, &results, satisfied)?;
        let write = move |conn: &mut DbConn| plans::record_output(conn, &record);
        if satisfied && self.envelope.approval.completion && !self.completion_approved {
            let context = json!({"output": output, "goal_condition_results": results});
            self.request_approval(HitlSubject::Completion, context, write).await?;
            return Ok(Step::Ended);
        }
        if satisfied {
            let complete = Event::Complete(Complete {
                status: CompleteStatus::Completed,
                output: output.clone(),
                goal_condition_results: (!results.is_empty()).then_some(results),
                error: None,
                post_condition_results: self.post_conditions.passed.clone(),
            });
            let outcome = Outcome::Result(output.to_string());
            self.commit_end(vec![complete], RunStatus::Completed, outcome, write).await?;
            return Ok(Step::Ended);
        }
        let failed: Vec<GoalConditionResult> = results.iter().filter(|r| !r.satisfied).cloned().collect();
        match self.budget.grant_goal_condition_replan() {
            Ok(attempt) => {
                let event = Event::GoalConditionFailed(GoalConditionFailed {
                    run_id: self.run_id(),
                    trigger: Trigger {
                        reason: "goal_condition_failed".into(),
                        details: json!({"failedGoalConditions": failed}),
                    },
                    failed_goal_conditions: failed.clone(),
                    attempt,
                    limit: self.budget.limits.max_goal_condition_replans,
                });
                // Committed with the replan round's first `plan_requested`, which follows at once.
                self.stage(vec![event], RunUpdate::NONE, write);
                self.repair = failed.clone();
                Ok(Step::Continue(ReplanInfo::goal_conditions(failed)))
            }
            Err(refused) => {
                let mut failure = Failure::new(refused.code(), refused.message())
                    .detail("attempts", self.budget.counts.goal_condition)
                    .detail("limit", self.budget.limits.max_goal_condition_replans);
                failure.output = output;
                failure.goal_condition_results = Some(results);
                self.finish_failed(failure, vec![], write).await.map(|_| Step::Ended)
            }
        }
    }

    /// How the composed output breaks the envelope's output contract: its JSON Schema, or the
    /// facets it lists that no node produced.
    fn contract_violations(&self, output: &Value) -> Vec<SchemaViolation> {
        match &self.envelope.output_contract {
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

    fn output_row(
        &self,
        output: &Value,
        results: &[GoalConditionResult],
        satisfied: bool,
    ) -> Result<RunOutputRow, StoreError> {
        Ok(RunOutputRow {
            run_id: self.run_id(),
            plan_version: self.plan_version() as i32,
            status: if satisfied { "satisfied" } else { "unsatisfied" }.into(),
            output: output.to_string(),
            goal_condition_results: serde_json::to_string(results)?,
            recorded_at: crate::store::now(),
        })
    }

    /// The run's output per its contract: the listed facets (facets mode), the schema's top-level
    /// properties found as facets (json_schema mode), else the last plan node's output.
    fn compose_output(&self) -> Value {
        let from_facets = |names: &mut dyn Iterator<Item = &String>| -> Map<String, Value> {
            names.filter_map(|name| self.context.facet_value(name).map(|v| (name.clone(), v.clone()))).collect()
        };
        let last_output = || {
            let plan = self.plan.as_deref();
            plan.and_then(|p| p.nodes.last())
                .and_then(|last| self.completed.iter().rev().find(|w| w.node_id == last.id))
                .map(|w| w.output.clone())
                .unwrap_or(Value::Null)
        };
        match &self.envelope.output_contract {
            OutputContract::Facets { facets } => Value::Object(from_facets(&mut facets.iter())),
            OutputContract::JsonSchema { schema, .. } => {
                let properties = schema.source().get("properties").and_then(Value::as_object);
                let picked = properties.map(|p| from_facets(&mut p.keys())).unwrap_or_default();
                if picked.is_empty() { last_output() } else { Value::Object(picked) }
            }
            OutputContract::Freeform { .. } => last_output(),
        }
    }

    /// Ends the run as failed: optional `prelude` frames, then `complete {status:"failed"}`.
    pub(super) async fn fail(&mut self, failure: Failure, prelude: Vec<Event>) -> Result<(), StoreError> {
        self.finish_failed(failure, prelude, |_| Ok(())).await
    }

    /// [`Self::fail`], committing `write` in the same transaction.
    pub(super) async fn finish_failed<F>(
        &mut self,
        failure: Failure,
        mut events: Vec<Event>,
        write: F,
    ) -> Result<(), StoreError>
    where
        F: Fn(&mut DbConn) -> Result<(), StoreError> + Send + Sync + 'static,
    {
        tracing::info!(run_id = %self.run_id(), code = failure.code, message = %failure.message, "run failed");
        let error = failure.error_json();
        let (ending, to) = match failure.ending {
            CompleteStatus::Cancelled => (CompleteStatus::Cancelled, RunStatus::Cancelled),
            _ => (CompleteStatus::Failed, RunStatus::Failed),
        };
        events.push(Event::Complete(Complete {
            status: ending,
            output: failure.output,
            goal_condition_results: failure.goal_condition_results,
            error: Some(error.clone()),
            post_condition_results: self.post_conditions.passed.clone(),
        }));
        let run_id = self.run_id();
        self.commit_end(events, to, Outcome::Error(error.to_string()), move |conn| {
            write(conn)?;
            // Nobody answers a request of a run that ended.
            hitl::close_all(conn, &run_id, "cancelled", crate::store::now())
        })
        .await
    }
}
