//! What the coordinator does with a capability's signal (see [`crate::capability::signal`]).

use serde_json::{Value, json};

use super::{Coordinator, Effect, RunUpdate};
use crate::capability::Signal;
use crate::events::Event;
use crate::events::payload::{PolicyTriggered, ReplanInfo, SignalInfo, Trigger};
use crate::plan::PlanNode;
use crate::run::budget::Reason;
use crate::store::{StoreError, hitl, plans};

impl Coordinator {
    pub(super) async fn on_signal(&mut self, node: &PlanNode, signal: Signal) -> Result<Effect, StoreError> {
        match signal {
            Signal::Clarify { question, context } => {
                Ok(match self.ask_clarification(node, question, context).await? {
                    Some(failure) => Effect::Failed(failure),
                    None => Effect::Continue,
                })
            }
            Signal::Replan { reason, details } => {
                self.replan_signal(node, reason, details.unwrap_or(Value::Null)).await
            }
        }
    }

    /// A capability found the remaining plan invalid. A granted replan is counted now and
    /// announced when it starts ([`Self::announce_replan`]); a refused one fails the node with the
    /// signal's reason in its error.
    async fn replan_signal(&mut self, node: &PlanNode, reason: String, details: Value) -> Result<Effect, StoreError> {
        self.node_retries.remove(&node.id);
        match self.budget.grant_replan(Reason::CapabilitySignal) {
            Ok(_) => Ok(Effect::Replan(ReplanInfo::capability_signal(SignalInfo {
                node_id: node.id.clone(),
                capability_id: node.capability_id.clone(),
                reason,
                details,
            }))),
            Err(refused) => {
                let message = format!(
                    "capability {} signalled REPLAN (\"{reason}\") but no replan is granted: {}",
                    node.capability_id,
                    refused.message()
                );
                let failure = self.record_node_failure(node, "replan_signal_refused", message, Vec::new()).await?;
                Ok(Effect::Failed(failure.detail("signal", json!({"reason": reason, "details": details}))))
            }
        }
    }

    /// Stages the `policy_triggered` frame of a granted replan that a signal or a runtime policy
    /// asked for (committed with the replan's first `plan_requested`): the current plan's
    /// unfinished nodes are discarded, and requests still open for them (questions, human tasks)
    /// are superseded.
    pub(super) fn announce_replan(&mut self, replan: &ReplanInfo) {
        let details = replan.details();
        let event = Event::PolicyTriggered(PolicyTriggered {
            run_id: self.run_id(),
            trigger: Trigger { reason: replan.reason.clone(), details },
            replan: replan.clone(),
        });
        let (run_id, version) = (self.run_id(), self.plan_version() as i32);
        let now = crate::store::now();
        self.stage(vec![event], RunUpdate::NONE, move |conn| {
            plans::discard_unfinished(conn, &run_id, version)?;
            hitl::close_all(conn, &run_id, "superseded", now)
        });
    }
}
