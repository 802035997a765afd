//! The run's budget ([`crate::budget`]) at work: whether a model call may start, what reaching a
//! limit records (`budget_exceeded`, then a `budget` request or the run's failure), and what an
//! operator's answer to that request does.

use serde_json::{Value, json};

use super::operator::{Decision, Pending, Record, Refusal};
use super::{Failure, Run};
use crate::budget::{BudgetLimits, BudgetRaise, NotRaised, OnExceeded, Reached, Spent};
use crate::error_code::ErrorCode;
use crate::events::Event;
use crate::events::payload::*;
use crate::run::operator::Actor;
use crate::run::state::RunState;

/// The error code of a run that ends on its budget.
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";

/// What reaching `reached` records. `replan`: the replan a planning round was for; `held`: nodes whose next attempt was held back; `leftover`:
/// the usage of their earlier attempts, which no other frame records. With `pause`, the frames
/// (`budget_exceeded`, the request) and no failure; with `fail`, `budget_exceeded` and the
/// failure the run ends with.
pub fn exceeded(
    run: &Run,
    reached: Reached,
    phase: BudgetPhase,
    replan: Option<ReplanInfo>,
    held: Vec<String>,
    spent: Spent,
) -> (Vec<Event>, Option<Failure>) {
    let budget = run.state.budget.unwrap_or(BudgetLimits {
        max_tokens: None,
        max_cost_usd: None,
        max_model_calls: None,
        on_exceeded: OnExceeded::Fail,
    });
    let frame = Event::BudgetExceeded(BudgetExceeded {
        limit: reached.limit,
        max: reached.max,
        spent: reached.spent,
        action: budget.on_exceeded,
        held_nodes: held,
        usage: None,
    });
    match budget.on_exceeded {
        OnExceeded::Fail => (vec![frame], Some(failure(&reached))),
        OnExceeded::Pause => {
            let context = BudgetRequest {
                limit: reached.limit,
                max: reached.max,
                spent: reached.spent,
                phase,
                replan,
                budget,
                spent_so_far: spent,
            };
            let question = format!(
                "The run reached its budget ({}). Raise the limit to go on, or reject to end the run.",
                reached.describe()
            );
            let context = serde_json::to_value(context).unwrap_or(Value::Null);
            let request = run.request(HitlKind::Budget, HitlSubject::Budget, question, None, context);
            (vec![frame, Event::HitlRequest(HitlRequest { request, usage: None })], None)
        }
    }
}

/// The failure of a run that reached `reached`.
fn failure(reached: &Reached) -> Failure {
    Failure::new(BUDGET_EXCEEDED, format!("The run reached its budget ({})", reached.describe()))
        .detail("limit", reached.limit.as_str())
        .detail("max", json!(reached.max))
        .detail("spent", json!(reached.spent))
}

/// An operator's answer to a budget request: approved with `raise`, the run goes on under the
/// raised limits (refused unless they leave it room); rejected, it fails with `budget_exceeded`.
pub(super) fn answer(
    state: &RunState,
    pending: &Pending,
    approved: bool,
    feedback: Option<String>,
    raise: Option<BudgetRaise>,
    actor: &Actor,
) -> Result<Decision, Refusal> {
    let feedback = feedback.filter(|f| !f.trim().is_empty());
    let request: Option<BudgetRequest> = serde_json::from_value(pending.info.context.clone()).ok();
    let limits = state.budget.or(request.as_ref().map(|r| r.budget));
    let verdict = if approved { Verdict::Approved } else { Verdict::Rejected };
    let decision_info = DecisionInfo {
        decision: verdict,
        feedback: feedback.clone(),
        answer: None,
        operator: actor.operator.clone(),
        note: actor.note.clone(),
        principal: Some(actor.principal.clone()).filter(|p| !p.is_empty()),
    };
    let closed = ClosedRequest {
        id: pending.info.id.clone(),
        kind: pending.info.kind,
        subject: pending.info.subject,
        status: RequestStatus::Resolved,
    };
    let budget = if approved {
        let not_raised = |message: String| Refusal::Mismatch { code: ErrorCode::BudgetNotRaised, message };
        let (Some(limits), Some(raise)) = (limits, raise) else {
            return Err(not_raised(format!(
                "the run waits for its budget to be raised (request {}): send `decision.budget` with a higher limit",
                pending.info.id
            )));
        };
        let raised = limits.raised(&raise, &state.usage.spent).map_err(|e: NotRaised| not_raised(e.to_string()))?;
        Some(raised)
    } else {
        None
    };
    let mut events = vec![Event::HitlResolved(HitlResolved {
        request: closed,
        decision: Some(decision_info),
        replan: None,
        budget,
    })];
    let record = Record {
        request_id: pending.info.id.clone(),
        decision: verdict,
        feedback: feedback.clone(),
        payload: budget.map(|b| json!(b)),
        actor: actor.clone(),
    };
    if !approved {
        let failure = match request {
            Some(r) => failure(&Reached { limit: r.limit, max: r.max, spent: r.spent }),
            None => Failure::new(BUDGET_EXCEEDED, "The run reached its budget"),
        };
        let failure = failure.detail("requestId", pending.info.id.clone()).detail("feedback", json!(feedback));
        events = super::ending::failed(state, failure, events);
    }
    Ok(Decision { events, record: Some(record), node_error: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Amount, Limit};
    use crate::events::FrameKind;
    use crate::run::decide::operator::{Refusal, decide};
    use crate::run::decide::testing::*;
    use crate::run::operator::{Answer, Command};
    use crate::run::status::RunStatus;
    use crate::usage::Micros;
    use chrono::Utc;

    fn fixture(on_exceeded: &str) -> Fixture {
        Fixture::new(
            json!({"policies": {"budget": {"maxModelCalls": 2, "maxCostUsd": 0.01, "onExceeded": on_exceeded}}}),
        )
    }

    fn reached_calls() -> Reached {
        Reached { limit: Limit::ModelCalls, max: Amount::Count(2), spent: Amount::Count(2) }
    }

    fn spent() -> Spent {
        Spent { model_calls: 2, tokens: 300, cost_usd: Micros(4_000) }
    }

    /// A run of `fixture` paused on its budget in `phase`, the request answered by `answer`.
    fn answered(phase: BudgetPhase, answer: Answer) -> Result<(RunState, Decision), Refusal> {
        let fixture = fixture("pause");
        let mut events = vec![run_started(), requested(1, None)];
        if phase == BudgetPhase::Execution {
            events.push(generated(two_nodes(), None));
        }
        let mut state = fixture.fold(&events);
        state.usage.spent = spent();
        let (paused, failure) = exceeded(&fixture.run(&state), reached_calls(), phase, None, Vec::new(), spent());
        assert!(failure.is_none());
        apply_all(&mut state, &paused);
        assert_eq!(state.status, RunStatus::AwaitingHitl);
        let command = Command::Resume { expected_plan_version: None, answer, actor: Default::default() };
        let limits = state.replan_limits.expect("started");
        let decision = decide(&state, limits, command, Utc::now(), |_, _: &Value| Vec::new())?;
        apply_all(&mut state, &decision.events);
        Ok((state, decision))
    }

    fn approve(raise: Option<crate::budget::BudgetRaise>) -> Answer {
        Answer::Decide { request_id: None, approved: true, feedback: None, budget: raise }
    }

    fn raise_calls(to: u64) -> Option<crate::budget::BudgetRaise> {
        Some(crate::budget::BudgetRaise { max_model_calls: Some(to), ..Default::default() })
    }

    #[test]
    fn a_limit_reached_with_pause_asks_an_operator_with_what_was_spent() {
        let fixture = fixture("pause");
        let state = fixture.fold(&[run_started(), requested(1, None), generated(two_nodes(), None)]);
        let (events, failure) = exceeded(
            &fixture.run(&state),
            reached_calls(),
            BudgetPhase::Execution,
            None,
            vec!["draft".into()],
            spent(),
        );
        assert!(failure.is_none());
        let kinds: Vec<FrameKind> = events.iter().map(Event::kind).collect();
        assert_eq!(kinds, [FrameKind::BudgetExceeded, FrameKind::HitlRequest]);
        let Event::HitlRequest(request) = &events[1] else { unreachable!() };
        assert_eq!((request.request.kind, request.request.subject), (HitlKind::Budget, HitlSubject::Budget));
        let context: BudgetRequest = serde_json::from_value(request.request.context.clone()).unwrap();
        assert_eq!((context.phase, context.spent_so_far), (BudgetPhase::Execution, spent()));
        assert_eq!(context.budget.max_model_calls, Some(2));
    }

    #[test]
    fn a_limit_reached_with_fail_fails_the_run_saying_which() {
        let fixture = fixture("fail");
        let state = fixture.fold(&[run_started(), requested(1, None)]);
        let (events, failure) =
            exceeded(&fixture.run(&state), reached_calls(), BudgetPhase::Planning, None, Vec::new(), spent());
        assert_eq!(events.len(), 1);
        let failure = failure.expect("fails");
        assert_eq!(failure.code, BUDGET_EXCEEDED);
        assert_eq!(failure.error_json()["limit"], "modelCalls");
        assert_eq!((failure.error_json()["max"].clone(), failure.error_json()["spent"].clone()), (json!(2), json!(2)));
    }

    #[test]
    fn held_nodes_are_pending_again_after_the_frame() {
        let fixture = fixture("pause");
        let mut state = fixture.fold(&[
            run_started(),
            requested(1, None),
            generated(two_nodes(), None),
            node_start("draft", "writer"),
        ]);
        let (events, _) = exceeded(
            &fixture.run(&state),
            reached_calls(),
            BudgetPhase::Execution,
            None,
            vec!["draft".into()],
            spent(),
        );
        apply_all(&mut state, &events);
        assert_eq!(state.nodes_in(crate::plan::NodeStatus::Pending), ["draft", "polish"]);
    }

    #[test]
    fn a_raise_resumes_the_run_where_it_stopped_under_the_new_limits() {
        let (state, decision) = answered(BudgetPhase::Planning, approve(raise_calls(5))).unwrap();
        assert_eq!(state.status, RunStatus::Planning);
        assert_eq!(state.budget.unwrap().max_model_calls, Some(5));
        assert_eq!(state.budget.unwrap().max_cost_usd, Some(Micros(10_000)), "the other limits stay");
        assert_eq!(decision.record.unwrap().payload.unwrap()["maxModelCalls"], 5);
        let (state, _) = answered(BudgetPhase::Execution, approve(raise_calls(3))).unwrap();
        assert_eq!(state.status, RunStatus::Running);
    }

    #[test]
    fn an_approval_that_leaves_no_room_is_refused() {
        for answer in [approve(None), approve(raise_calls(2)), approve(raise_calls(1))] {
            let refused = answered(BudgetPhase::Execution, answer).unwrap_err();
            assert_eq!(refused.code(), ErrorCode::BudgetNotRaised, "{refused}");
        }
        let cost_only = crate::budget::BudgetRaise { max_cost_usd: Some(1.0), ..Default::default() };
        let refused = answered(BudgetPhase::Execution, approve(Some(cost_only))).unwrap_err();
        assert!(refused.to_string().contains("modelCalls"), "{refused}");
    }

    #[test]
    fn a_rejection_fails_the_run_with_budget_exceeded() {
        let reject =
            Answer::Decide { request_id: None, approved: false, feedback: Some("too dear".into()), budget: None };
        let (state, _) = answered(BudgetPhase::Execution, reject).unwrap();
        assert_eq!(state.status, RunStatus::Failed);
        let end = state.end.unwrap();
        assert_eq!(end.error_summary().0, BUDGET_EXCEEDED);
        assert_eq!(end.error.unwrap()["feedback"], "too dear");
    }

    #[test]
    fn a_budget_sent_to_another_request_is_refused() {
        let fixture = fixture("pause");
        let state = fixture.fold(&[
            run_started(),
            requested(1, None),
            generated(two_nodes(), None),
            request("q1", HitlKind::Approval, HitlSubject::Plan, None, Value::Null),
        ]);
        let command =
            Command::Resume { expected_plan_version: None, answer: approve(raise_calls(9)), actor: Default::default() };
        let refused = decide(&state, state.replan_limits.unwrap(), command, Utc::now(), |_, _: &Value| Vec::new());
        assert_eq!(refused.unwrap_err().code(), ErrorCode::InvalidRequest);
    }
}
