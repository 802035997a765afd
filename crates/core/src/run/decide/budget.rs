//! The run's budget ([`crate::budget`]) at work: whether a model call may start, what reaching a
//! limit records (`budget_exceeded`, then a `budget` request or the run's failure), and what an
//! operator's answer to that request does.

use serde_json::{Value, json};

use super::{Failure, Run};
use crate::budget::{BudgetLimits, BudgetRaise, NotRaised, OnExceeded, Reached, Spent};
use crate::events::Event;
use crate::events::payload::*;

/// The error code of a run that ends on its budget.
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";

/// What reaching `reached` records. `replan`: the replan a planning round was for; `held`: nodes
/// whose next attempt was held back. With `pause`, the frames (`budget_exceeded`, the request) and
/// no failure; with `fail`, `budget_exceeded` and the failure the run ends with.
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

/// What an operator's answer to a budget request does to the run.
#[derive(Debug, Clone, PartialEq)]
pub enum Answered {
    /// Approved: the run goes on under these limits.
    Raised(BudgetLimits),
    /// Rejected: the run fails so.
    Ended(Failure),
}

/// An operator's answer to budget request `request` of a run that spent `spent` under `limits`:
/// approved with `raise`, the limits it goes on under — refused (the message says why) unless
/// they leave it room; rejected, the failure it ends with.
pub fn answer(
    request: &HitlRequestInfo,
    limits: Option<BudgetLimits>,
    spent: &Spent,
    approved: bool,
    raise: Option<BudgetRaise>,
) -> Result<Answered, String> {
    let context: Option<BudgetRequest> = serde_json::from_value(request.context.clone()).ok();
    if !approved {
        let failure = match &context {
            Some(r) => failure(&Reached { limit: r.limit, max: r.max, spent: r.spent }),
            None => Failure::new(BUDGET_EXCEEDED, "The run reached its budget"),
        };
        return Ok(Answered::Ended(failure));
    }
    let limits = limits.or(context.map(|r| r.budget));
    let (Some(limits), Some(raise)) = (limits, raise) else {
        return Err(format!(
            "the run waits for its budget to be raised (request {}): send `decision.budget` with a higher limit",
            request.id
        ));
    };
    limits.raised(&raise, spent).map(Answered::Raised).map_err(|e: NotRaised| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Amount, Limit};
    use crate::events::FrameKind;
    use crate::run::decide::testing::*;
    use crate::run::state::RunState;
    use crate::usage::Micros;

    pub(crate) fn fixture(on_exceeded: &str) -> Fixture {
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

    /// What reaching two model calls records in `phase`, `held` nodes held back.
    fn paused(fixture: &Fixture, state: &RunState, phase: BudgetPhase, held: &[&str]) -> (Vec<Event>, Option<Failure>) {
        let held = held.iter().map(|id| id.to_string()).collect();
        exceeded(&fixture.run(state), reached_calls(), phase, None, held, spent())
    }

    #[test]
    fn a_limit_reached_with_pause_asks_an_operator_with_what_was_spent() {
        let fixture = fixture("pause");
        let state = fixture.fold(&[run_started(), requested(1, None), generated(two_nodes(), None)]);
        let (events, failure) = paused(&fixture, &state, BudgetPhase::Execution, &["draft"]);
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
        let (events, failure) = paused(&fixture, &state, BudgetPhase::Planning, &[]);
        assert_eq!(events.len(), 1);
        let error = failure.expect("fails").error_json();
        assert_eq!((&error["code"], &error["limit"]), (&json!(BUDGET_EXCEEDED), &json!("modelCalls")));
        assert_eq!((error["max"].clone(), error["spent"].clone()), (json!(2), json!(2)));
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
        let (events, _) = paused(&fixture, &state, BudgetPhase::Execution, &["draft"]);
        apply_all(&mut state, &events);
        assert_eq!(state.nodes_in(crate::plan::NodeStatus::Pending), ["draft", "polish"]);
    }

    #[test]
    fn an_answer_raises_the_limits_or_ends_the_run() {
        let fixture = fixture("pause");
        let state = fixture.fold(&[run_started(), requested(1, None)]);
        let (events, _) = paused(&fixture, &state, BudgetPhase::Planning, &[]);
        let Event::HitlRequest(request) = &events[1] else { unreachable!() };
        let limits = state.budget;
        let raise = |calls| Some(BudgetRaise { max_model_calls: Some(calls), ..BudgetRaise::default() });
        let Ok(Answered::Raised(raised)) = answer(&request.request, limits, &spent(), true, raise(5)) else {
            panic!("raised")
        };
        assert_eq!((raised.max_model_calls, raised.max_cost_usd), (Some(5), Some(Micros(10_000))));
        assert!(answer(&request.request, limits, &spent(), true, raise(2)).unwrap_err().contains("modelCalls"));
        assert!(answer(&request.request, limits, &spent(), true, None).unwrap_err().contains("decision.budget"));
        let Ok(Answered::Ended(failure)) = answer(&request.request, limits, &spent(), false, None) else {
            panic!("ended")
        };
        assert_eq!(failure.code, BUDGET_EXCEEDED);
    }
}
