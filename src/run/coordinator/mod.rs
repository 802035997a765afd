//! The run coordinator: drives one run from its first plan to `complete`.
//!
//! plan → execute the DAG (independent nodes concurrently) → compose the output → evaluate goal
//! conditions → on failure replan with a `GOAL CONDITION REPAIR` section, within the budget.
//! Every state change is committed together with the frame that reports it (see [`Recorder`]).
//!
//! This file holds the coordinator's state, its commit discipline and the execution loop; the
//! other files are the phases and side paths: `planning` (drafts → plan), `goals` (output, goal
//! conditions, completion and failure), `requests` (operator requests and pauses), `signals`
//! (capability signals), `policies` (runtime policies), `post_conditions`.

mod goals;
mod planning;
mod policies;
mod post_conditions;
mod requests;
mod signals;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{Map, Value, json};

use super::budget::{ReplanBudget, ReplanLimits};
use super::checkpoint::{Checkpoint, PolicyFollowUp, PostConditionState, Resume};
use super::context::{NodeOutput, RunContext};
use super::control::Registration;
use super::operator::{self, Actor};
use super::recorder::Recorder;
use super::status::RunStatus;
use crate::capability::{
    Capabilities, CapabilityError, Clarification, ContextBundle, Executor, PostConditionFailures, Reply, Signal,
};
use crate::condition::{self, FacetSource, GoalConditionResult};
use crate::envelope::TaskEnvelope;
use crate::events::Event;
use crate::events::payload::{Retry as RetryFrame, *};
use crate::plan::{NodeStatus, Plan, PlanNode};
use crate::planner::CompletedWork;
use crate::policy::Fired;
use crate::retry::{Backoff, Retry, RetryPolicy};
use crate::services::Services;
use crate::store::hitl;
use crate::store::plans::{self};
use crate::store::runs::{self, Outcome, Progress};
use crate::store::{DbConn, StoreError};
use crate::timeouts::Timeouts;

/// How a run that cannot go on ends.
struct Failure {
    /// `Failed`, or `Cancelled` when an operator stopped the run.
    ending: CompleteStatus,
    code: &'static str,
    message: String,
    details: Map<String, Value>,
    output: Value,
    goal_condition_results: Option<Vec<GoalConditionResult>>,
}

impl Failure {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            ending: CompleteStatus::Failed,
            code,
            message: message.into(),
            details: Map::new(),
            output: Value::Null,
            goal_condition_results: None,
        }
    }

    /// An operator cancelled the run.
    fn cancelled(actor: &Actor) -> Self {
        let error = operator::cancelled_error(actor);
        let details =
            error.as_object().cloned().unwrap_or_default().into_iter().filter(|(k, _)| k != "code" && k != "message");
        Self {
            ending: CompleteStatus::Cancelled,
            code: "cancelled",
            message: error["message"].as_str().unwrap_or_default().to_string(),
            details: details.collect(),
            output: Value::Null,
            goal_condition_results: None,
        }
    }

    fn detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_string(), value.into());
        self
    }

    fn error_json(&self) -> Value {
        let mut error =
            Map::from_iter([("code".to_string(), json!(self.code)), ("message".to_string(), json!(self.message))]);
        error.extend(self.details.clone());
        Value::Object(error)
    }
}

/// How a run goes on after a signal or a runtime policy.
enum Effect {
    /// As before (a question was asked, an event emitted, nodes reset to run again).
    Continue,
    /// A replan was granted: it starts once the nodes in flight have finished.
    Replan(ReplanInfo),
    /// The run fails (a node failed; a policy failed the run or was refused its replan).
    Failed(Failure),
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

/// What a commit changes on the run row itself.
#[derive(Debug, Clone, Copy)]
struct RunUpdate {
    to: Option<RunStatus>,
    /// Save the counters and plan version.
    progress: bool,
}

impl RunUpdate {
    const NONE: Self = Self { to: None, progress: false };

    fn status(to: RunStatus) -> Self {
        Self { to: Some(to), progress: false }
    }
}

/// The run context with the run's facts, as goal conditions read them.
struct GoalData<'a> {
    context: &'a RunContext,
    run: Value,
}

impl FacetSource for GoalData<'_> {
    fn facet_value(&self, facet: &str) -> Option<&Value> {
        self.context.facet_value(facet)
    }

    fn snapshot(&self) -> Value {
        self.context.snapshot()
    }

    fn run_facts(&self) -> Value {
        self.run.clone()
    }
}

/// How a run fails because a node did.
fn node_failure(node_id: &str, capability_id: &str, code: &str, message: &str) -> Failure {
    Failure::new("node_failed", format!("Node \"{node_id}\" failed: {message}"))
        .detail("nodeId", node_id)
        .detail("capabilityId", capability_id)
        .detail("cause", code)
}

/// The `retry` frame announcing `retry` of a call that failed with `error`.
fn retry_event(scope: &'static str, node_id: Option<String>, retry: Retry, error: &impl std::fmt::Display) -> Event {
    Event::Retry(RetryFrame {
        node_id,
        scope,
        attempt: retry.attempt,
        max_retries: retry.max_retries,
        delay_ms: retry.delay.as_millis() as u64,
        error: error.to_string(),
    })
}

/// A database write committed together with frames.
type Write = Box<dyn Fn(&mut DbConn) -> Result<(), StoreError> + Send + Sync>;

type NodeRun = BoxFuture<'static, (String, Result<Reply, CapabilityError>)>;

pub(super) struct Coordinator {
    services: Arc<Services>,
    envelope: Arc<TaskEnvelope>,
    recorder: Recorder,
    status: RunStatus,
    context: RunContext,
    budget: ReplanBudget,
    retry: RetryPolicy,
    timeouts: Timeouts,
    /// When the run reaches its time limit (`timeouts.run` after its start).
    deadline: tokio::time::Instant,
    /// Retries left for nodes that failed transiently, by node id.
    node_retries: HashMap<String, Backoff>,
    planner_attempts: u32,
    capabilities: Arc<Capabilities>,
    plan: Option<Arc<Plan>>,
    nodes: HashMap<String, NodeStatus>,
    /// Work completed in any plan version of this run, by node id, in completion order.
    completed: Vec<CompletedWork>,
    /// Goal conditions that failed last, given to nodes re-run to repair them.
    repair: Vec<GoalConditionResult>,
    /// When the run started (its `start` frame).
    started_at: DateTime<Utc>,
    /// Changes waiting for the next [`Coordinator::flush`]; see [`Coordinator::stage`].
    staged: Vec<Staged>,
    /// This coordinator's entry in [`Services::coordinators`]: how a cancel reaches it.
    registration: Registration,
    /// An operator approved the run's result already (asked once per run).
    completion_approved: bool,
    /// The questions nodes asked operators, and their answers (every node, oldest first).
    clarifications: Vec<Clarification>,
    /// What the run's runtime policies have done.
    fired: Fired,
    /// Post-condition results of completed nodes, and the attempts of nodes that failed theirs.
    post_conditions: PostConditionState,
    /// A runtime policy's `pause`/`hitl` request is open: no node starts, the run waits.
    awaiting_policy: bool,
    /// An operator decided on a policy's `hitl` request: its follow-up action is still to do.
    policy_follow_up: Option<PolicyFollowUp>,
}

/// A change to commit: frames, a status transition, the counters, other writes.
struct Staged {
    events: Vec<Event>,
    transition: Option<(RunStatus, RunStatus)>,
    progress: Option<Progress>,
    /// Set with the transition that ends the run.
    outcome: Option<Outcome>,
    write: Write,
}

impl Coordinator {
    /// A coordinator that carries on from `checkpoint` (a run just created, or one resumed).
    pub(super) fn new(
        services: Arc<Services>,
        envelope: Arc<TaskEnvelope>,
        mut recorder: Recorder,
        checkpoint: Checkpoint,
    ) -> Self {
        let limits = ReplanLimits::resolve(&envelope.replan, &services.settings.replan);
        let budget = ReplanBudget::new(limits, checkpoint.counters.replans);
        let retry = RetryPolicy::resolve(&envelope.retry, &services.settings.retry);
        let timeouts = Timeouts::resolve(&envelope.timeouts, &services.settings);
        // Time spent waiting for an operator does not count against the run's limit.
        let since = checkpoint.operator_at.map_or(checkpoint.started_at, |at| at.max(checkpoint.started_at));
        let elapsed = (Utc::now() - since).to_std().unwrap_or_default();
        let deadline = tokio::time::Instant::now() + timeouts.run.saturating_sub(elapsed);
        if let Some(plan) = &checkpoint.plan {
            recorder.set_plan_version(plan.version);
        }
        let registration = services.coordinators.register(recorder.run_id());
        Self {
            registration,
            completion_approved: checkpoint.completion_approved,
            clarifications: checkpoint.clarifications,
            fired: checkpoint.policies,
            post_conditions: checkpoint.post_conditions,
            awaiting_policy: checkpoint.policy_request_open,
            policy_follow_up: checkpoint.policy_follow_up,
            capabilities: services.registry.snapshot(),
            services,
            envelope,
            recorder,
            status: checkpoint.status,
            context: checkpoint.context,
            budget,
            retry,
            timeouts,
            deadline,
            node_retries: HashMap::new(),
            planner_attempts: checkpoint.counters.planner_attempts,
            plan: checkpoint.plan.map(Arc::new),
            nodes: checkpoint.nodes,
            completed: checkpoint.completed,
            repair: checkpoint.repair,
            started_at: checkpoint.started_at,
            staged: Vec::new(),
        }
    }

    fn run_id(&self) -> String {
        self.recorder.run_id().to_string()
    }

    /// The current plan's version (0 before the first plan).
    fn plan_version(&self) -> u32 {
        self.plan.as_ref().map_or(0, |p| p.version)
    }

    /// Runs to the end, starting with `from`. A database failure stops the coordinator where it
    /// is: the run keeps its last committed state (and is resumed from it after a restart).
    pub(super) async fn drive(mut self, from: Resume) {
        use futures::FutureExt;
        match std::panic::AssertUnwindSafe(self.run(from)).catch_unwind().await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::error!(run_id = %self.run_id(), %error, "run coordinator stopped on a database error");
            }
            Err(_) => {
                tracing::error!(run_id = %self.run_id(), "run coordinator panicked; the run keeps its last committed state")
            }
        }
        // Whatever happened, nobody waits forever for frames that will not come.
        self.release();
    }

    /// Lets go of a run that was never created (its first commit failed).
    pub(super) fn abandon(self) {
        self.release();
    }

    /// Leaves the registry of coordinators and tells followers no more frames come from here.
    fn release(&self) {
        self.services.coordinators.deregister(self.recorder.run_id(), &self.registration);
        self.recorder.settle();
    }

    async fn run(&mut self, from: Resume) -> Result<(), StoreError> {
        let mut next = from;
        loop {
            next = match next {
                Resume::Plan(replan) => match self.plan_round(replan, false).await? {
                    Step::Continue(()) => Resume::Execute,
                    Step::Ended => return Ok(()),
                },
                Resume::Requested => match self.plan_round(None, true).await? {
                    Step::Continue(()) => Resume::Execute,
                    Step::Ended => return Ok(()),
                },
                Resume::Execute => {
                    match self.execute().await? {
                        Step::Continue(Some(replan)) => {
                            next = Resume::Plan(Some(replan));
                            continue;
                        }
                        Step::Continue(None) => {}
                        Step::Ended => return Ok(()),
                    }
                    match self.evaluate_goals().await? {
                        Step::Continue(replan) => Resume::Plan(Some(replan)),
                        Step::Ended => return Ok(()),
                    }
                }
                Resume::NodeFailed(failure) => {
                    let failure =
                        node_failure(&failure.node_id, &failure.capability_id, &failure.code, &failure.message);
                    return self.fail(failure, vec![]).await;
                }
            };
        }
    }

    /// [`Self::drive`] for a run resumed after a restart: first a `log` frame saying so.
    pub(super) async fn resume(mut self, from: Resume, interrupted: Vec<String>) {
        match self.announce_resume(&interrupted).await {
            Ok(()) => self.drive(from).await,
            Err(error) => {
                tracing::error!(run_id = %self.run_id(), %error, "could not resume the run");
                self.release();
            }
        }
    }

    /// Commits a `log` frame saying the run was resumed after a restart, and which nodes run again.
    async fn announce_resume(&mut self, interrupted: &[String]) -> Result<(), StoreError> {
        let mut message = format!("Resumed after a restart (status {})", self.status);
        if !interrupted.is_empty() {
            message.push_str(&format!(
                "; {} had started but not finished and run again",
                interrupted.iter().map(|id| format!("\"{id}\"")).collect::<Vec<_>>().join(", ")
            ));
        }
        let log = Event::Log(Log {
            severity: "info".into(),
            message,
            details: Some(json!({"resumedFrom": self.status, "interruptedNodes": interrupted})),
        });
        self.commit(vec![log], RunUpdate::NONE, |_| Ok(())).await
    }

    /// Commits `events`, the change to the run row and whatever `write` does (after anything
    /// staged), in one transaction.
    async fn commit<F>(&mut self, events: Vec<Event>, update: RunUpdate, write: F) -> Result<(), StoreError>
    where
        F: Fn(&mut DbConn) -> Result<(), StoreError> + Send + Sync + 'static,
    {
        self.stage(events, update, write);
        self.flush().await
    }

    /// Queues a change for the next commit. Only for a change that a commit follows at once, with
    /// no call to wait on in between: its frames are still in the log before anyone sees them, and
    /// several changes cost one transaction. The run's status moves on right away.
    fn stage<F>(&mut self, events: Vec<Event>, update: RunUpdate, write: F)
    where
        F: Fn(&mut DbConn) -> Result<(), StoreError> + Send + Sync + 'static,
    {
        let transition = update.to.map(|to| (std::mem::replace(&mut self.status, to), to));
        let progress = update.progress.then(|| self.progress());
        self.staged.push(Staged { events, transition, progress, outcome: None, write: Box::new(write) });
    }

    /// Commits the end of the run: `events`, the terminal status `to` with the run's `outcome` and
    /// whatever `write` does, in one transaction.
    async fn commit_end<F>(
        &mut self,
        events: Vec<Event>,
        to: RunStatus,
        outcome: Outcome,
        write: F,
    ) -> Result<(), StoreError>
    where
        F: Fn(&mut DbConn) -> Result<(), StoreError> + Send + Sync + 'static,
    {
        let transition = Some((std::mem::replace(&mut self.status, to), to));
        self.staged.push(Staged { events, transition, progress: None, outcome: Some(outcome), write: Box::new(write) });
        self.flush().await
    }

    /// Commits everything staged, in order, in one transaction (nothing when nothing is staged).
    async fn flush(&mut self) -> Result<(), StoreError> {
        if self.staged.is_empty() {
            return Ok(());
        }
        let mut staged = std::mem::take(&mut self.staged);
        let events: Vec<Event> = staged.iter_mut().flat_map(|s| std::mem::take(&mut s.events)).collect();
        let run_id = self.run_id();
        self.recorder
            .record(events, move |conn| {
                for change in &staged {
                    match (change.transition, &change.progress, &change.outcome) {
                        (Some((from, to)), _, Some(outcome)) => runs::end(conn, &run_id, from, to, outcome)?,
                        (Some((from, to)), progress, None) => {
                            runs::transition(conn, &run_id, from, to, progress.as_ref())?
                        }
                        (None, Some(progress), _) => runs::save_progress(conn, &run_id, progress)?,
                        (None, None, _) => {}
                    }
                    (change.write)(conn)?;
                }
                Ok(())
            })
            .await
    }

    /// Waits for `work`, unless the run reaches its time limit or is cancelled first.
    async fn until<F: std::future::Future>(&self, work: F) -> Result<F::Output, Interrupt> {
        let mut stop = self.registration.stop.clone();
        tokio::select! {
            biased;
            Ok(actor) = stop.wait_for(Option::is_some) => Err(Interrupt::Cancelled(actor.clone().unwrap_or_default())),
            done = tokio::time::timeout_at(self.deadline, work) => done.map_err(|_| Interrupt::Deadline),
        }
    }

    /// How the run ends after `interrupt`.
    fn interrupted(&self, interrupt: Interrupt) -> Failure {
        match interrupt {
            Interrupt::Deadline => self.timed_out(),
            Interrupt::Cancelled(actor) => Failure::cancelled(&actor),
        }
    }

    /// The run was cancelled (its coordinator has not stopped yet).
    fn cancel_requested(&self) -> bool {
        self.registration.stop.borrow().is_some()
    }

    /// What `run.*` variables of conditions read.
    fn run_facts(&self) -> Value {
        json!({
            "latencyMs": (Utc::now() - self.started_at).num_milliseconds(),
            "revisionCount": self.budget.counts.total,
            "planVersion": self.plan_version(),
            "requiresHitl": self.envelope.approval.completion,
        })
    }

    /// The run's counters and plan version as they are now.
    fn progress(&self) -> Progress {
        Progress::new(self.plan_version(), self.planner_attempts, &self.budget.counts)
    }

    // ----- execution ----------------------------------------------------------------------------

    /// Runs every pending node of the current plan, independent ones concurrently. After a node
    /// fails no new node starts; the ones in flight finish and are recorded, then the run fails.
    /// After a granted replan (a capability's REPLAN signal, a runtime policy) the same, then the
    /// replan is returned.
    async fn execute(&mut self) -> Result<Step<Option<ReplanInfo>>, StoreError> {
        let Some(plan) = self.plan.clone() else {
            return self.fail(Failure::new("internal_error", "no plan to execute"), vec![]).await.map(|_| Step::Ended);
        };
        let max_running = self.services.settings.limits.max_concurrent_nodes.max(1);
        let mut running: FuturesUnordered<NodeRun> = FuturesUnordered::new();
        let first = match self.policy_follow_up.take() {
            Some(decided) => self.follow_up(decided),
            None => self.on_start(),
        };
        match first {
            Effect::Continue => {}
            Effect::Replan(replan) => {
                self.announce_replan(&replan);
                return Ok(Step::Continue(Some(replan)));
            }
            Effect::Failed(failure) => return self.fail(failure, vec![]).await.map(|_| Step::Ended),
        }
        let mut first_failure: Option<Failure> = None;
        let mut replan_asked: Option<ReplanInfo> = None;
        loop {
            if first_failure.is_none() && replan_asked.is_none() && !self.awaiting_policy && !self.cancel_requested() {
                let capacity = max_running - running.len();
                let ready: Vec<PlanNode> = plan.ready(&self.nodes).into_iter().take(capacity).cloned().collect();
                if !ready.is_empty() {
                    running.extend(self.start_nodes(&ready).await?);
                }
            }
            // Nothing staged may wait on a node; with none running, the next commit follows at once.
            if !running.is_empty() {
                self.flush().await?;
            }
            let next = match self.until(running.next()).await {
                Ok(next) => next,
                Err(interrupt) => {
                    let failure = match (interrupt, first_failure) {
                        (Interrupt::Deadline, Some(failure)) => failure,
                        (interrupt, _) => self.interrupted(interrupt),
                    };
                    return self.stop_running_nodes(failure).await.map(|_| Step::Ended);
                }
            };
            let Some((node_id, result)) = next else { break };
            let Some(node) = plan.node(&node_id).cloned() else { continue };
            // While a replan is on its way, the plan is being replaced: no policy is looked at and
            // a further REPLAN signal asks for nothing more.
            let replacing = replan_asked.is_some();
            let effect = match result {
                Ok(Reply::Output(output)) => {
                    let results = self.post_condition_results(&node, &output);
                    if !condition::all_satisfied(&results) {
                        let (effect, retry) = self.post_conditions_failed(&node, &output, results, replacing).await?;
                        running.extend(retry);
                        effect
                    } else {
                        match self.complete_node(&node, output, results).await? {
                            Some(failure) => Effect::Failed(failure),
                            None if replacing => Effect::Continue,
                            None => self.on_node_complete(&node),
                        }
                    }
                }
                Ok(Reply::Signal(Signal::Replan { .. })) if replacing => Effect::Continue,
                Ok(Reply::Signal(signal)) => self.on_signal(&node, signal).await?,
                Err(error) if error.is_transient() && first_failure.is_none() => {
                    match self.retry_node(&node, &error).await? {
                        Some(retry) => {
                            running.push(retry);
                            Effect::Continue
                        }
                        None => Effect::Failed(self.node_failed(&node, error).await?),
                    }
                }
                Err(error) => Effect::Failed(self.node_failed(&node, error).await?),
            };
            match effect {
                Effect::Continue => {}
                Effect::Replan(replan) => {
                    replan_asked.get_or_insert(replan);
                }
                Effect::Failed(failure) => {
                    first_failure.get_or_insert(failure);
                }
            }
        }
        if let Some(failure) = first_failure {
            return self.fail(failure, vec![]).await.map(|_| Step::Ended);
        }
        if let Some(replan) = replan_asked {
            self.announce_replan(&replan);
            return Ok(Step::Continue(Some(replan)));
        }
        let waiting = self.nodes.values().any(|s| matches!(s, NodeStatus::AwaitingHuman | NodeStatus::AwaitingHitl));
        if waiting || self.awaiting_policy {
            return self.await_operator().await.map(|_| Step::Ended);
        }
        let unfinished: Vec<&str> = plan
            .nodes
            .iter()
            .filter(|n| self.nodes.get(&n.id) != Some(&NodeStatus::Completed))
            .map(|n| n.id.as_str())
            .collect();
        if !unfinished.is_empty() {
            let failure =
                Failure::new("plan_deadlock", format!("no node can start; unfinished: {}", unfinished.join(", ")));
            return self.fail(failure, vec![]).await.map(|_| Step::Ended);
        }
        // The last completion stays staged: the goal evaluation that follows at once (pure, no
        // call in between) commits it together with its outcome. A run stopped in between runs
        // that node again; its completion was never committed, so nobody saw it.
        Ok(Step::Continue(None))
    }

    /// Ends a run whose nodes were running when it reached its time limit or was cancelled: each
    /// gets a `node_error` (with the failure's code) and is recorded failed or cancelled; then the
    /// run ends with `failure`.
    async fn stop_running_nodes(&mut self, failure: Failure) -> Result<(), StoreError> {
        let running: Vec<PlanNode> = match &self.plan {
            Some(plan) => {
                plan.nodes.iter().filter(|n| self.nodes.get(&n.id) == Some(&NodeStatus::Running)).cloned().collect()
            }
            None => Vec::new(),
        };
        let error = ErrorInfo { code: failure.code.into(), message: failure.message.clone() };
        let row_status = if failure.ending == CompleteStatus::Cancelled { "cancelled" } else { "failed" };
        let error_json = json!({"code": error.code, "message": error.message}).to_string();
        let mut events = Vec::new();
        let mut keys = Vec::new();
        for node in &running {
            events.push(Event::NodeError(NodeError {
                node_id: node.id.clone(),
                capability_id: node.capability_id.clone(),
                label: node.label.clone(),
                error: error.clone(),
            }));
            keys.push(self.node_key(node));
            self.nodes.insert(node.id.clone(), NodeStatus::Failed);
        }
        let at = crate::store::now();
        self.finish_failed(failure, events, move |conn| {
            keys.iter().try_for_each(|(run_id, version, node_id)| {
                plans::node_finished(conn, (run_id, *version, node_id), row_status, None, Some(&error_json), at)
            })
        })
        .await
    }

    /// How a run fails that reached its time limit.
    fn timed_out(&self) -> Failure {
        let limit = self.timeouts.run.as_secs();
        Failure::new("run_timeout", format!("The run did not finish within its time limit of {limit} s"))
            .detail("limitSeconds", limit)
    }

    /// Commits the `node_start` frames of `nodes` together and returns the futures that run their
    /// capabilities. A human node gets a task (a pending request) instead, and waits.
    async fn start_nodes(&mut self, nodes: &[PlanNode]) -> Result<Vec<NodeRun>, StoreError> {
        let started_at = Utc::now();
        let mut events = Vec::with_capacity(nodes.len());
        let mut starts = Vec::with_capacity(nodes.len());
        let mut tasks = Vec::new();
        for node in nodes {
            let capability = self.capabilities.get(&node.capability_id);
            let executor_type = capability.map_or("ai", |c| c.executor.agent_type());
            let task = match capability {
                Some(capability) if matches!(capability.executor, Executor::Human { .. }) => {
                    Some(self.human_task(node, capability, started_at)?)
                }
                _ => None,
            };
            events.push(Event::NodeStart(NodeStart {
                node_id: node.id.clone(),
                capability_id: node.capability_id.clone(),
                label: node.label.clone(),
                kind: node.kind.clone(),
                started_at: started_at.to_rfc3339_opts(SecondsFormat::Millis, true),
                executor_type,
                facets: Facets { input: node.input_facets.clone(), output: node.output_facets.clone() },
                assignment: task.as_ref().map(|(info, _)| info.context.clone()),
            }));
            let status = if task.is_some() { NodeStatus::AwaitingHuman } else { NodeStatus::Running };
            let (run_id, version, node_id) = self.node_key(node);
            starts.push((run_id, version, node_id, status));
            tasks.extend(task.map(|(_, row)| row));
        }
        let at = started_at.naive_utc();
        let rows = starts.clone();
        self.commit(events, RunUpdate::NONE, move |conn| {
            for (run_id, version, node_id, status) in &rows {
                plans::node_started(conn, (run_id, *version, node_id), status.as_str(), at)?;
            }
            tasks.iter().try_for_each(|task| hitl::insert(conn, task))
        })
        .await?;
        let mut runs = Vec::new();
        for (node, (.., status)) in nodes.iter().zip(starts) {
            if status == NodeStatus::AwaitingHuman {
                self.nodes.insert(node.id.clone(), status);
            } else {
                runs.push(self.run_node(node, Duration::ZERO));
            }
        }
        Ok(runs)
    }

    /// Grants a transient failure of `node` another attempt, if retries are left: commits a
    /// `retry` frame and returns the delayed attempt.
    async fn retry_node(&mut self, node: &PlanNode, error: &CapabilityError) -> Result<Option<NodeRun>, StoreError> {
        let policy = self.retry;
        let backoff = self.node_retries.entry(node.id.clone()).or_insert_with(|| policy.backoff());
        let Some(retry) = backoff.next_retry(error.retry_after()) else { return Ok(None) };
        let event = retry_event("capability", Some(node.id.clone()), retry, error);
        self.commit(vec![event], RunUpdate::NONE, |_| Ok(())).await?;
        Ok(Some(self.run_node(node, retry.delay)))
    }

    /// Marks `node` running and returns the future that runs its capability after `delay`.
    fn run_node(&mut self, node: &PlanNode, delay: Duration) -> NodeRun {
        self.nodes.insert(node.id.clone(), NodeStatus::Running);
        let capability = self.capabilities.get(&node.capability_id).cloned();
        let bundle = self.bundle(node);
        let executors = self.services.executors.clone();
        let timeouts = self.timeouts;
        let node_id = node.id.clone();
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let result = match capability {
                Some(capability) => executors.run(&capability, &bundle, &timeouts).await,
                None => Err(CapabilityError::NotRegistered(bundle.capability_id.clone())),
            };
            (node_id, result)
        })
    }

    /// (run id, plan version, node id): the key of a node's row in the current plan version.
    fn node_key(&self, node: &PlanNode) -> (String, i32, String) {
        (self.run_id(), self.plan_version() as i32, node.id.clone())
    }

    fn bundle(&self, node: &PlanNode) -> ContextBundle {
        let inputs: Map<String, Value> = node
            .input_facets
            .iter()
            .filter_map(|facet| self.context.facet_value(facet).map(|v| (facet.clone(), v.clone())))
            .collect();
        let plan = self.plan.as_deref();
        let prior_outputs: Map<String, Value> = plan
            .into_iter()
            .flat_map(|plan| plan.predecessors(&node.id))
            .filter_map(|id| {
                self.completed.iter().rev().find(|w| w.node_id == id).map(|w| (id.to_string(), w.output.clone()))
            })
            .collect();
        let rerun = self.completed.iter().any(|w| w.node_id == node.id);
        let repair = if rerun {
            self.repair.iter().filter(|r| node.output_facets.contains(&r.facet)).cloned().collect()
        } else {
            Vec::new()
        };
        let mut instructions = node.instructions.clone();
        instructions.extend(node.rationale.iter().map(|r| format!("Planner rationale: {r}")));
        instructions.extend(self.envelope.special_instructions.iter().cloned());
        ContextBundle {
            run_id: self.run_id(),
            node_id: node.id.clone(),
            capability_id: node.capability_id.clone(),
            objective: self.envelope.objective.clone(),
            inputs,
            instructions,
            prior_outputs,
            repair,
            clarifications: self
                .clarifications
                .iter()
                .filter(|c| c.node_id == node.id && c.answer.is_some())
                .cloned()
                .collect(),
            post_condition_failures: self.post_conditions.failing.get(&node.id).map(|(attempts, failures)| {
                PostConditionFailures {
                    failures: failures.clone(),
                    failures_so_far: *attempts,
                    max_retries: self.post_condition_budget(node, &Value::Null).1,
                }
            }),
        }
    }

    /// Records a node's output. Returns the failure if a value breaks the facet catalog.
    async fn complete_node(
        &mut self,
        node: &PlanNode,
        output: Value,
        post_results: Vec<GoalConditionResult>,
    ) -> Result<Option<Failure>, StoreError> {
        self.node_retries.remove(&node.id);
        let violations = self.services.facets.output_violations(&node.output_facets, &output);
        if !violations.is_empty() {
            return self.node_failed(node, CapabilityError::Contract(violations)).await.map(Some);
        }
        let completed_at = Utc::now();
        let at = completed_at.to_rfc3339_opts(SecondsFormat::Millis, true);
        let (run_id, version, node_id) = self.node_key(node);
        self.context.record_output(NodeOutput {
            node_id: &node.id,
            capability_id: &node.capability_id,
            plan_version: version as u32,
            output_facets: &node.output_facets,
            output: &output,
            at: &at,
        });
        let event = Event::NodeComplete(NodeComplete {
            node_id: node.id.clone(),
            capability_id: node.capability_id.clone(),
            label: node.label.clone(),
            completed_at: at,
            output: output.clone(),
            executor_type: None,
            post_condition_results: post_results.clone(),
        });
        let output_json = output.to_string();
        let results_json = (!post_results.is_empty()).then(|| serde_json::to_string(&post_results)).transpose()?;
        let finished = completed_at.naive_utc();
        self.post_conditions.passed(&node.id, &node.capability_id, post_results);
        // Committed with whatever the coordinator does next: starting the nodes this one unblocked,
        // evaluating the goals, or (while other nodes run) an immediate flush.
        self.stage(vec![event], RunUpdate::NONE, move |conn| {
            let key = (run_id.as_str(), version, node_id.as_str());
            plans::node_finished(conn, key, "completed", Some(&output_json), None, finished)?;
            results_json.as_deref().map_or(Ok(()), |results| plans::node_post_conditions(conn, key, results))
        });
        self.nodes.insert(node.id.clone(), NodeStatus::Completed);
        self.completed.retain(|w| w.node_id != node.id);
        self.completed.push(CompletedWork {
            node_id: node.id.clone(),
            stage: node.stage.clone(),
            capability_id: node.capability_id.clone(),
            output_facets: node.output_facets.clone(),
            output,
        });
        Ok(None)
    }

    /// Records a node's failure (`validation_error` first for contract violations, then
    /// `node_error`) and returns how the run fails because of it.
    async fn node_failed(&mut self, node: &PlanNode, error: CapabilityError) -> Result<Failure, StoreError> {
        let mut prelude = Vec::new();
        if let CapabilityError::Contract(violations) = &error {
            prelude.push(Event::ValidationError(ValidationError {
                node_id: Some(node.id.clone()),
                scope: "capability_output",
                errors: violations.clone(),
            }));
        }
        self.record_node_failure(node, error.code(), error.to_string(), prelude).await
    }

    /// Commits `prelude`, then the `node_error` with `code` and `message`, with the node's row
    /// failed; returns how the run fails because of it.
    async fn record_node_failure(
        &mut self,
        node: &PlanNode,
        code: &str,
        message: String,
        mut events: Vec<Event>,
    ) -> Result<Failure, StoreError> {
        self.node_retries.remove(&node.id);
        let info = ErrorInfo { code: code.to_string(), message };
        events.push(Event::NodeError(NodeError {
            node_id: node.id.clone(),
            capability_id: node.capability_id.clone(),
            label: node.label.clone(),
            error: info.clone(),
        }));
        let (run_id, version, node_id) = self.node_key(node);
        let error_json = json!({"code": info.code, "message": info.message}).to_string();
        let at = crate::store::now();
        self.commit(events, RunUpdate::NONE, move |conn| {
            plans::node_finished(conn, (&run_id, version, &node_id), "failed", None, Some(&error_json), at)
        })
        .await?;
        self.nodes.insert(node.id.clone(), NodeStatus::Failed);
        Ok(node_failure(&node.id, &node.capability_id, &info.code, &info.message))
    }
}
