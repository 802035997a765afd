use super::*;
use crate::budget::BudgetRaise;
use crate::events::FrameKind;
use crate::plan::NodeStatus;
use crate::run::decide::budget;
use crate::run::decide::testing::*;

const LIMITS: ReplanLimits = ReplanLimits { enabled: true, max_goal_condition_replans: 2, max_replans: 4 };

/// A run waiting on request `q1` of `kind`, about node `review` unless it is a plan approval.
fn waiting(kind: HitlKind) -> RunState {
    Fixture::new(json!({})).fold(&paused_on(kind))
}

fn with_status(events: Vec<Event>) -> RunState {
    Fixture::new(json!({})).fold(&events)
}

fn resume(answer: Answer) -> Command {
    Command::Resume { expected_plan_version: None, answer, actor: Actor::default() }
}

fn decide_now(state: &RunState, command: Command) -> Result<Decision, Refusal> {
    decide(state, LIMITS, command, Utc::now(), |_, output: &Value| {
        if output.get("ok").is_some() {
            Vec::new()
        } else {
            vec![SchemaViolation { instance_path: "".into(), keyword: "required".into(), message: "ok".into() }]
        }
    })
}

fn kinds(decision: &Decision) -> Vec<FrameKind> {
    decision.events.iter().map(Event::kind).collect()
}

/// The run's state once the decision is recorded.
fn after(state: &RunState, decision: &Decision) -> RunState {
    let mut state = state.clone();
    apply_all(&mut state, &decision.events);
    state
}

fn decide_answer(approved: bool, feedback: Option<&str>) -> Answer {
    Answer::Decide { request_id: Some("q1".into()), approved, feedback: feedback.map(String::from), budget: None }
}

#[test]
fn approve_runs_on() {
    let state = waiting(HitlKind::Approval);
    let d = decide_now(&state, resume(decide_answer(true, None))).unwrap();
    assert_eq!(kinds(&d), [FrameKind::HitlResolved]);
    assert_eq!(after(&state, &d).status, RunStatus::Running);
    assert!(after(&state, &d).requests.is_empty());
    assert_eq!(d.record.as_ref().map(|r| r.decision), Some(Verdict::Approved));
}

#[test]
fn reject_fails_or_replans_with_feedback_when_replans_are_left() {
    let state = waiting(HitlKind::Approval);
    let d = decide_now(&state, resume(decide_answer(false, None))).unwrap();
    assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::Complete]);
    let failed = after(&state, &d);
    assert_eq!(failed.status, RunStatus::Failed);
    assert_eq!(failed.end.unwrap().error_summary().0, "operator_rejected");

    let d = decide_now(&state, resume(decide_answer(false, Some("shorter")))).unwrap();
    let replanning = after(&state, &d);
    assert_eq!((replanning.status, replanning.replans.operator), (RunStatus::Planning, 1));
    let Event::HitlResolved(closed) = &d.events[0] else { panic!() };
    let expected = ReplanInfo::operator(ReplanReason::OperatorRejected, Some("shorter".into()));
    assert_eq!(closed.replan, Some(expected));

    let mut spent = waiting(HitlKind::Approval);
    spent.replans.total = 4;
    let d = decide_now(&spent, resume(decide_answer(false, Some("shorter")))).unwrap();
    let failed = after(&spent, &d);
    assert_eq!(failed.status, RunStatus::Failed);
    assert!(failed.end.unwrap().error_summary().1.contains("no replan is left"));
}

#[test]
fn resume_checks_state_version_and_request() {
    let running = with_status(vec![run_started(), requested(1, None), generated(two_nodes(), None)]);
    assert!(matches!(
        decide_now(&running, resume(decide_answer(true, None))),
        Err(Refusal::InvalidState { status: RunStatus::Running, .. })
    ));
    let stale =
        Command::Resume { expected_plan_version: Some(2), answer: decide_answer(true, None), actor: Actor::default() };
    let state = waiting(HitlKind::Approval);
    assert_eq!(decide_now(&state, stale).unwrap_err(), Refusal::StalePlanVersion { expected: 2, actual: 1 });
    let other = Answer::Decide { request_id: Some("q0".into()), approved: true, feedback: None, budget: None };
    assert!(matches!(decide_now(&state, resume(other)), Err(Refusal::StaleRequest { .. })));
    let output = Answer::Submit { request_id: None, node_id: "review".into(), output: json!({}) };
    assert!(matches!(
        decide_now(&state, resume(output)),
        Err(Refusal::Mismatch { code: ErrorCode::DecisionRequired, .. })
    ));
}

#[test]
fn human_output_is_checked_then_completes_the_node() {
    let state = waiting(HitlKind::HumanTask);
    assert_eq!(state.status, RunStatus::AwaitingHuman);
    let bad =
        decide_now(&state, resume(Answer::Submit { request_id: None, node_id: "review".into(), output: json!({}) }))
            .unwrap();
    assert_eq!(kinds(&bad), [FrameKind::ValidationError, FrameKind::NodeError]);
    assert_eq!(after(&state, &bad).status, RunStatus::AwaitingHuman, "the run keeps waiting");
    assert_eq!(bad.record, None);

    let ok = json!({"ok": true});
    let good =
        decide_now(&state, resume(Answer::Submit { request_id: None, node_id: "review".into(), output: ok.clone() }))
            .unwrap();
    assert_eq!(kinds(&good), [FrameKind::HitlResolved, FrameKind::NodeComplete]);
    let done = after(&state, &good);
    assert_eq!(done.status, RunStatus::Running);
    assert_eq!(done.nodes["review"], crate::plan::NodeStatus::Completed);
    assert_eq!(done.output_of("review"), Some(&ok));

    let wrong = Answer::Submit { request_id: None, node_id: "other".into(), output: json!({"ok": 1}) };
    assert!(matches!(decide_now(&state, resume(wrong)), Err(Refusal::Mismatch { code: ErrorCode::WrongNode, .. })));
    // An answer naming a request the run no longer waits on (a replan's node of the same id
    // opened another): refused, whether it submits or declines.
    let earlier = || Some("q0".to_string());
    let stale = Answer::Submit { request_id: earlier(), node_id: "review".into(), output: ok.clone() };
    assert!(matches!(decide_now(&state, resume(stale)), Err(Refusal::StaleRequest { .. })));
    let stale = Answer::Decline { request_id: earlier(), node_id: "review".into(), reason: "no".into(), note: None };
    assert!(matches!(decide_now(&state, resume(stale)), Err(Refusal::StaleRequest { .. })));
    let approve = decide_now(&state, resume(decide_answer(true, None)));
    assert!(matches!(approve, Err(Refusal::Mismatch { code: ErrorCode::HumanPayloadRequired, .. })));
}

#[test]
fn a_tools_question_takes_an_answer_fitting_its_schema_and_gives_it_to_the_next_call() {
    let review = plan(1, vec![node("review", "human.review", &["brief"], &["review"])]);
    let question = json!({"inputKey": "k", "message": "Which warehouse?", "requestState": "s1",
                          "requestedSchema": {"type": "object", "required": ["warehouse"],
                                              "properties": {"warehouse": {"type": "string", "minLength": 2}}}});
    let context = json!({"capabilityId": "shop.confirm", "label": "Confirm", "context": {"mcp": question}});
    let state = Fixture::new(json!({})).fold(&[
        run_started(),
        requested(1, None),
        generated(review, None),
        Event::NodeStart(review_start()),
        request("q1", HitlKind::Clarify, HitlSubject::Node, Some("review"), context),
        Event::Log(Log::paused(Log::PAUSES[2], "awaiting_hitl", vec!["review".into()])),
    ]);
    let unfit = decide_now(&state, resume(decide_answer(true, Some("n"))));
    let Err(Refusal::Mismatch { code: ErrorCode::AnswerInvalid, message }) = unfit else { panic!("{unfit:?}") };
    assert!(message.contains("/warehouse"), "{message}");

    let d = decide_now(&state, resume(decide_answer(true, Some("north")))).unwrap();
    let Event::HitlResolved(closed) = &d.events[0] else { panic!("{:?}", kinds(&d)) };
    assert_eq!(closed.decision.as_ref().unwrap().answer.as_deref(), Some(r#"{"warehouse":"north"}"#));
    let answered = after(&state, &d);
    let node = answered.plan().unwrap().node("review").unwrap().clone();
    let fixture = Fixture::new(json!({}));
    let answer = super::super::execution::bundle(&fixture.run(&answered), &node).tool_answer.expect("an answer");
    assert_eq!((answer.input_key.as_str(), answer.request_state.as_deref()), ("k", Some("s1")));
    assert_eq!(answer.content, json!({"warehouse": "north"}));
}

#[test]
fn clarify_answer_runs_on_and_declining_fails_the_node() {
    let state = waiting(HitlKind::Clarify);
    let d = decide_now(&state, resume(decide_answer(true, Some("EU only")))).unwrap();
    let Event::HitlResolved(closed) = &d.events[0] else { panic!("{:?}", kinds(&d)) };
    assert_eq!(closed.decision.as_ref().unwrap().answer.as_deref(), Some("EU only"));
    assert_eq!(d.record.as_ref().map(|r| r.decision), Some(Verdict::Answered));
    let answered = after(&state, &d);
    assert_eq!(answered.status, RunStatus::Running);
    assert_eq!(answered.nodes["review"], crate::plan::NodeStatus::Pending, "it runs again with the answer");

    let empty = decide_now(&state, resume(decide_answer(true, Some("  "))));
    assert!(matches!(empty, Err(Refusal::Mismatch { code: ErrorCode::AnswerRequired, .. })));
    let submit = Answer::Submit { request_id: None, node_id: "review".into(), output: json!({"ok": 1}) };
    assert!(matches!(
        decide_now(&state, resume(submit)),
        Err(Refusal::Mismatch { code: ErrorCode::DecisionRequired, .. })
    ));

    let d = decide_now(&state, resume(decide_answer(false, Some("out of scope")))).unwrap();
    assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::NodeError, FrameKind::Complete]);
    let failed = after(&state, &d);
    assert_eq!(failed.status, RunStatus::Failed);
    assert_eq!(failed.end.unwrap().error_summary().0, "clarification_declined");
    let Event::NodeError(refused) = &d.events[1] else { panic!("{:?}", kinds(&d)) };
    assert_eq!((refused.node_id.as_str(), &refused.error.details["reason"]), ("review", &json!("out of scope")));
}

#[test]
fn decline_fails_the_run() {
    let state = waiting(HitlKind::HumanTask);
    let answer = Answer::Decline { request_id: None, node_id: "review".into(), reason: "no time".into(), note: None };
    let d = decide_now(&state, resume(answer)).unwrap();
    assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::NodeError, FrameKind::Complete]);
    let failed = after(&state, &d);
    assert_eq!(failed.status, RunStatus::Failed);
    assert_eq!(failed.end.unwrap().error_summary().0, "human_task_declined");
}

#[test]
fn replan_rules() {
    let command = || Command::Replan { feedback: Some("again".into()), actor: Actor::default() };
    let state = waiting(HitlKind::Approval);
    let d = decide_now(&state, command()).unwrap();
    assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::PolicyTriggered]);
    let replanning = after(&state, &d);
    assert_eq!((replanning.status, replanning.replans.operator), (RunStatus::Planning, 1));
    let planning = with_status(vec![run_started(), requested(1, None)]);
    assert_eq!(decide_now(&planning, command()).unwrap_err(), Refusal::PlanningInProgress);
    let running = with_status(vec![run_started(), requested(1, None), generated(two_nodes(), None)]);
    assert!(matches!(decide_now(&running, command()), Err(Refusal::NotWaiting { .. })));
    let mut spent = waiting(HitlKind::Approval);
    spent.replans.total = 4;
    assert_eq!(decide_now(&spent, command()).unwrap_err(), Refusal::ReplanLimit { limit: 4 });
}

#[test]
fn cancel_rules() {
    let command = |stopped| Command::Cancel { stopped, actor: Actor::default() };
    let state = waiting(HitlKind::Approval);
    let d = decide_now(&state, command(false)).unwrap();
    assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::Complete]);
    let cancelled = after(&state, &d);
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert!(cancelled.requests.is_empty());
    assert!(matches!(decide_now(&cancelled, command(false)), Err(Refusal::InvalidState { .. })));
    assert_eq!(decide_now(&cancelled, command(true)).unwrap().events, Vec::new());
}

/// A cancel ends a node waiting on a question or a human task as it ends a running one: the node
/// reads `failed` (it waited before; it is not left waiting in an ended run), with no frame of
/// its own beyond those a cancel always records.
#[test]
fn a_cancel_ends_the_node_a_question_or_a_human_task_kept_waiting() {
    for kind in [HitlKind::Clarify, HitlKind::HumanTask] {
        let state = waiting(kind);
        assert_ne!(state.nodes["review"], NodeStatus::Failed, "{kind:?}: it waits");
        let d = decide_now(&state, Command::Cancel { stopped: false, actor: Actor::default() }).unwrap();
        assert_eq!(kinds(&d), [FrameKind::HitlResolved, FrameKind::Complete], "{kind:?}");
        let cancelled = after(&state, &d);
        assert_eq!(cancelled.status, RunStatus::Cancelled, "{kind:?}");
        assert_eq!(cancelled.nodes["review"], NodeStatus::Failed, "{kind:?}");
    }
}

/// A run of budget `maxModelCalls: 2, maxCostUsd: 0.01` paused on it in `phase` (2 calls
/// spent), then `answer` decided and applied.
fn budget_answered(phase: BudgetPhase, answer: Answer) -> Result<(RunState, Decision), Refusal> {
    use crate::budget::{Amount, Limit, Reached, Spent};
    let fixture = Fixture::new(json!({"policies": {"budget": {"maxModelCalls": 2, "maxCostUsd": 0.01}}}));
    let mut events = vec![run_started(), requested(1, None)];
    if phase == BudgetPhase::Execution {
        events.push(generated(two_nodes(), None));
    }
    let mut state = fixture.fold(&events);
    state.usage.spent = Spent { model_calls: 2, tokens: 300, cost_usd: crate::usage::Micros(4_000) };
    let reached = Reached { limit: Limit::ModelCalls, max: Amount::Count(2), spent: Amount::Count(2) };
    let spent = state.usage.spent;
    let (paused, _) = budget::exceeded(&fixture.run(&state), reached, phase, None, Vec::new(), spent);
    apply_all(&mut state, &paused);
    assert_eq!(state.status, RunStatus::AwaitingHitl);
    let decision = decide_now(&state, resume(answer))?;
    apply_all(&mut state, &decision.events);
    Ok((state, decision))
}

fn raise_calls(approved: bool, to: Option<u64>) -> Answer {
    let budget = to.map(|n| BudgetRaise { max_model_calls: Some(n), ..BudgetRaise::default() });
    Answer::Decide { request_id: None, approved, feedback: Some("too dear".into()), budget }
}

#[test]
fn a_raised_budget_resumes_the_run_where_it_stopped_under_the_new_limits() {
    let (state, decision) = budget_answered(BudgetPhase::Planning, raise_calls(true, Some(5))).unwrap();
    assert_eq!(state.status, RunStatus::Planning);
    let limits = state.budget.unwrap();
    assert_eq!((limits.max_model_calls, limits.max_cost_usd), (Some(5), Some(crate::usage::Micros(10_000))));
    assert_eq!(decision.record.unwrap().payload.unwrap()["maxModelCalls"], 5);
    let (state, _) = budget_answered(BudgetPhase::Execution, raise_calls(true, Some(3))).unwrap();
    assert_eq!(state.status, RunStatus::Running);
}

#[test]
fn an_approval_that_leaves_no_budget_room_is_refused() {
    for answer in [raise_calls(true, None), raise_calls(true, Some(2)), raise_calls(true, Some(1))] {
        let refused = budget_answered(BudgetPhase::Execution, answer).unwrap_err();
        assert_eq!(refused.code(), ErrorCode::BudgetNotRaised, "{refused}");
    }
}

#[test]
fn a_rejected_budget_fails_the_run_with_budget_exceeded() {
    let (state, _) = budget_answered(BudgetPhase::Execution, raise_calls(false, None)).unwrap();
    assert_eq!(state.status, RunStatus::Failed);
    let end = state.end.unwrap();
    assert_eq!(end.error_summary().0, budget::BUDGET_EXCEEDED);
    let error = end.error.unwrap();
    assert_eq!((&error["feedback"], &error["limit"]), (&json!("too dear"), &json!("modelCalls")));
}

#[test]
fn a_budget_sent_to_another_request_is_refused() {
    let refused = decide_now(&waiting(HitlKind::Approval), resume(raise_calls(true, Some(9))));
    assert_eq!(refused.unwrap_err().code(), ErrorCode::InvalidRequest);
}
