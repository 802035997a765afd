//! The commands on a whole run rather than on its request: a replan an operator asks for, and a
//! cancellation. Either closes the request the run waited on, if any.

use serde_json::json;

use super::{Decision, Operated, Pending, Refusal, closed};
use crate::events::Event;
use crate::events::payload::*;
use crate::run::decide::ending;
use crate::run::operator::Actor;
use crate::run::status::RunStatus;

pub(super) fn replan(run: &Operated, feedback: Option<String>, actor: Actor) -> Result<Decision, Refusal> {
    let state = run.state;
    match state.status {
        RunStatus::AwaitingHitl | RunStatus::AwaitingHuman => {}
        RunStatus::Planning => return Err(Refusal::PlanningInProgress),
        status => {
            return Err(Refusal::NotWaiting {
                status,
                message: format!(
                    "run {} is {status}; only a run waiting on an operator can be replanned",
                    state.run_id
                ),
            });
        }
    }
    if run.replans_left() == 0 {
        return Err(Refusal::ReplanLimit { limit: run.limits.max_replans });
    }
    let feedback = feedback.filter(|f| !f.trim().is_empty());
    let info = ReplanInfo::operator(ReplanReason::OperatorReplan, feedback.clone());
    let mut events: Vec<Event> =
        run.pending.iter().map(|pending| withdrawn(pending, RequestStatus::Superseded)).collect();
    events.push(Event::PolicyTriggered(PolicyTriggered {
        run_id: state.run_id.to_string(),
        trigger: Trigger {
            reason: ReplanReason::OperatorReplan,
            details: json!({"feedback": feedback, "operator": actor.operator, "note": actor.note}),
        },
        replan: info,
        usage: None,
    }));
    Ok(Decision::of(events))
}

pub(super) fn cancel(run: &Operated, stopped: bool, actor: Actor) -> Result<Decision, Refusal> {
    let state = run.state;
    if state.status == RunStatus::Cancelled && stopped {
        // This process's coordinator committed the cancellation.
        return Ok(Decision::of(Vec::new()));
    }
    if state.status.is_terminal() {
        return Err(Refusal::InvalidState {
            status: state.status,
            message: format!("run {} already ended: it is {}", state.run_id, state.status),
        });
    }
    let mut events: Vec<Event> =
        run.pending.iter().map(|pending| withdrawn(pending, RequestStatus::Cancelled)).collect();
    // Ended as the run's own coordinator ends a cancelled run: a `node_error` for each node its
    // log shows running. Without a coordinator here — it stopped on a database error, or its
    // node died — the log can still show a step started and never finished, which would
    // otherwise stay `running` in an ended run.
    events.extend(ending::stopped(state, ending::cancelled(&actor)));
    Ok(Decision::of(events))
}

/// The request `pending`, closed as `status` without an answer: the command goes past it.
fn withdrawn(pending: &Pending, status: RequestStatus) -> Event {
    Event::HitlResolved(HitlResolved { request: closed(pending, status), decision: None, replan: None, budget: None })
}
