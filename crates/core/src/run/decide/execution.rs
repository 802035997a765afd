//! Execution bookkeeping: which nodes start, what each is given, what its reply or failure
//! records, and what the run does once no node runs.

use chrono::SecondsFormat;
use serde_json::{Map, Value, json};

use super::ending::node_failed;
use super::operator;
use super::{Effect, Failure, Outcome, Run};
use crate::capability::{Capability, CapabilityError, ContextBundle, Executor, PostConditionFailures};
use crate::condition::{FacetSource, GoalConditionResult};
use crate::events::Event;
use crate::events::payload::*;
use crate::mcp::question::ToolAnswer;
use crate::plan::{NodeStatus, PlanNode};
use crate::retry::Retry as RetryDelay;
use crate::run::state::RunState;
use crate::run::status::RunStatus;
use crate::usage::Fallback;

/// Nodes that may start now, at most `capacity`: pending, every predecessor completed, and
/// approved if they must be.
pub fn ready(run: &Run, capacity: usize) -> Vec<PlanNode> {
    let Some(plan) = run.state.plan() else { return Vec::new() };
    plan.ready(&run.state.nodes)
        .into_iter()
        .filter(|node| !awaits_approval(run, node))
        .take(capacity)
        .cloned()
        .collect()
}

/// Whether `node` waits for an operator before it starts: a step of an MCP tool that may destroy
/// (`destructiveHint`, the protocol's default), in a run whose `policies.approval.destructiveTools`
/// is `required`, not approved yet in this plan version.
fn awaits_approval(run: &Run, node: &PlanNode) -> bool {
    run.envelope.approval.destructive_tools
        && run
            .capabilities
            .get(&node.capability_id)
            .is_some_and(|c| matches!(&c.executor, Executor::Mcp(tool) if tool.hints.destructive()))
        && !run.state.approved_nodes.iter().any(|id| *id == node.id)
}

/// The request that asks an operator to let `node` (a destructive tool's step) run.
fn destructive_step_request(run: &Run, node: &PlanNode) -> Event {
    let tool = run.capabilities.get(&node.capability_id).and_then(|c| match &c.executor {
        Executor::Mcp(tool) => Some(tool),
        _ => None,
    });
    let (server, name) = tool.map_or(("", ""), |t| (t.server.as_str(), t.name.as_str()));
    let question = format!(
        "Run step \"{}\"? It calls tool `{name}` of MCP server `{server}`, which may change or delete data.",
        node.label
    );
    let context = json!({
        "capabilityId": node.capability_id, "server": server, "tool": name,
        "arguments": node.arguments, "annotations": tool.map(|t| t.hints),
    });
    let request = run.request(HitlKind::Approval, HitlSubject::Node, question, Some(node), context);
    Event::HitlRequest(HitlRequest { request, usage: None })
}

/// The `node_start` frames of `nodes`, started together. A human node's frame carries its task.
pub fn start(run: &Run, nodes: &[PlanNode]) -> Vec<Event> {
    let started_at = run.now.to_rfc3339_opts(SecondsFormat::Millis, true);
    nodes
        .iter()
        .map(|node| {
            let capability = run.capabilities.get(&node.capability_id);
            let executor_type = capability.map_or(ExecutorType::Ai, |c| c.executor.executor_type());
            let assignment = capability
                .filter(|c| matches!(c.executor, Executor::Human { .. }))
                .map(|capability| assignment(run, node, capability, &started_at));
            Event::NodeStart(NodeStart {
                node_id: node.id.to_string(),
                capability_id: node.capability_id.clone(),
                label: node.label.clone(),
                kind: node.kind.clone(),
                started_at: started_at.clone(),
                executor_type,
                facets: Facets { input: node.input_facets.clone(), output: node.output_facets.clone() },
                assignment,
                inputs: received(run, node),
            })
        })
        .collect()
}

/// The values of `node`'s input facets as it starts, each bounded; `None` when it reads none.
fn received(run: &Run, node: &PlanNode) -> Option<Map<String, Value>> {
    let inputs: Map<String, Value> = node
        .input_facets
        .iter()
        .filter_map(|facet| {
            let mut value = run.state.context.facet_value(facet)?.clone();
            crate::elide::if_larger(&mut value, NodeStart::INPUT_BYTES, || None);
            Some((facet.clone(), value))
        })
        .collect();
    Some(inputs).filter(|inputs| !inputs.is_empty())
}

/// A human node's task: what a person is asked to do, and with what.
fn assignment(run: &Run, node: &PlanNode, capability: &Capability, created_at: &str) -> Value {
    let bundle = bundle(run, node);
    let mut instructions = bundle.instructions;
    if let Executor::Human { instructions: Some(own) } = &capability.executor {
        instructions.insert(0, own.clone());
    }
    json!({
        "taskId": uuid::Uuid::now_v7().to_string(), "runId": bundle.run_id, "nodeId": node.id,
        "capabilityId": node.capability_id, "label": node.label, "status": "awaiting_submission",
        "objective": bundle.objective, "instructions": instructions, "inputs": bundle.inputs,
        "priorOutputs": bundle.prior_outputs, "outputFacets": node.output_facets,
        "outputContract": capability.registration.get("outputContract"), "createdAt": created_at,
    })
}

/// What `node`'s capability is given: its inputs, its predecessors' outputs, its instructions,
/// and what went wrong before when it runs again.
pub fn bundle(run: &Run, node: &PlanNode) -> ContextBundle {
    let state = run.state;
    let inputs: Map<String, Value> = node
        .input_facets
        .iter()
        .filter_map(|facet| state.context.facet_value(facet).map(|v| (facet.clone(), v.clone())))
        .collect();
    let prior_outputs: Map<String, Value> = state
        .plan()
        .into_iter()
        .flat_map(|plan| plan.predecessors(&node.id))
        .filter_map(|id| state.output_of(id).map(|output| (id.to_string(), output.clone())))
        .collect();
    let rerun = state.output_of(&node.id).is_some();
    let repair = if rerun {
        state.repair.iter().filter(|r| node.output_facets.contains(&r.facet)).cloned().collect()
    } else {
        Vec::new()
    };
    let mut instructions = node.instructions.clone();
    instructions.extend(node.rationale.iter().map(|r| format!("Planner rationale: {r}")));
    instructions.extend(run.envelope.special_instructions.iter().cloned());
    let post_condition_failures =
        state.post_conditions.failing.get(node.id.as_str()).map(|(attempts, failures)| PostConditionFailures {
            failures: failures.clone(),
            failures_so_far: *attempts,
            max_retries: super::post_conditions::budget(run, node, &Value::Null).1,
        });
    ContextBundle {
        run_id: state.run_id.to_string(),
        node_id: node.id.to_string(),
        capability_id: node.capability_id.clone(),
        objective: run.envelope.objective.clone(),
        inputs,
        instructions,
        prior_outputs,
        repair,
        clarifications: state
            .clarifications
            .iter()
            .filter(|c| c.node_id == node.id && c.answer.is_some())
            .cloned()
            .collect(),
        post_condition_failures,
        arguments: node.arguments.clone(),
        attempt: 1,
        tool_answer: if rerun { None } else { tool_answer(state, node) },
        models: run.envelope.models.capabilities.clone(),
    }
}

/// The answer an MCP tool node's call sends back: its last question's, once answered. A node that
/// runs again after completing starts a new call, with no answer.
fn tool_answer(state: &RunState, node: &PlanNode) -> Option<ToolAnswer> {
    let last = state.clarifications.iter().rev().find(|c| c.node_id == node.id)?;
    Some(last.tool_question.as_ref()?.answered(last.answer.as_deref()?))
}

/// What a node's accepted output records: `node_complete`, or — when a value breaks the facet
/// catalog — the node's failure.
pub fn completed(
    run: &Run,
    node: &PlanNode,
    output: Value,
    post_condition_results: Vec<GoalConditionResult>,
) -> Outcome {
    let violations = run.facets.output_violations(&node.output_facets, &output);
    if !violations.is_empty() {
        let (events, failure) = node_failed(node, &CapabilityError::Contract(violations));
        return Outcome { events, effect: Effect::Failed(failure) };
    }
    Outcome::go_on(vec![Event::NodeComplete(NodeComplete {
        node_id: node.id.to_string(),
        capability_id: node.capability_id.clone(),
        label: node.label.clone(),
        completed_at: run.now.to_rfc3339_opts(SecondsFormat::Millis, true),
        output,
        executor_type: None,
        post_condition_results,
        usage: None,
        reused_from: None,
    })])
}

/// The `retry` frame announcing `retry` of a call that failed with `error`.
pub fn retry(scope: RetryScope, node_id: Option<String>, retry: RetryDelay, error: &impl std::fmt::Display) -> Event {
    Event::Retry(Retry {
        node_id,
        scope,
        attempt: retry.attempt,
        max_retries: retry.max_retries,
        delay_ms: u64::try_from(retry.delay.as_millis()).unwrap_or(u64::MAX),
        error: error.to_string(),
        fallback: None,
    })
}

/// The `retry` frames of a model call's fallbacks along its route: each names the entry that
/// failed, the one tried next and the failure; numbered along the route.
pub fn fallbacks(scope: RetryScope, node_id: Option<&str>, fallbacks: Vec<Fallback>) -> Vec<Event> {
    let along = u32::try_from(fallbacks.len()).unwrap_or(u32::MAX);
    fallbacks
        .into_iter()
        .zip(1..)
        .map(|(mut fallback, attempt)| {
            // The failure is the frame's `error`; the fallback itself names the entries.
            let error = std::mem::take(&mut fallback.error);
            Event::Retry(Retry {
                node_id: node_id.map(String::from),
                scope,
                attempt,
                max_retries: along,
                delay_ms: 0,
                error: crate::excerpt::excerpt(&error, crate::excerpt::MESSAGE).into_owned(),
                fallback: Some(fallback),
            })
        })
        .collect()
}

/// What the run does once no node of its plan runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// Every node completed: evaluate the goal conditions.
    Done,
    /// Nodes wait for operators (a question, a human task, a policy's request): the run pauses
    /// with this frame.
    Pause(Event),
    /// No node can start, and not every node completed.
    Deadlock(Failure),
}

/// What follows once nothing runs and no node can start.
pub fn settled(run: &Run) -> Settled {
    let state = run.state;
    let waiting = |status| {
        let mut ids = state.nodes_in(status);
        ids.sort();
        ids
    };
    let (asking, humans) = (waiting(NodeStatus::AwaitingHitl), waiting(NodeStatus::AwaitingHuman));
    let pause =
        |message, status: RunStatus, nodes| Settled::Pause(Event::Log(Log::paused(message, status.as_str(), nodes)));
    if state.awaiting_policy() {
        return pause(Log::PAUSES[0], RunStatus::AwaitingHitl, asking);
    }
    if !asking.is_empty() {
        return pause(Log::PAUSES[2], RunStatus::AwaitingHitl, asking);
    }
    if !humans.is_empty() {
        return pause(Log::PAUSES[1], RunStatus::AwaitingHuman, humans);
    }
    let gated = state.plan().and_then(|plan| plan.ready(&state.nodes).into_iter().find(|n| awaits_approval(run, n)));
    if let Some(node) = gated {
        return Settled::Pause(destructive_step_request(run, node));
    }
    let plan = state.plan().map(|p| p.nodes.as_slice()).unwrap_or_default();
    let unfinished: Vec<&str> =
        plan.iter().filter(|n| state.nodes.get(&n.id) != Some(&NodeStatus::Completed)).map(|n| n.id.as_str()).collect();
    if unfinished.is_empty() {
        return Settled::Done;
    }
    Settled::Deadlock(Failure::new(
        "plan_deadlock",
        format!("no node can start; unfinished: {}", unfinished.join(", ")),
    ))
}

/// The `log` frame of a run picked up again after a restart; `interrupted` nodes run again.
pub fn resumed(status: RunStatus, interrupted: &[String]) -> Event {
    let mut message = format!("{} (status {status})", Log::RESUMED);
    if !interrupted.is_empty() {
        let names: Vec<String> = interrupted.iter().map(|id| format!("\"{id}\"")).collect();
        message.push_str(&format!("; {} had started but not finished and run again", names.join(", ")));
    }
    let details = Resumed { interrupted_nodes: interrupted.to_vec(), resumed_from: status.as_str().to_string() };
    Event::Log(Log::info(message, serde_json::to_value(details).ok()))
}

/// An approval request of the run about `subject`: the plan, or its result.
pub fn approval(run: &Run, subject: HitlSubject, context: Value) -> Event {
    let question = operator::question(subject, run.state.plan_version());
    Event::HitlRequest(HitlRequest {
        request: run.request(HitlKind::Approval, subject, question, None, context),
        usage: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::FrameKind;
    use crate::run::decide::testing::*;

    #[test]
    fn a_node_is_ready_once_its_predecessors_completed() {
        let fixture = Fixture::new(json!({}));
        let mut state = fixture.fold(&[run_started(), requested(1, None), generated(two_nodes(), None)]);
        let ids = |nodes: Vec<PlanNode>| nodes.into_iter().map(|n| n.id).collect::<Vec<_>>();
        assert_eq!(ids(ready(&fixture.run(&state), 4)), ["draft"]);
        assert!(ready(&fixture.run(&state), 0).is_empty(), "no capacity");
        apply_all(&mut state, &[node_start("draft", "writer")]);
        assert!(ready(&fixture.run(&state), 4).is_empty(), "draft runs, polish waits for it");
        apply_all(&mut state, &[node_complete("draft", "writer", json!({"text": "a"}))]);
        assert_eq!(ids(ready(&fixture.run(&state), 4)), ["polish"]);
    }

    #[test]
    fn a_human_node_starts_with_its_task_and_waits() {
        let fixture = Fixture::new(json!({}));
        let review = node("review", "reviewer", &["brief"], &["review"]);
        let mut state =
            fixture.fold(&[run_started(), requested(1, None), generated(plan(1, vec![review.clone()]), None)]);
        let events = start(&fixture.run(&state), &[review]);
        let Event::NodeStart(started) = &events[0] else { panic!("{events:?}") };
        assert_eq!(started.executor_type, ExecutorType::Human);
        let task = started.task(1).expect("a human node's start carries its task");
        assert_eq!((task.kind, task.node_id.as_deref()), (HitlKind::HumanTask, Some("review")));
        apply_all(&mut state, &events);
        assert_eq!(state.nodes["review"], NodeStatus::AwaitingHuman);
        assert_eq!(state.pending_request().map(|r| r.id.clone()), Some(task.id));
        let Settled::Pause(Event::Log(pause)) = settled(&fixture.run(&state)) else { panic!("the run pauses") };
        assert_eq!(pause.pause().map(|p| p.event), Some("awaiting_human".to_string()));
    }

    /// A fixture with the MCP tools `calc.wipe` (may destroy: the default) and `calc.add` (reads
    /// only), both writing `post_copy`; the run's `destructiveTools` policy as given.
    fn with_tools(destructive_tools: &str) -> Fixture {
        let mut fixture = Fixture::new(json!({"policies": {"approval": {"destructiveTools": destructive_tools}}}));
        let server = crate::mcp::McpServer::parse(
            &json!({"id": "calc", "url": "http://127.0.0.1:1/mcp", "outputFacets": {"wipe": "post_copy", "add": "post_copy"}}),
            &Default::default(),
        )
        .unwrap();
        for tool in [json!({"name": "wipe"}), json!({"name": "add", "annotations": {"readOnlyHint": true}})] {
            let capability = crate::mcp::tool::capability(&server, serde_json::from_value(tool).unwrap()).unwrap();
            fixture.capabilities.insert(capability.id.clone(), std::sync::Arc::new(capability));
        }
        fixture
    }

    #[test]
    fn a_destructive_tools_step_waits_for_an_operator_when_the_run_asks_for_it() {
        let fixture = with_tools("required");
        let (wipe, add) =
            (node("wipe", "calc.wipe", &[], &["post_copy"]), node("add", "calc.add", &[], &["post_copy"]));
        let plan_of = |nodes| generated(plan(1, nodes), None);
        let mut state = fixture.fold(&[run_started(), requested(1, None), plan_of(vec![add.clone(), wipe.clone()])]);
        let ids = |nodes: Vec<PlanNode>| nodes.into_iter().map(|n| n.id.to_string()).collect::<Vec<_>>();
        // `plan` chains the nodes: the read-only step runs without asking.
        assert_eq!(ids(ready(&fixture.run(&state), 10)), ["add"]);
        let started = start(&fixture.run(&state), &[add]);
        apply_all(&mut state, &started);
        apply_all(&mut state, &[node_complete("add", "calc.add", json!({"post_copy": 1}))]);
        assert!(ready(&fixture.run(&state), 10).is_empty(), "the wipe waits");
        let Settled::Pause(Event::HitlRequest(asked)) = settled(&fixture.run(&state)) else {
            panic!("an approval is asked")
        };
        let request = asked.request.clone();
        assert_eq!(
            (request.kind, request.subject, request.node_id.as_deref()),
            (HitlKind::Approval, HitlSubject::Node, Some("wipe"))
        );
        assert_eq!(
            (request.context["tool"].clone(), request.context["server"].clone()),
            (json!("wipe"), json!("calc"))
        );
        apply_all(&mut state, &[Event::HitlRequest(asked)]);
        assert_eq!(state.status, RunStatus::AwaitingHitl);

        apply_all(
            &mut state,
            &[resolved(&request.id, HitlKind::Approval, HitlSubject::Node, Some(verdict(Verdict::Approved)))],
        );
        assert_eq!(
            (state.status, ids(ready(&fixture.run(&state), 10))),
            (RunStatus::Running, vec!["wipe".to_string()])
        );
        apply_all(&mut state, &[plan_of(vec![wipe])]);
        assert!(ready(&fixture.run(&state), 10).is_empty(), "a new plan version is approved anew");

        let unasked = with_tools("none");
        let state = unasked.fold(&[
            run_started(),
            requested(1, None),
            plan_of(vec![node("wipe", "calc.wipe", &[], &["post_copy"])]),
        ]);
        assert_eq!(ids(ready(&unasked.run(&state), 10)), ["wipe"], "without the policy nothing is asked");
    }

    #[test]
    fn a_node_is_given_its_inputs_its_predecessors_outputs_and_what_to_repair() {
        let fixture = Fixture::new(json!({"specialInstructions": ["No hashtags."]}));
        let mut state = fixture.fold(&[
            run_started(),
            requested(1, None),
            generated(two_nodes(), None),
            node_start("draft", "writer"),
            node_complete("draft", "writer", json!({"quality_score": 0.5})),
        ]);
        let polish = two_nodes().nodes[1].clone();
        let bundle = bundle(&fixture.run(&state), &polish);
        assert_eq!(bundle.inputs["post_copy"], json!({"quality_score": 0.5}));
        assert_eq!(bundle.prior_outputs["draft"], json!({"quality_score": 0.5}));
        assert_eq!(bundle.instructions, ["No hashtags."]);
        assert!(bundle.repair.is_empty(), "a first run repairs nothing");
        state.repair = vec![goal(false, 0.5)];
        let draft = two_nodes().nodes[0].clone();
        assert_eq!(super::bundle(&fixture.run(&state), &draft).repair.len(), 1, "a re-run gets what failed");
    }

    #[test]
    fn once_nothing_runs_the_run_evaluates_pauses_or_is_stuck() {
        let fixture = Fixture::new(json!({}));
        let state = fixture.fold(&[run_started(), requested(1, None), generated(two_nodes(), None)]);
        assert!(matches!(settled(&fixture.run(&state)), Settled::Deadlock(f) if f.code == "plan_deadlock"));
        let done = fixture.fold(&[
            run_started(),
            requested(1, None),
            generated(plan(1, vec![node("draft", "writer", &["brief"], &["post_copy"])]), None),
            node_start("draft", "writer"),
            node_complete("draft", "writer", json!({})),
        ]);
        assert_eq!(settled(&fixture.run(&done)), Settled::Done);
    }

    #[test]
    fn an_output_breaking_the_facet_catalog_fails_its_node() {
        let mut fixture = Fixture::new(json!({}));
        let definition = serde_json::from_value(json!({"schema": {"type": "object", "required": ["text"]}})).unwrap();
        fixture.facets = crate::facet::FacetCatalog::new([("post_copy".to_string(), definition)].into()).unwrap();
        let state = fixture.fold(&[run_started(), requested(1, None), generated(two_nodes(), None)]);
        let draft = two_nodes().nodes[0].clone();
        let outcome = completed(&fixture.run(&state), &draft, json!({"post_copy": {}}), Vec::new());
        let kinds: Vec<FrameKind> = outcome.events.iter().map(Event::kind).collect();
        assert_eq!(kinds, [FrameKind::ValidationError, FrameKind::NodeError]);
        let Effect::Failed(failure) = outcome.effect else { panic!() };
        assert_eq!(failure.details["cause"], "capability_output_invalid");
        let fine = completed(&fixture.run(&state), &draft, json!({"post_copy": {"text": "t"}}), Vec::new());
        assert_eq!(fine.effect, Effect::Continue);
    }
}
