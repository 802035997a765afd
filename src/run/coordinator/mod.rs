//! The run coordinator: drives one run from its first plan to `complete`, doing the I/O the
//! run's decisions ([`super::decide`]) ask for — planner calls, capability calls, waits — and
//! recording every event through the run's log ([`RunLog`]), whose state it reads.
//!
//! plan → execute the DAG (independent nodes concurrently) → compose the output → evaluate goal
//! conditions → on failure replan with a `GOAL CONDITION REPAIR` section, within the budget.
//!
//! One rule keeps frames durable before anyone sees them: events are staged as they are decided,
//! and everything staged is committed before every wait (a model call, a node, a backoff) and at
//! every end. `planning` holds the planner calls; `execution` the nodes' calls and replies.

mod execution;
mod planning;

use std::future::Future;
use std::sync::Arc;

use chrono::Utc;
use tokio::sync::watch;

use super::decide::{self, Effect, Failure, Run, ending, goals, node_errors};
use super::log::{LogError, RunLog};
use super::operator::Actor;
use super::projection::RowWrite;
use super::spans;
use crate::budget::{OnExceeded, Reached};
use crate::capability::Capabilities;
use crate::envelope::TaskEnvelope;
use crate::events::Event;
use crate::events::payload::{BudgetPhase, FailedNode, ReplanInfo};
use crate::excerpt;
use crate::hash::HashMap;
use crate::plan::NodeId;
use crate::replan_budget::ReplanLimits;
use crate::retry::{Backoff, RetrySchedule};
use crate::services::Services;
use crate::store::StoreError;
use crate::timeouts::Timeouts;
use flexrun_core::run::fork::ForkPlan;

/// What a resumed coordinator does first.
#[derive(Debug, Clone, PartialEq)]
pub enum Resume {
    /// Ask the planner: for a first plan, or again for the replan this reason asked for.
    Plan(Option<ReplanInfo>),
    /// Ask the planner for a new run's first plan: its `plan_requested` was committed with the
    /// run's creation.
    Requested,
    /// Run the current plan's unfinished nodes, then evaluate the goal conditions.
    Execute,
    /// A node's failure was committed before the run could go on: it fails the run or asks for a
    /// repair replan, as it would have live.
    NodeFailed(FailedNode),
}

/// What a phase of the run came to.
enum Step<T> {
    Continue(T),
    /// The coordinator's work is done: the run ended (its `complete` frame is committed) or it
    /// waits for an operator.
    Ended,
}

/// Why a wait was cut short.
enum Interrupt {
    /// The run reached its time limit.
    Deadline,
    /// An operator cancelled the run.
    Cancelled(Actor),
}

/// What every wait of the coordinator also watches: the run's time limit and a cancel.
struct Waits {
    stop: watch::Receiver<Option<Actor>>,
    deadline: tokio::time::Instant,
}

impl Waits {
    /// Waits for `work`, unless the run reaches its time limit or is cancelled first.
    async fn until<F: Future>(mut self, work: F) -> Result<F::Output, Interrupt> {
        tokio::select! {
            biased;
            Ok(actor) = self.stop.wait_for(Option::is_some) => {
                Err(Interrupt::Cancelled(actor.clone().unwrap_or_default()))
            }
            done = tokio::time::timeout_at(self.deadline, work) => done.map_err(|_| Interrupt::Deadline),
        }
    }
}

pub(super) struct Coordinator {
    services: Arc<Services>,
    envelope: Arc<TaskEnvelope>,
    log: RunLog,
    replan_limits: ReplanLimits,
    retry: RetrySchedule,
    timeouts: Timeouts,
    /// When the run reaches its time limit (`timeouts.run` after its start, or after the last
    /// operator decision: time spent waiting for an operator does not count).
    deadline: tokio::time::Instant,
    /// Retries left for nodes that failed transiently, by node id.
    node_retries: HashMap<NodeId, Backoff>,
    /// The capabilities as registered when the current planning round began.
    capabilities: Arc<Capabilities>,
    /// What the budget held back while the current plan's nodes ran.
    held: Held,
}

/// What the budget held back during an execution pass: the limit reached, and the nodes whose
/// next attempt (a retry) did not start.
#[derive(Debug, Default)]
struct Held {
    reached: Option<Reached>,
    nodes: Vec<String>,
}

impl Coordinator {
    /// A coordinator that carries on from where `log`'s state stands. Boxed: [`Self::drive`]
    /// takes it so, as an async fn stores its arguments twice (once as passed, once as moved into
    /// its body), and every open run has one.
    pub(super) fn new(services: Arc<Services>, envelope: Arc<TaskEnvelope>, log: RunLog) -> Box<Self> {
        // The caps the run was started with (its `start` frame), whatever the configuration says now.
        let replan_limits = log
            .state()
            .replan_limits
            .unwrap_or_else(|| ReplanLimits::resolve(&envelope.replan, &services.settings.replan));
        let retry = RetrySchedule::resolve(&envelope.retry, &services.settings.retry);
        let timeouts = Timeouts::resolve(&envelope.timeouts, services.settings.timeouts());
        let state = log.state();
        let now = Utc::now();
        let started = state.started_at.unwrap_or(now);
        let since = state.operator_at.map_or(started, |at| at.max(started));
        let elapsed = (now - since).to_std().unwrap_or_default();
        let deadline = tokio::time::Instant::now() + timeouts.run.saturating_sub(elapsed);
        Box::new(Self {
            capabilities: services.registry.snapshot(),
            services,
            envelope,
            log,
            replan_limits,
            retry,
            timeouts,
            deadline,
            node_retries: HashMap::default(),
            held: Held::default(),
        })
    }

    /// The run this coordinator drives and the number of the claim it holds.
    pub(super) fn owner(&self) -> (super::id::RunId, u64) {
        (self.log.run_id().clone(), self.log.claim().id())
    }

    /// The run as its decisions see it, now.
    fn run(&self) -> Run<'_> {
        Run {
            state: self.log.state(),
            envelope: &self.envelope,
            capabilities: &self.capabilities,
            limits: self.services.settings.limits.run_limits(),
            replan_limits: self.replan_limits,
            facets: &self.services.facets,
            now: Utc::now(),
        }
    }

    /// Runs to the end, starting with `from`. A database failure stops the coordinator where it
    /// is: the run keeps its last committed state (and is resumed from it after a restart).
    pub(super) async fn drive(mut self: Box<Self>, from: Resume) {
        use futures::FutureExt;
        use tracing::Instrument;
        let run_id = self.log.run_id().to_string();
        // A traced run's log lines carry its trace and root span: a line leads to its trace.
        let span = match self.log.state().trace {
            Some(trace) => tracing::info_span!("run", trace_id = %trace.trace_id, span_id = %trace.span_id),
            None => tracing::Span::none(),
        };
        let driven = std::panic::AssertUnwindSafe(self.run_to_end(from)).catch_unwind().instrument(span.clone()).await;
        let _entered = span.enter();
        match driven {
            Ok(Ok(())) => {}
            Ok(Err(LogError::Draining)) => tracing::info!(%run_id, "the node drains: the run is handed back"),
            Ok(Err(LogError::Store(StoreError::Fenced(_)))) => {
                tracing::warn!(%run_id, "the run's lease moved to another node: this node stops driving it")
            }
            Ok(Err(error)) => {
                tracing::error!(%run_id, error = %excerpt::log(error), "run coordinator stopped on a database error")
            }
            Err(_) => tracing::error!(%run_id, "run coordinator panicked; the run keeps its last committed state"),
        }
        // Whatever happened, nobody waits forever for frames that will not come; dropping the log
        // releases the run's claim.
        self.log.settle();
    }

    /// [`Self::drive`] for a run picked up after a restart: first a `log` frame saying so, and
    /// which interrupted nodes run again.
    pub(super) async fn resume(mut self: Box<Self>, from: Resume) {
        let state = self.log.state();
        let interrupted = state.nodes_in(crate::plan::NodeStatus::Running);
        let event = decide::execution::resumed(state.status, &interrupted);
        match self.log.record(vec![event]).await {
            Ok(()) => self.drive(from).await,
            Err(error) => {
                tracing::error!(run_id = %self.log.run_id(), error = %excerpt::log(error), "could not resume the run");
                self.log.settle();
            }
        }
    }

    /// Creates a new run in one commit: its row (`planning` from the start), its `start` frame and
    /// the first `plan_requested`. Then [`Self::drive`] it from [`Resume::Requested`].
    pub(super) async fn open(&mut self, start: Event) -> Result<(), LogError> {
        self.stage(vec![start])?;
        let request = decide::planning::request(&self.run(), crate::plan::Phase::Initial, None);
        self.log.record(vec![request]).await
    }

    /// Creates a fork in one commit: its row (`running`), its `start` frame, the parent's plan
    /// version as its first and the `node_complete` of each node it reuses. Then [`Self::drive`]
    /// it from [`Resume::Execute`] — unless it waits for its plan's approval ([`Self::waits`]).
    ///
    /// A fork obeys its envelope's `policies.approval.plan` as a run does each plan it is given:
    /// when a step of the plan is left to run, the same commit asks an operator to approve it
    /// (the run is created `awaiting_hitl`). Approvals are not inherited: the parent's operator
    /// approved that plan for the parent — its envelope, its outputs, its caller — and a fork
    /// may change each; a crash can never leave a fork whose approval was not asked for.
    pub(super) async fn open_fork(&mut self, start: Event, fork: ForkPlan) -> Result<(), LogError> {
        self.stage(vec![start])?;
        let now = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let runs_a_step = fork.plan.nodes.iter().any(|node| node.status != crate::plan::NodeStatus::Completed);
        self.stage(fork.frames(self.log.run_id().as_str(), &now))?;
        if self.envelope.approval.plan && runs_a_step {
            self.stage(vec![planning::plan_approval(&self.run())])?;
        }
        self.log.commit().await
    }

    /// Whether the run waits for an operator (or ended): no coordinator drives it now.
    pub(super) fn waits(&self) -> bool {
        !self.log.state().status.is_active()
    }

    /// Lets go of a run without driving it: one never created (its first commit failed), or one
    /// created waiting for an operator ([`Self::waits`]). Followers' streams end once caught up.
    pub(super) fn let_go(self: Box<Self>) {
        self.log.settle();
    }

    /// Each phase's future is boxed: only the phase under way takes its memory, not the largest
    /// of them for the whole run (with thousands of open runs, that adds up).
    async fn run_to_end(&mut self, from: Resume) -> Result<(), LogError> {
        let mut next = from;
        loop {
            next = match next {
                Resume::Plan(replan) => match Box::pin(self.plan_round(replan, false)).await? {
                    Step::Continue(()) => Resume::Execute,
                    Step::Ended => return Ok(()),
                },
                Resume::Requested => match Box::pin(self.plan_round(None, true)).await? {
                    Step::Continue(()) => Resume::Execute,
                    Step::Ended => return Ok(()),
                },
                Resume::Execute => match Box::pin(self.execute()).await? {
                    Step::Continue(Some(replan)) => Resume::Plan(Some(replan)),
                    Step::Continue(None) => match Box::pin(self.evaluate_goals()).await? {
                        Step::Continue(replan) => Resume::Plan(Some(replan)),
                        Step::Ended => return Ok(()),
                    },
                    Step::Ended => return Ok(()),
                },
                Resume::NodeFailed(failed) => match node_errors::after_node_error(&self.run(), &failed) {
                    Effect::Replan(replan) => {
                        self.stage(vec![decide::signals::announce(&self.run(), &replan)])?;
                        Resume::Plan(Some(replan))
                    }
                    Effect::Failed(failure) => return Box::pin(self.fail(failure, Vec::new())).await,
                    Effect::Continue => Resume::Execute,
                },
            };
        }
    }

    /// Stages `events`: applied to the run's state now, committed before the next wait.
    fn stage(&mut self, events: Vec<Event>) -> Result<(), LogError> {
        Ok(self.log.stage(events)?)
    }

    /// Commits what is staged, then returns what a wait must also watch. Every wait goes through
    /// here, so no frame waits on a call.
    async fn before_waiting(&mut self) -> Result<Waits, LogError> {
        self.log.commit().await?;
        if self.log.claim().draining() {
            return Err(LogError::Draining);
        }
        Ok(Waits { stop: self.log.claim().stop.clone(), deadline: self.deadline })
    }

    /// How the run ends after `interrupt`.
    fn interrupted(&self, interrupt: Interrupt) -> Failure {
        match interrupt {
            Interrupt::Deadline => ending::timed_out(self.timeouts.run.as_secs()),
            Interrupt::Cancelled(actor) => ending::cancelled(&actor),
        }
    }

    /// Composes the output and evaluates the goal conditions: the run completes, waits for its
    /// result's approval, fails, or replans (the repair's frames are committed with the replan
    /// round's first `plan_requested`).
    async fn evaluate_goals(&mut self) -> Result<Step<ReplanInfo>, LogError> {
        let started = std::time::SystemTime::now();
        let evaluated = goals::evaluate(&self.run());
        spans::goal_round(&self.services.traces, self.log.state(), started, evaluated.record.as_ref());
        self.stage(evaluated.events)?;
        let run_id = self.log.run_id().as_str();
        let record = evaluated.record.map(|evaluation| RowWrite::evaluation(run_id, evaluation));
        self.log.stage_rows(record);
        match evaluated.then {
            goals::Then::Replan(replan) => Ok(Step::Continue(replan)),
            goals::Then::Stop => {
                self.log.commit().await?;
                self.log_end();
                Ok(Step::Ended)
            }
        }
    }

    /// Ends the run as failed (or cancelled): `prelude`, then `complete`.
    async fn fail(&mut self, failure: Failure, prelude: Vec<Event>) -> Result<(), LogError> {
        let events = ending::failed(self.log.state(), failure, prelude);
        self.stage(events)?;
        self.log.commit().await?;
        self.log_end();
        Ok(())
    }

    /// The limit of its budget the run has reached, if any: no model call starts then.
    fn budget_reached(&self) -> Option<Reached> {
        let limits = self.log.state().budget?;
        limits.reached(&self.log.spent())
    }

    /// The run reached its budget in `phase` (`replan`: the replan a planning round was for;
    /// `held`: nodes whose next attempt was held back):
    /// it waits for an operator to raise it, or fails, as its budget says.
    async fn over_budget(
        &mut self,
        reached: Reached,
        phase: BudgetPhase,
        replan: Option<ReplanInfo>,
        held: Vec<String>,
    ) -> Result<(), LogError> {
        let spent = self.log.spent();
        let (events, failure) = decide::budget::exceeded(&self.run(), reached, phase, replan, held, spent);
        let action = match failure {
            Some(failure) => {
                self.fail(failure, events).await?;
                OnExceeded::Fail
            }
            None => {
                self.log.record(events).await?;
                OnExceeded::Pause
            }
        };
        crate::telemetry::budget_exceeded(reached.limit.as_str(), action.as_str());
        Ok(())
    }

    /// Logs how the run ended, if it did.
    fn log_end(&self) {
        let state = self.log.state();
        if let Some(end) = state.end.as_ref().filter(|end| end.error.is_some()) {
            let (code, message) = end.error_summary();
            let (code, message) = (excerpt::log(code), excerpt::log(message));
            tracing::info!(run_id = %state.run_id, status = %state.status, %code, %message, "run ended without completing");
        }
    }
}
