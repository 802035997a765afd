//! Planning: one round of planner drafts (retried, validated, compiled) and installing the plan.

use std::sync::Arc;

use serde_json::Value;

use super::{Coordinator, Failure, RunUpdate, Step, retry_event};
use crate::events::Event;
use crate::events::payload::*;
use crate::plan::{Diagnostic, NodeStatus, Plan, PlanMetadata};
use crate::planner::{self, DraftContext, PromptInput, RequiredFacet};
use crate::run::status::RunStatus;
use crate::store::StoreError;
use crate::store::plans::{self, PlanNodeRow, PlanVersionRow};
use crate::store::runs::{self, RunRow};

impl Coordinator {
    /// Creates a new run in one commit: its row (`planning` from the start), its `start` frame and
    /// the first `plan_requested`. Then [`Self::drive`] it from [`Resume::Requested`].
    ///
    /// [`Resume::Requested`]: crate::run::checkpoint::Resume::Requested
    pub(in crate::run) async fn open(&mut self, start: Start, mut row: RunRow) -> Result<(), StoreError> {
        self.capabilities = self.services.registry.snapshot();
        let requested = self.plan_request(Phase::Initial, None);
        self.status = RunStatus::Planning;
        row.planner_attempts = self.planner_attempts as i32;
        self.commit(vec![Event::Start(start), requested], RunUpdate::NONE, move |conn| runs::insert(conn, &row)).await
    }

    /// The next planner attempt's `plan_requested`.
    fn plan_request(&mut self, phase: Phase, replan: Option<ReplanInfo>) -> Event {
        self.planner_attempts += 1;
        Event::PlanRequested(PlanRequested {
            attempt: self.planner_attempts,
            phase,
            capabilities: self.capability_summaries(),
            budget: self.budget.view(),
            replan,
        })
    }

    /// One planning round: up to [`planner::DRAFT_ATTEMPTS`] drafts, the later ones told what was
    /// wrong with the earlier. Installs the first valid plan. `requested`: the round's first
    /// `plan_requested` is committed already (a new run's, by [`Self::open`]).
    pub(super) async fn plan_round(
        &mut self,
        replan: Option<ReplanInfo>,
        mut requested: bool,
    ) -> Result<Step<()>, StoreError> {
        let phase = if replan.is_some() { Phase::Replan } else { Phase::Initial };
        if !requested {
            self.capabilities = self.services.registry.snapshot();
        }
        let mut rejected: Vec<Diagnostic> = Vec::new();
        for _ in 0..planner::DRAFT_ATTEMPTS {
            if !std::mem::take(&mut requested) {
                let event = self.plan_request(phase, replan.clone());
                let to = (self.status != RunStatus::Planning).then_some(RunStatus::Planning);
                self.commit(vec![event], RunUpdate { to, progress: true }, |_| Ok(())).await?;
            }
            let attempt = self.planner_attempts;

            let draft = match self.draft_with_retries(&replan, &rejected).await? {
                Ok(draft) => draft,
                Err(failure) => {
                    return self.fail(failure.detail("attempt", attempt), vec![]).await.map(|_| Step::Ended);
                }
            };
            let compiled = draft.map_err(|d| vec![d]).and_then(|draft| self.compile(&draft, attempt, phase));
            match compiled {
                Ok(plan) => {
                    self.install(plan, replan)?;
                    if self.envelope.approval.plan {
                        self.request_approval(HitlSubject::Plan, Value::Null, |_| Ok(())).await?;
                        return Ok(Step::Ended);
                    }
                    return Ok(Step::Continue(()));
                }
                Err(diagnostics) => {
                    rejected = diagnostics.clone();
                    // Committed with what follows at once: the next `plan_requested`, or the failure.
                    let rejected = Event::PlanRejected(PlanRejected { attempt, phase, diagnostics });
                    self.stage(vec![rejected], RunUpdate::NONE, |_| Ok(()));
                }
            }
        }
        let failure = Failure::new(
            "plan_rejected",
            format!("The planner produced no valid plan in {} attempts", planner::DRAFT_ATTEMPTS),
        )
        .detail("diagnostics", serde_json::to_value(&rejected).unwrap_or_default());
        self.fail(failure, vec![]).await.map(|_| Step::Ended)
    }

    /// Asks the planner, retrying transient failures with backoff (each retry announced by a
    /// `retry` frame). A permanent failure, or the last transient one, is returned as the run's
    /// failure.
    async fn draft_with_retries(
        &mut self,
        replan: &Option<ReplanInfo>,
        rejected: &[Diagnostic],
    ) -> Result<Result<Result<Value, Diagnostic>, Failure>, StoreError> {
        let mut backoff = self.retry.backoff();
        loop {
            let answer = match self.until(self.ask_planner(replan, rejected)).await {
                Ok(answer) => answer,
                Err(interrupt) => return Ok(Err(self.interrupted(interrupt))),
            };
            let error = match answer {
                Ok(draft) => return Ok(Ok(draft)),
                Err(error) => error,
            };
            let retry = if error.is_transient() { backoff.next_retry(error.retry_after()) } else { None };
            let Some(retry) = retry else {
                let retried = if error.is_transient() {
                    format!(" after {} retries", self.retry.max_retries)
                } else {
                    String::new()
                };
                let failure = Failure::new("planner_error", format!("The planner call failed{retried}: {error}"))
                    .detail("transient", error.is_transient());
                return Ok(Err(failure));
            };
            self.commit(vec![retry_event("planner", None, retry, &error)], RunUpdate::NONE, |_| Ok(())).await?;
            if let Err(interrupt) = self.until(tokio::time::sleep(retry.delay)).await {
                return Ok(Err(self.interrupted(interrupt)));
            }
        }
    }

    fn capability_summaries(&self) -> Vec<CapabilitySummary> {
        self.capabilities
            .values()
            .map(|c| CapabilitySummary {
                capability_id: c.id.clone(),
                display_name: c.display_name.clone(),
                status: "active",
            })
            .collect()
    }

    async fn ask_planner(
        &self,
        replan: &Option<ReplanInfo>,
        rejected: &[Diagnostic],
    ) -> Result<Result<Value, Diagnostic>, crate::llm::LlmError> {
        let capabilities: Vec<_> = self.capabilities.values().cloned().collect();
        let previous = self.plan.clone();
        let input = PromptInput {
            envelope: &self.envelope,
            capabilities: &capabilities,
            facet_catalog: self.services.facets.definitions(),
            replan: match (replan, previous.as_deref()) {
                (Some(info), Some(previous_plan)) => Some(planner::Replan {
                    reason: &info.reason,
                    failed_goal_conditions: &info.failed_goal_conditions,
                    feedback: info.feedback.as_deref(),
                    signal: info.signal.as_deref(),
                    policy: info.policy.as_deref(),
                    completed: &self.completed,
                    previous_plan,
                }),
                _ => None,
            },
            rejected_draft: rejected,
        };
        self.services.planner.draft(&input, self.timeouts.model_call).await
    }

    fn compile(&self, draft: &Value, attempt: u32, phase: Phase) -> Result<Plan, Vec<Diagnostic>> {
        let mut required: Vec<RequiredFacet> = self
            .envelope
            .output_contract
            .facets()
            .iter()
            .map(|facet| RequiredFacet { facet: facet.clone(), because: "output_contract" })
            .collect();
        for goal in &self.envelope.goal_conditions {
            required.push(RequiredFacet { facet: goal.facet.clone(), because: "goal_condition" });
        }
        let available = self.context.facet_names().cloned().collect();
        let completed = self.completed.iter().map(|w| (w.node_id.clone(), w.capability_id.clone())).collect();
        let cx = DraftContext {
            capabilities: &self.capabilities,
            available_facets: &available,
            required_facets: &required,
            completed: &completed,
            version: self.plan.as_ref().map_or(1, |p| p.version + 1),
            metadata: PlanMetadata {
                planner_model: self.services.planner.model().to_string(),
                planner_attempt: attempt,
                phase,
                draft_node_count: draft.get("nodes").and_then(Value::as_array).map_or(0, Vec::len),
            },
        };
        planner::draft::compile(draft, &cx)
    }

    /// Stores a new plan version and announces it (`plan_generated`, and `plan_updated` on a replan).
    fn install(&mut self, plan: Plan, replan: Option<ReplanInfo>) -> Result<(), StoreError> {
        let previous_version = self.plan.as_ref().map(|p| p.version);
        let version = plan.version;
        self.recorder.set_plan_version(version);
        let mut events = vec![Event::PlanGenerated(PlanGenerated {
            plan: PlanView { run_id: self.run_id(), plan: plan.clone() },
            replan: replan.clone(),
        })];
        if let (Some(previous_version), Some(info)) = (previous_version, replan) {
            events.push(Event::PlanUpdated(PlanUpdated {
                previous_version,
                version,
                trigger: Trigger { reason: info.reason.clone(), details: info.details() },
                replan: info,
                nodes: plan.nodes.clone(),
                edges: plan.edges.clone(),
            }));
        }
        let (version_row, node_rows) = self.plan_rows(&plan)?;
        self.nodes = plan.nodes.iter().map(|n| (n.id.clone(), n.status)).collect();
        self.plan = Some(Arc::new(plan));
        // What a policy of the old plan waited on was superseded with it.
        self.awaiting_policy = false;
        // Committed with the first nodes' `node_start`, which follows at once.
        let update = RunUpdate { to: Some(RunStatus::Running), progress: true };
        self.stage(events, update, move |conn| plans::insert_version(conn, &version_row, &node_rows));
        Ok(())
    }

    fn plan_rows(&self, plan: &Plan) -> Result<(PlanVersionRow, Vec<PlanNodeRow>), StoreError> {
        let run_id = self.run_id();
        let now = crate::store::now();
        let version = PlanVersionRow {
            run_id: run_id.clone(),
            version: plan.version as i32,
            plan: serde_json::to_string(plan)?,
            replan_trigger: None,
            created_at: now,
        };
        let nodes = plan
            .nodes
            .iter()
            .enumerate()
            .map(|(position, node)| {
                let carried =
                    self.completed.iter().find(|w| w.node_id == node.id && node.status == NodeStatus::Completed);
                PlanNodeRow {
                    run_id: run_id.clone(),
                    plan_version: plan.version as i32,
                    node_id: node.id.clone(),
                    position: position as i32,
                    capability_id: node.capability_id.clone(),
                    status: node.status.as_str().to_string(),
                    output: carried.map(|w| w.output.to_string()),
                    error: None,
                    started_at: None,
                    completed_at: carried.map(|_| now),
                    post_condition_results: None,
                }
            })
            .collect();
        Ok((version, nodes))
    }
}
