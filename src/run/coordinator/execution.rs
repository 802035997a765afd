//! Execution: the plan's ready nodes run together (up to `limits.max_concurrent_nodes`) as
//! futures that hand their capability's reply back to the coordinator's loop, which records it.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};

use super::{Coordinator, Held, Interrupt, Step};
use crate::capability::{CapabilityError, Reply, Signal};
use crate::condition;
use crate::events::payload::{BudgetPhase, ExecutorType, ReplanInfo, RetryScope};
use crate::plan::{NodeId, NodeStatus, PlanNode};
use crate::run::decide::post_conditions::{self, Failed as PostConditionsFailed};
use crate::run::decide::{Effect, Failure, Outcome, ending, execution, node_errors, policies, signals};
use crate::run::log::LogError;
use crate::run::spans::{self, AttemptSpan};
use crate::run::usage::Caller;
use crate::traces::{OpenSpan, SpanScope};
use flexrun_core::usage::Metered;

/// A node's capability call in flight: it returns the node's id with the reply (and the usage
/// of its model call), and the attempt's span if the run is traced.
type NodeRun = BoxFuture<'static, (NodeId, Metered<Result<Reply, CapabilityError>>, Option<OpenSpan>)>;

impl Coordinator {
    /// Runs every pending node of the current plan, independent ones concurrently. After a node
    /// fails no new node starts; the ones in flight finish and are recorded, then the run fails.
    /// After a granted replan (a REPLAN signal, a runtime policy, failed post-conditions) the
    /// same, then the replan is returned. `Continue(None)`: every node completed.
    pub(super) async fn execute(&mut self) -> Result<Step<Option<ReplanInfo>>, LogError> {
        let Some(plan) = self.log.state().plan().cloned() else {
            let failure = Failure::new("internal_error", "no plan to execute");
            return self.fail(failure, Vec::new()).await.map(|_| Step::Ended);
        };
        let first = match &self.log.state().policy_follow_up {
            Some(decided) => policies::follow_up(&self.run(), decided),
            None => policies::on_start(&self.run()),
        };
        match self.decided(first)? {
            Effect::Continue => {}
            Effect::Replan(replan) => return self.replan(replan),
            Effect::Failed(failure) => return self.fail(failure, Vec::new()).await.map(|_| Step::Ended),
        }
        let max_running = self.services.settings.limits.max_concurrent_nodes.max(1);
        self.held = Held::default();
        let mut running: FuturesUnordered<NodeRun> = FuturesUnordered::new();
        let mut first_failure: Option<Failure> = None;
        let mut replan_asked: Option<ReplanInfo> = None;
        loop {
            let stopping = first_failure.is_some() || replan_asked.is_some() || self.log.claim().stop_requested();
            if !stopping && !self.log.state().awaiting_policy() {
                let ready = self.ready_within_budget(max_running - running.len());
                if !ready.is_empty() {
                    running.extend(self.start_nodes(&ready)?);
                }
            }
            // With nothing running the loop ends, and what is staged (the last completion)
            // commits with the goal evaluation that follows at once. A cancel asked for before
            // anything ran (or after the last node) is taken by the wait below, which sees it first.
            if running.is_empty() && !self.log.claim().stop_requested() {
                break;
            }
            let waits = self.before_waiting().await?;
            let (node_id, called, span) = match waits.until(running.next()).await {
                Ok(Some(next)) => next,
                Ok(None) => break,
                Err(interrupt) => {
                    let failure = match (interrupt, first_failure) {
                        (Interrupt::Deadline, Some(failure)) => failure,
                        (interrupt, _) => self.interrupted(interrupt),
                    };
                    let events = ending::stopped(self.log.state(), failure);
                    self.stage(events)?;
                    self.log.commit().await?;
                    self.log_end();
                    return Ok(Step::Ended);
                }
            };
            let mut called = called;
            let fallbacks = std::mem::take(&mut called.fallbacks);
            self.stage(execution::fallbacks(RetryScope::Capability, Some(node_id.as_str()), fallbacks))?;
            self.log.called(Caller::Node(node_id.to_string()), called.usage);
            let Some(node) = plan.node(&node_id).cloned() else { continue };
            let attempt = AttemptSpan::of(span, &called.result);
            // While a replan is on its way, the plan is being replaced: no policy is looked at and
            // a further REPLAN signal asks for nothing more.
            let replacing = replan_asked.is_some();
            let effect = self.on_reply(&node, called.result, replacing, first_failure.is_none(), &mut running)?;
            attempt.end(self.log.state().nodes.get(&node_id).copied());
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
            return self.fail(failure, Vec::new()).await.map(|_| Step::Ended);
        }
        if let Some(replan) = replan_asked {
            return self.replan(replan);
        }
        if let Some(reached) = self.held.reached {
            let held = std::mem::take(&mut self.held.nodes);
            let reached = self.budget_reached().unwrap_or(reached);
            return self.over_budget(reached, BudgetPhase::Execution, None, held).await.map(|_| Step::Ended);
        }
        match execution::settled(&self.run()) {
            execution::Settled::Done => Ok(Step::Continue(None)),
            execution::Settled::Pause(event) => {
                self.log.record(vec![event]).await?;
                Ok(Step::Ended)
            }
            execution::Settled::Deadlock(failure) => self.fail(failure, Vec::new()).await.map(|_| Step::Ended),
        }
    }

    /// Records what `node`'s reply comes to, and how the run goes on. `may_retry`: no node has
    /// failed, so a transient failure may be retried.
    fn on_reply(
        &mut self,
        node: &PlanNode,
        result: Result<Reply, CapabilityError>,
        replacing: bool,
        may_retry: bool,
        running: &mut FuturesUnordered<NodeRun>,
    ) -> Result<Effect, LogError> {
        let error = match result {
            Ok(Reply::Output(output)) => return self.on_output(node, output, replacing, running),
            Ok(Reply::Signal(Signal::Replan { .. })) if replacing => return Ok(Effect::Continue),
            Ok(Reply::Signal(signal)) => {
                self.node_retries.remove(&node.id);
                let outcome = signals::on_signal(&self.run(), node, signal);
                return self.decided(outcome);
            }
            Err(error) => error,
        };
        if error.is_transient() && may_retry {
            let policy = self.retry;
            let backoff = self.node_retries.entry(node.id.clone()).or_insert_with(|| policy.backoff());
            if let Some(delay) = backoff.next_retry(error.retry_after()) {
                if self.hold(node) {
                    return Ok(Effect::Continue);
                }
                self.stage(vec![execution::retry(RetryScope::Capability, Some(node.id.to_string()), delay, &error)])?;
                running.push(self.run_node(node, delay.delay));
                return Ok(Effect::Continue);
            }
        }
        self.node_retries.remove(&node.id);
        let outcome = node_errors::on_node_error(&self.run(), node, &error);
        self.decided(outcome)
    }

    /// A node's output: checked against its capability's post-conditions, then recorded (and the
    /// `onNodeComplete` policies looked at) or retried.
    fn on_output(
        &mut self,
        node: &PlanNode,
        output: serde_json::Value,
        replacing: bool,
        running: &mut FuturesUnordered<NodeRun>,
    ) -> Result<Effect, LogError> {
        let results = post_conditions::results(&self.run(), node, &output);
        if !condition::all_satisfied(&results) {
            // While a replan is on its way the node is left to it.
            if replacing {
                return Ok(Effect::Continue);
            }
            return match post_conditions::failed(&self.run(), node, &output, results) {
                PostConditionsFailed::Retry(events) => {
                    self.stage(events)?;
                    if !self.hold(node) {
                        running.push(self.run_node(node, Duration::ZERO));
                    }
                    Ok(Effect::Continue)
                }
                PostConditionsFailed::Decided(outcome) => {
                    self.node_retries.remove(&node.id);
                    self.decided(outcome)
                }
            };
        }
        self.node_retries.remove(&node.id);
        let outcome = execution::completed(&self.run(), node, output, results);
        match self.decided(outcome)? {
            Effect::Continue if !replacing => {
                let outcome = policies::on_node_complete(&self.run(), node);
                self.decided(outcome)
            }
            effect => Ok(effect),
        }
    }

    /// Stages a decision's events and returns its effect.
    fn decided(&mut self, outcome: Outcome) -> Result<Effect, LogError> {
        self.stage(outcome.events)?;
        Ok(outcome.effect)
    }

    /// A granted replan starts: its `policy_triggered` is staged, committed with the replan's
    /// first `plan_requested`.
    fn replan(&mut self, replan: ReplanInfo) -> Result<Step<Option<ReplanInfo>>, LogError> {
        let event = signals::announce(&self.run(), &replan);
        self.stage(vec![event])?;
        Ok(Step::Continue(Some(replan)))
    }

    /// The nodes that may start now, at most `capacity`; once the budget is reached, without
    /// those whose capability calls a model: they wait (pending) for an operator to raise it.
    fn ready_within_budget(&mut self, capacity: usize) -> Vec<PlanNode> {
        let Some(reached) = self.budget_reached() else { return execution::ready(&self.run(), capacity) };
        let (held, go): (Vec<PlanNode>, Vec<PlanNode>) =
            execution::ready(&self.run(), usize::MAX).into_iter().partition(|node| self.calls_a_model(node));
        if !held.is_empty() {
            self.held.reached.get_or_insert(reached);
        }
        go.into_iter().take(capacity).collect()
    }

    /// Holds back `node`'s next attempt if it would call a model and the budget is reached: it
    /// runs again once the budget allows (`budget_exceeded.heldNodes`).
    fn hold(&mut self, node: &PlanNode) -> bool {
        let Some(reached) = self.budget_reached().filter(|_| self.calls_a_model(node)) else { return false };
        self.held.reached.get_or_insert(reached);
        self.held.nodes.push(node.id.to_string());
        true
    }

    fn calls_a_model(&self, node: &PlanNode) -> bool {
        self.capabilities.get(&node.capability_id).is_some_and(|c| c.executor.executor_type() == ExecutorType::Ai)
    }

    /// Stages the `node_start` frames of `nodes` and returns the calls of their capabilities
    /// (they run once committed, at the next wait). A human node waits for its task instead.
    fn start_nodes(&mut self, nodes: &[PlanNode]) -> Result<Vec<NodeRun>, LogError> {
        let events = execution::start(&self.run(), nodes);
        self.stage(events)?;
        let state = self.log.state();
        let calls: Vec<PlanNode> =
            nodes.iter().filter(|n| state.nodes.get(&n.id) == Some(&NodeStatus::Running)).cloned().collect();
        Ok(calls.iter().map(|node| self.run_node(node, Duration::ZERO)).collect())
    }

    /// The future that runs `node`'s capability after `delay`.
    fn run_node(&self, node: &PlanNode, delay: Duration) -> NodeRun {
        let capability = self.capabilities.get(&node.capability_id).cloned();
        let mut bundle = execution::bundle(&self.run(), node);
        bundle.attempt = 1 + self.node_retries.get(&node.id).map_or(0, |retries| retries.attempts());
        let executors = self.services.executors.clone();
        let timeouts = self.timeouts;
        let node_id = node.id.clone();
        let (mut span, scope) = self.attempt_span(node, capability.as_deref(), &bundle);
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
                span.as_mut().map(OpenSpan::starts_now);
            }
            let call = async {
                match capability {
                    Some(capability) => executors.run(&capability, &bundle, &timeouts).await,
                    None => Metered::unmetered(Err(executors.unregistered(&bundle.capability_id))),
                }
            };
            let result = match scope {
                Some(scope) => scope.enter(call).await,
                None => call.await,
            };
            (node_id, result, span)
        })
    }

    /// The span of a step attempt and the scope its capability runs in, if the run is traced.
    fn attempt_span(
        &self,
        node: &PlanNode,
        capability: Option<&crate::capability::Capability>,
        bundle: &crate::capability::ContextBundle,
    ) -> (Option<OpenSpan>, Option<SpanScope>) {
        let (traces, state) = (&self.services.traces, self.log.state());
        let executor = capability.map(|c| c.executor.executor_type());
        let inputs = || serde_json::Value::Object(bundle.inputs.clone());
        let span = spans::tool(traces, state, node, executor, bundle.attempt, inputs);
        let scope = span.as_ref().and_then(|span| spans::scope(traces, state, span, &inputs()));
        (span, scope)
    }
}
