use serde_json::json;

use super::*;
use crate::condition::FacetSource;
use crate::run::decide::testing::*;

fn fixture() -> Fixture {
    Fixture::new(json!({}))
}

fn fold(events: &[Event]) -> RunState {
    fixture().fold(events)
}

#[test]
fn a_run_mid_node_has_the_node_running_and_keeps_completed_work() {
    let state = fold(&[
        run_started(),
        requested(1, None),
        generated(two_nodes(), None),
        node_start("draft", "writer"),
        node_complete("draft", "writer", json!({"text": "a"})),
        node_start("polish", "editor"),
    ]);
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.last_seq, seq(6));
    assert_eq!(state.nodes_in(NodeStatus::Running), ["polish"]);
    assert_eq!(state.nodes["draft"], NodeStatus::Completed);
    assert_eq!(state.completed().len(), 1);
    assert_eq!(state.completed()[0].capability_id, "writer");
    assert_eq!(state.context.facet_value("post_copy"), Some(&json!({"text": "a"})));
    assert_eq!(state.context.facet_value("brief"), Some(&json!({"topic": "flexrun"})));
    assert_eq!(state.started_at, Some(t0()));
    assert_eq!(state.planner_attempts, 1);
}

#[test]
fn a_restart_announcement_runs_interrupted_nodes_again() {
    let mut state =
        fold(&[run_started(), requested(1, None), generated(two_nodes(), None), node_start("draft", "writer")]);
    let resumed = crate::run::decide::execution::resumed(state.status, &state.nodes_in(NodeStatus::Running));
    apply_all(&mut state, &[resumed]);
    assert_eq!(state.nodes["draft"], NodeStatus::Pending);
    assert_eq!(state.status, RunStatus::Running);
}

#[test]
fn a_goal_repair_counts_the_replan_and_remembers_what_failed() {
    let failed = vec![goal(false, 0.5)];
    let replan = ReplanInfo::goal_conditions(failed.clone());
    let state = fold(&[
        run_started(),
        requested(1, None),
        generated(plan(1, vec![node("draft", "writer", &["brief"], &["post_copy"])]), None),
        node_start("draft", "writer"),
        node_complete("draft", "writer", json!({"quality_score": 0.5})),
        Event::GoalConditionFailed(GoalConditionFailed {
            run_id: "r".into(),
            trigger: Trigger { reason: ReplanReason::GoalConditionFailed, details: json!({}) },
            failed_goal_conditions: failed.clone(),
            attempt: 1,
            limit: 2,
        }),
        requested(2, Some(replan.clone())),
    ]);
    assert_eq!(state.status, RunStatus::Planning);
    assert_eq!((state.replans.goal_condition, state.replans.total), (1, 1));
    assert_eq!(state.repair, failed);
    assert_eq!(state.replan, Some(replan));
    assert_eq!(state.plan_version(), 1);
}

#[test]
fn a_question_keeps_its_node_waiting_until_answered_then_runs_it_again_with_the_answer() {
    let mut state = fold(&[
        run_started(),
        requested(1, None),
        generated(two_nodes(), None),
        node_start("draft", "writer"),
        request(
            "q1",
            HitlKind::Clarify,
            HitlSubject::Node,
            Some("draft"),
            json!({"capabilityId": "writer", "label": "d"}),
        ),
        Event::Log(Log::paused(Log::PAUSES[2], "awaiting_hitl", vec!["draft".into()])),
    ]);
    assert_eq!(state.nodes["draft"], NodeStatus::AwaitingHitl);
    assert_eq!(state.status, RunStatus::AwaitingHitl);
    assert_eq!(state.clarifications[0].answer, None);
    assert_eq!(state.pending_request().map(|r| r.id.as_str()), Some("q1"));

    let answer = DecisionInfo { answer: Some("EU only".into()), ..verdict(Verdict::Answered) };
    apply_all(&mut state, &[resolved("q1", HitlKind::Clarify, HitlSubject::Node, Some(answer))]);
    assert_eq!(state.nodes["draft"], NodeStatus::Pending);
    assert_eq!(state.status, RunStatus::Running);
    assert_eq!(state.clarifications[0].answer.as_deref(), Some("EU only"));
    assert_eq!(state.operator_at, Some(t0()));
    assert!(state.requests.is_empty());
}

#[test]
fn a_signal_replan_counts_but_does_not_restart_the_clock_of_the_time_limit() {
    let signal = SignalInfo {
        node_id: "draft".into(),
        capability_id: "writer".into(),
        reason: "exists".into(),
        details: json!(null),
    };
    let replan = ReplanInfo::capability_signal(signal);
    let state = fold(&[
        run_started(),
        requested(1, None),
        generated(two_nodes(), None),
        Event::PolicyTriggered(PolicyTriggered {
            run_id: "r".into(),
            trigger: Trigger { reason: ReplanReason::CapabilitySignal, details: json!({}) },
            replan: replan.clone(),
            usage: None,
        }),
        requested(2, Some(replan)),
    ]);
    assert_eq!(state.operator_at, None);
    assert_eq!((state.replans.capability_signal, state.replans.total), (1, 1));
    assert_eq!(state.status, RunStatus::Planning);
}

#[test]
fn policy_frames_restore_what_policies_did() {
    let policy = |kind: TriggerKind, action: &str| PolicyInfo {
        policy_id: "again".into(),
        trigger_kind: kind,
        action: action.into(),
        node_id: None,
        capability_id: None,
        rationale: None,
        request_id: None,
    };
    let update = |info: PolicyInfo, attempts: Option<u32>, reset: Vec<String>| {
        Event::PolicyUpdate(PolicyUpdate {
            policy: info,
            event: None,
            reason: None,
            payload: json!(null),
            next: None,
            attempts,
            max_attempts: attempts.map(|_| 2),
            reset_nodes: reset,
            post_condition_results: Vec::new(),
        })
    };
    let state = fold(&[
        run_started(),
        requested(1, None),
        generated(two_nodes(), None),
        update(policy(TriggerKind::OnStart, "emit"), None, Vec::new()),
        node_start("draft", "writer"),
        node_complete("draft", "writer", json!({"text": "a"})),
        update(policy(TriggerKind::OnNodeComplete, "goto"), Some(1), vec!["draft".into(), "polish".into()]),
    ]);
    assert!(state.fired.on_start);
    assert_eq!(state.fired.goto_attempts["again"], 1);
    assert_eq!(state.nodes["draft"], NodeStatus::Pending, "a goto runs the completed node again");
    assert_eq!(state.completed().len(), 1, "its earlier output stays until it is replaced");
}

#[test]
fn a_policy_request_waits_then_its_decision_is_followed_up_once() {
    let context = json!({"policyId": "review", "triggerKind": "onNodeComplete", "action": "hitl"});
    let mut state = fold(&[
        run_started(),
        requested(1, None),
        generated(two_nodes(), None),
        request("p1", HitlKind::Approval, HitlSubject::Policy, Some("draft"), context),
    ]);
    assert!(state.awaiting_policy());
    assert_eq!(state.policy_follow_up, None);

    apply_all(&mut state, &[resolved("p1", HitlKind::Approval, HitlSubject::Policy, Some(verdict(Verdict::Rejected)))]);
    assert!(!state.awaiting_policy());
    let expected = PolicyFollowUp {
        request_id: "p1".into(),
        policy_id: "review".into(),
        node_id: Some("draft".into()),
        approved: false,
    };
    assert_eq!(state.policy_follow_up, Some(expected));

    let done = PolicyInfo {
        policy_id: "review".into(),
        trigger_kind: TriggerKind::OnNodeComplete,
        action: "emit".into(),
        node_id: None,
        capability_id: None,
        rationale: None,
        request_id: Some("p1".into()),
    };
    let emitted = crate::run::decide::policies::emitted(done, "rejected", &json!(null), Vec::new());
    apply_all(&mut state, &emitted);
    assert_eq!(state.policy_follow_up, None, "a follow-up that was done is not done again");
}

#[test]
fn a_committed_node_failure_is_remembered_until_the_run_fails_with_it() {
    let state = fold(&[
        run_started(),
        requested(1, None),
        generated(two_nodes(), None),
        node_start("draft", "writer"),
        node_error("draft", "writer", "capability_timeout"),
    ]);
    let failure = state.failed.as_ref().unwrap();
    assert_eq!((failure.node_id.as_str(), failure.code.as_str()), ("draft", "capability_timeout"));
    assert_eq!(state.nodes["draft"], NodeStatus::Failed);
}

#[test]
fn a_rejected_human_submission_leaves_the_node_waiting() {
    let state = fold(&[
        run_started(),
        requested(1, None),
        generated(two_nodes(), None),
        node_start("draft", "writer"),
        node_error("draft", "writer", HUMAN_OUTPUT_INVALID),
    ]);
    assert_eq!(state.failed, None);
    assert_eq!(state.nodes["draft"], NodeStatus::Running);
}

#[test]
fn operator_replans_and_cancels_move_a_waiting_run() {
    let waiting = [
        run_started(),
        requested(1, None),
        generated(two_nodes(), None),
        request("a1", HitlKind::Approval, HitlSubject::Plan, None, json!(null)),
    ];
    let mut state = fold(&waiting);
    assert_eq!(state.status, RunStatus::AwaitingHitl);
    let replan = ReplanInfo::operator(ReplanReason::OperatorReplan, Some("shorter".into()));
    apply_all(
        &mut state,
        &[
            resolved("a1", HitlKind::Approval, HitlSubject::Plan, None),
            Event::PolicyTriggered(PolicyTriggered {
                run_id: "r".into(),
                trigger: Trigger { reason: ReplanReason::OperatorReplan, details: json!({}) },
                replan: replan.clone(),
                usage: None,
            }),
        ],
    );
    assert_eq!(state.status, RunStatus::Planning);
    assert_eq!((state.replans.operator, state.replans.total), (1, 1));
    assert_eq!(state.replan, Some(replan));
    assert!(state.requests.is_empty());

    let mut state = fold(&waiting);
    let cancelled = Complete {
        status: CompleteStatus::Cancelled,
        output: json!(null),
        goal_condition_results: None,
        error: Some(json!({"code": "cancelled"})),
        post_condition_results: Vec::new(),
        usage: None,
    };
    apply_all(&mut state, &[Event::Complete(cancelled.clone())]);
    assert_eq!(state.status, RunStatus::Cancelled);
    assert_eq!(state.end, Some(cancelled));
    assert!(state.requests.is_empty());
}

#[test]
fn logs_flexrun_did_not_write_are_refused() {
    let mut state = RunState::new(&run_id(), "c");
    let early = state.apply(At { seq: seq(1), timestamp: t0() }, &requested(1, None));
    assert_eq!(early, Err(ApplyError::NotStarted { seq: seq(1), kind: "plan_requested" }));
    state.apply(At { seq: seq(1), timestamp: t0() }, &run_started()).unwrap();
    let gap = state.apply(At { seq: seq(3), timestamp: t0() }, &requested(1, None));
    assert_eq!(gap, Err(ApplyError::Gap { last: seq(1), got: seq(3) }));
    let unknown = state.apply(At { seq: seq(2), timestamp: t0() }, &node_complete("ghost", "writer", json!({})));
    assert!(matches!(unknown, Err(ApplyError::UnknownNode { .. })), "{unknown:?}");
    let mut ended = fold(&[run_started(), requested(1, None)]);
    let done = Complete {
        status: CompleteStatus::Failed,
        output: json!(null),
        goal_condition_results: None,
        error: Some(json!({"code": "planner_error"})),
        post_condition_results: Vec::new(),
        usage: None,
    };
    apply_all(&mut ended, &[Event::Complete(done)]);
    let after_end = ended.apply(At { seq: seq(4), timestamp: t0() }, &requested(2, None));
    assert!(matches!(after_end, Err(ApplyError::Transition { from: RunStatus::Failed, .. })), "{after_end:?}");
}
