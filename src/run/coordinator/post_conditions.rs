//! Capability post-conditions: checked on each candidate output before its node may complete. A
//! failure runs the node again (with the failures in its context) while attempts are left, then
//! does what the matching `onPostConditionFailed` policy says — by default, the node fails.

use std::time::Duration;

use serde_json::{Value, json};

use super::policies::{emitted, update};
use super::{Coordinator, Effect, GoalData, NodeRun, RunUpdate};
use crate::condition::{self, GoalConditionResult};
use crate::events::payload::{PolicyInfo, ReplanInfo};
use crate::plan::PlanNode;
use crate::policy::{self, Action, CompletedNode, RuntimePolicy, Trigger};
use crate::run::budget::Reason;
use crate::run::context::NodeOutput;
use crate::store::StoreError;

impl Coordinator {
    /// `node`'s post-conditions evaluated on the run context as `output` would leave it (empty
    /// when its capability has none).
    pub(super) fn post_condition_results(&self, node: &PlanNode, output: &Value) -> Vec<GoalConditionResult> {
        let Some(capability) = self.capabilities.get(&node.capability_id) else { return Vec::new() };
        if capability.post_conditions.is_empty() {
            return Vec::new();
        }
        let mut candidate = self.context.clone();
        candidate.record_output(NodeOutput {
            node_id: &node.id,
            capability_id: &node.capability_id,
            plan_version: self.plan_version(),
            output_facets: &node.output_facets,
            output,
            at: "",
        });
        let facts = GoalData { context: &candidate, run: self.run_facts() };
        condition::evaluate_all(&capability.post_conditions, &facts)
    }

    /// The `onPostConditionFailed` policy for `node` (if one matches) and the attempts it gets
    /// after a failure: the policy's `maxRetries`, else its capability's, else the configured.
    pub(super) fn post_condition_budget(&self, node: &PlanNode, output: &Value) -> (Option<RuntimePolicy>, u32) {
        let completed = CompletedNode {
            node_id: &node.id,
            capability_id: &node.capability_id,
            kind: &node.kind,
            stage: &node.stage,
            output,
        };
        let policy = policy::on_post_condition_failed(&self.envelope.runtime_policies, &completed).cloned();
        let from_policy = policy.as_ref().and_then(|p| match p.trigger {
            Trigger::OnPostConditionFailed { max_retries, .. } => max_retries,
            _ => None,
        });
        let from_capability = self.capabilities.get(&node.capability_id).and_then(|c| c.post_condition_retries);
        let retries =
            from_policy.or(from_capability).unwrap_or(self.services.settings.limits.post_condition_max_retries);
        (policy, retries)
    }

    /// `node`'s output failed its post-conditions (`results`). While attempts are left: a
    /// `policy_update {action: "retry"}` and the node's next attempt. Then the policy's action:
    /// `replan` (counted as a post-condition replan), `emit` (announced, then the node fails),
    /// `hitl` (an operator may accept the output anyway), or `fail`. While a replan is on its way (`replacing`) the node is left to it.
    pub(super) async fn post_conditions_failed(
        &mut self,
        node: &PlanNode,
        output: &Value,
        results: Vec<GoalConditionResult>,
        replacing: bool,
    ) -> Result<(Effect, Option<NodeRun>), StoreError> {
        if replacing {
            return Ok((Effect::Continue, None));
        }
        let (policy, max_retries) = self.post_condition_budget(node, &Value::Null);
        let attempts = self.post_conditions.failing.get(&node.id).map_or(0, |(a, _)| *a) + 1;
        let failed: Vec<GoalConditionResult> = results.iter().filter(|r| !r.satisfied).cloned().collect();
        let info = PolicyInfo {
            policy_id: policy
                .as_ref()
                .map_or_else(|| format!("{}.postConditions", node.capability_id), |p| p.id.clone()),
            trigger_kind: "onPostConditionFailed".into(),
            action: "retry".into(),
            node_id: Some(node.id.clone()),
            capability_id: Some(node.capability_id.clone()),
            rationale: None,
            request_id: None,
        };
        if attempts <= max_retries {
            self.post_conditions.failing.insert(node.id.clone(), (attempts, failed));
            let event = update(info, |u| {
                u.attempts = Some(attempts);
                u.max_attempts = Some(max_retries);
                u.post_condition_results = results;
            });
            self.stage(vec![event], RunUpdate::NONE, |_| Ok(()));
            return Ok((Effect::Continue, Some(self.run_node(node, Duration::ZERO))));
        }
        self.post_conditions.failing.remove(&node.id);
        let expressions: Vec<&str> = failed.iter().map(|r| r.expression.as_str()).collect();
        let message = format!(
            "output failed its capability's post-conditions after {attempts} attempt(s): {}",
            expressions.join("; ")
        );
        let effect = match policy.as_ref().map(|p| &p.action) {
            Some(Action::Replan { rationale }) => {
                let info = PolicyInfo {
                    action: "replan".into(),
                    rationale: rationale.clone().or(Some(message.clone())),
                    ..info
                };
                match self.budget.grant_replan(Reason::PostCondition) {
                    Ok(_) => Effect::Replan(ReplanInfo {
                        reason: "post_condition_failed".into(),
                        ..ReplanInfo::runtime_policy(info)
                    }),
                    Err(refused) => {
                        let message = format!("{message}; no replan is granted: {}", refused.message());
                        Effect::Failed(
                            self.record_node_failure(node, "post_condition_failed", message, Vec::new()).await?,
                        )
                    }
                }
            }
            Some(Action::Emit { event, payload }) => {
                let prelude = emitted(info, event, payload, results);
                Effect::Failed(self.record_node_failure(node, "post_condition_failed", message, prelude).await?)
            }
            Some(Action::Hitl { rationale, approve, reject }) => {
                let question = format!(
                    "Node \"{}\" failed its capability's post-conditions ({}){}. Approve to accept its output anyway.",
                    node.id,
                    expressions.join("; "),
                    rationale.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
                );
                let details = json!({
                    "approveAction": approve.as_ref().map(|a| a.name()),
                    "rejectAction": reject.as_ref().map(|a| a.name()),
                    "label": node.label, "candidateOutput": output, "postConditionResults": results,
                });
                self.ask_operator(PolicyInfo { action: "hitl".into(), ..info }, question, Some(node), details)
            }
            Some(Action::Fail { message: Some(custom) }) => Effect::Failed(
                self.record_node_failure(node, "post_condition_failed", custom.clone(), Vec::new()).await?,
            ),
            _ => Effect::Failed(self.record_node_failure(node, "post_condition_failed", message, Vec::new()).await?),
        };
        Ok((effect, None))
    }
}
