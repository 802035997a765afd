//! Planning: one round of planner drafts — each a model call, retried when the failure is
//! transient — validated and compiled into the run's next plan version.

use serde_json::Value;

use super::{Coordinator, Step};
use crate::events::Event;
use crate::events::payload::{BudgetPhase, HitlSubject, ReplanInfo, RetryScope};
use crate::plan::Diagnostic;
use crate::planner::{self, PromptInput};
use crate::run::decide::execution::{approval, fallbacks, retry};
use crate::run::decide::{Failure, Run, planning};
use crate::run::log::LogError;
use crate::run::spans;
use crate::run::usage::Caller;
use crate::traces::SpanScope;

/// What one planner call came to: a draft (or a reply that is no draft at all) and the model that
/// answered it, or the failure that ends the run.
type Drafted = Result<(Result<Value, Diagnostic>, String), Failure>;

impl Coordinator {
    /// One planning round: up to [`planner::DRAFT_ATTEMPTS`] drafts, the later ones told what was
    /// wrong with the earlier. Installs the first valid plan. `requested`: the round's first
    /// `plan_requested` is committed already (a new run's, by [`Self::open`]).
    pub(super) async fn plan_round(
        &mut self,
        replan: Option<ReplanInfo>,
        requested: bool,
    ) -> Result<Step<()>, LogError> {
        let traces = &self.services.traces;
        let span = spans::plan(traces, self.log.state(), &replan);
        let scope = span.as_ref().and_then(|span| {
            let inputs = || traces.secret_values(&Value::Object(self.envelope.inputs.clone()));
            traces.scope(Some(span.id()), self.log.run_id().as_str(), inputs)
        });
        let asked_before = self.log.state().planner_attempts.saturating_sub(u32::from(requested));
        let step = self.drafts(replan, requested, scope).await;
        let state = self.log.state();
        let failed = state.end.as_ref().filter(|end| end.error.is_some()).map(|end| end.error_summary());
        spans::plan_ended(span, state.planner_attempts.saturating_sub(asked_before), failed);
        step
    }

    /// The drafts of a planning round (in `scope`, when the run is traced).
    async fn drafts(
        &mut self,
        replan: Option<ReplanInfo>,
        mut requested: bool,
        scope: Option<SpanScope>,
    ) -> Result<Step<()>, LogError> {
        let phase = planning::phase(&replan);
        if !requested {
            self.capabilities = self.services.registry.snapshot();
        }
        let mut rejected: Vec<Diagnostic> = Vec::new();
        for _ in 0..planner::DRAFT_ATTEMPTS {
            // Each draft is a model call: none starts once the budget is reached.
            if let Some(reached) = self.budget_reached() {
                return self.over_budget(reached, BudgetPhase::Planning, replan, Vec::new()).await.map(|_| Step::Ended);
            }
            if !std::mem::take(&mut requested) {
                let request = planning::request(&self.run(), phase, replan.clone());
                self.stage(vec![request])?;
            }
            let attempt = self.log.state().planner_attempts;
            let (draft, model) = match self.draft_with_retries(&replan, &rejected, &scope).await? {
                Ok(drafted) => drafted,
                Err(failure) => {
                    return self.fail(failure.detail("attempt", attempt), Vec::new()).await.map(|_| Step::Ended);
                }
            };
            let compiled = draft
                .map_err(|diagnostic| vec![diagnostic])
                .and_then(|draft| planning::compile(&self.run(), &draft, attempt, phase, &model));
            match compiled {
                Ok(plan) => {
                    let events = planning::install(&self.run(), plan, replan);
                    self.stage(events)?;
                    if self.envelope.approval.plan {
                        self.log.record(vec![plan_approval(&self.run())]).await?;
                        return Ok(Step::Ended);
                    }
                    return Ok(Step::Continue(()));
                }
                Err(diagnostics) => {
                    rejected = diagnostics.clone();
                    // Committed with what follows at once: the next `plan_requested`, or the failure.
                    self.stage(vec![planning::rejected(attempt, phase, diagnostics)])?;
                }
            }
        }
        self.fail(planning::no_valid_plan(&rejected), Vec::new()).await.map(|_| Step::Ended)
    }

    /// Asks the planner, retrying transient failures with backoff (each retry announced by a
    /// `retry` frame). A permanent failure, or the last transient one, is returned as the run's
    /// failure.
    async fn draft_with_retries(
        &mut self,
        replan: &Option<ReplanInfo>,
        rejected: &[Diagnostic],
        scope: &Option<SpanScope>,
    ) -> Result<Drafted, LogError> {
        let mut backoff = self.retry.backoff();
        loop {
            let waits = self.before_waiting().await?;
            // Boxed: the call is kilobytes of state, which the coordinator's own future would
            // otherwise hold for the whole run (and every open run has one).
            let asking = self.ask_planner(replan, rejected);
            let asked = match scope.clone() {
                Some(scope) => waits.until(Box::pin(scope.enter(asking))).await,
                None => waits.until(Box::pin(asking)).await,
            };
            let asked = match asked {
                Ok(asked) => asked,
                Err(interrupt) => return Ok(Err(self.interrupted(interrupt))),
            };
            let called = asked.called;
            self.stage(fallbacks(RetryScope::Planner, None, called.fallbacks))?;
            self.log.called(Caller::Planner, called.usage);
            let error = match called.result {
                Ok(draft) => return Ok(Ok((draft, asked.model))),
                Err(error) => error,
            };
            let transient = error.is_transient();
            let next = if transient { backoff.next_retry(error.retry_after()) } else { None };
            let Some(delay) = next else {
                return Ok(Err(planning::planner_failed(&error, transient, self.retry.max_retries)));
            };
            self.stage(vec![retry(RetryScope::Planner, None, delay, &error)])?;
            let waits = self.before_waiting().await?;
            if let Err(interrupt) = waits.until(tokio::time::sleep(delay.delay)).await {
                return Ok(Err(self.interrupted(interrupt)));
            }
        }
    }

    async fn ask_planner(&self, replan: &Option<ReplanInfo>, rejected: &[Diagnostic]) -> planner::Asked {
        let capabilities: Vec<_> = self.capabilities.values().cloned().collect();
        let run = self.run();
        let budget = run.state.budget.map(|limits| limits.prompt_lines(&self.log.spent())).unwrap_or_default();
        let input = PromptInput {
            envelope: &self.envelope,
            budget: &budget,
            capabilities: &capabilities,
            facet_catalog: self.services.facets.definitions(),
            replan: planning::replan_prompt(&run, replan),
            rejected_draft: rejected,
        };
        let planner = &self.services.planner;
        let chain = planner.pool().chain(&self.envelope.models.planner).ok().filter(|chain| !chain.is_empty());
        planner.draft(&input, self.timeouts.model_call, chain.as_deref()).await
    }
}

/// The request for an operator's approval of the run's current plan version, before any of its
/// steps runs (`policies.approval.plan: "required"`): of each plan the planner gives, and of a
/// fork's first (`Coordinator::open_fork`).
pub(super) fn plan_approval(run: &Run<'_>) -> Event {
    approval(run, HitlSubject::Plan, Value::Null)
}
