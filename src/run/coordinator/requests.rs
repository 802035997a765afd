//! What a run asks of operators: approvals (of a plan, of the result), human tasks, and the
//! questions of nodes (CLARIFY signals); and the pause while it waits for them.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::{Coordinator, Effect, Failure, RunUpdate};
use crate::capability::{Capability, Clarification, Executor};
use crate::events::Event;
use crate::events::payload::{HitlKind, HitlRequest, HitlRequestInfo, HitlSubject, Log, PolicyInfo};
use crate::plan::{NodeStatus, PlanNode};
use crate::run::operator;
use crate::run::status::RunStatus;
use crate::store::hitl::{self, RequestRow};
use crate::store::{DbConn, StoreError, plans};

impl Coordinator {
    /// Pauses the run while nodes wait for operators: `awaiting_hitl` when a node asked a
    /// question, else `awaiting_human` for the human tasks.
    pub(super) async fn await_operator(&mut self) -> Result<(), StoreError> {
        let waiting = |wanted: NodeStatus| -> Vec<String> {
            let mut ids: Vec<String> =
                self.nodes.iter().filter(|(_, s)| **s == wanted).map(|(id, _)| id.clone()).collect();
            ids.sort();
            ids
        };
        let asking = waiting(NodeStatus::AwaitingHitl);
        let (to, message, nodes) = if self.awaiting_policy {
            (RunStatus::AwaitingHitl, "awaiting_policy_decision", asking)
        } else if asking.is_empty() {
            (RunStatus::AwaitingHuman, "awaiting_human_assignment", waiting(NodeStatus::AwaitingHuman))
        } else {
            (RunStatus::AwaitingHitl, "awaiting_clarification", asking)
        };
        let log = Event::Log(Log {
            severity: "info".into(),
            message: message.into(),
            details: Some(json!({"event": to.as_str(), "nodeIds": nodes})),
        });
        self.commit(vec![log], RunUpdate::status(to), |_| Ok(())).await
    }

    /// Pauses the run on an approval request about `subject`.
    pub(super) async fn request_approval(
        &mut self,
        subject: HitlSubject,
        context: Value,
        write: impl Fn(&mut DbConn) -> Result<(), StoreError> + Send + Sync + 'static,
    ) -> Result<(), StoreError> {
        let version = self.plan_version();
        let info = self.request(HitlKind::Approval, subject, operator::question(subject, version), None, context);
        let row = self.request_row(&info)?;
        let event = Event::HitlRequest(HitlRequest { request: info });
        self.commit(vec![event], RunUpdate::status(RunStatus::AwaitingHitl), move |conn| {
            write(conn)?;
            hitl::insert(conn, &row)
        })
        .await
    }

    /// The task of a human node: its request (the assignment is its context) and stored row.
    pub(super) fn human_task(
        &self,
        node: &PlanNode,
        capability: &Capability,
        at: DateTime<Utc>,
    ) -> Result<(HitlRequestInfo, RequestRow), StoreError> {
        let bundle = self.bundle(node);
        let mut instructions = bundle.instructions;
        if let Executor::Human { instructions: Some(own) } = &capability.executor {
            instructions.insert(0, own.clone());
        }
        let question = operator::question(HitlSubject::Node, self.plan_version());
        let mut info = self.request(HitlKind::HumanTask, HitlSubject::Node, question, Some(node), Value::Null);
        info.created_at = at.to_rfc3339_opts(SecondsFormat::Millis, true);
        info.context = json!({
            "taskId": info.id, "runId": bundle.run_id, "nodeId": node.id, "capabilityId": node.capability_id,
            "label": node.label, "status": "awaiting_submission", "objective": bundle.objective,
            "instructions": instructions, "inputs": bundle.inputs, "priorOutputs": bundle.prior_outputs,
            "outputFacets": node.output_facets, "outputContract": capability.registration.get("outputContract"),
            "createdAt": info.created_at,
        });
        let row = self.request_row(&info)?;
        Ok((info, row))
    }

    /// A node's capability asked an operator `question` (a CLARIFY signal). The request is staged
    /// and the node waits (`awaiting_hitl`); it runs again with the answer. Beyond the run's
    /// allowance of questions the node fails instead.
    pub(super) async fn ask_clarification(
        &mut self,
        node: &PlanNode,
        question: String,
        context: Option<Value>,
    ) -> Result<Option<Failure>, StoreError> {
        let limit = self.services.settings.limits.max_clarifications_per_run;
        if self.clarifications.len() >= limit as usize {
            let message = format!(
                "capability {} asked a question (\"{question}\") but this run's nodes already asked all {limit} \
                 questions it allows",
                node.capability_id
            );
            return self.record_node_failure(node, "clarification_limit", message, Vec::new()).await.map(Some);
        }
        let details = json!({"capabilityId": node.capability_id, "label": node.label, "context": context});
        let info = self.request(HitlKind::Clarify, HitlSubject::Node, question, Some(node), details);
        let row = self.request_row(&info)?;
        self.clarifications.push(Clarification {
            request_id: info.id.clone(),
            node_id: node.id.clone(),
            question: info.question.clone(),
            asked_at: info.created_at.clone(),
            answer: None,
            answered_at: None,
        });
        let (run_id, version, node_id) = self.node_key(node);
        // Committed with what follows at once: the next node starts, or the pause.
        self.stage(vec![Event::HitlRequest(HitlRequest { request: info })], RunUpdate::NONE, move |conn| {
            hitl::insert(conn, &row)?;
            plans::node_waiting(conn, (&run_id, version, &node_id), NodeStatus::AwaitingHitl.as_str())
        });
        self.node_retries.remove(&node.id);
        self.nodes.insert(node.id.clone(), NodeStatus::AwaitingHitl);
        Ok(None)
    }

    /// A runtime policy's `pause` or `hitl` action: the request is staged and no further node
    /// starts; once the nodes in flight have finished the run waits (`awaiting_hitl`).
    pub(super) fn ask_operator(
        &mut self,
        policy: PolicyInfo,
        question: String,
        node: Option<&PlanNode>,
        follow_ups: Value,
    ) -> Effect {
        let mut context = serde_json::to_value(&policy).unwrap_or_default();
        if let (Some(context), Some(follow_ups)) = (context.as_object_mut(), follow_ups.as_object()) {
            context.extend(follow_ups.clone());
        }
        let info = self.request(HitlKind::Approval, HitlSubject::Policy, question, node, context);
        match self.request_row(&info) {
            Ok(row) => {
                self.stage(vec![Event::HitlRequest(HitlRequest { request: info })], RunUpdate::NONE, move |conn| {
                    hitl::insert(conn, &row)
                });
                self.awaiting_policy = true;
                Effect::Continue
            }
            Err(error) => Effect::Failed(Failure::new("internal_error", error.to_string())),
        }
    }

    /// A new request of this run, created now.
    fn request(
        &self,
        kind: HitlKind,
        subject: HitlSubject,
        question: String,
        node: Option<&PlanNode>,
        context: Value,
    ) -> HitlRequestInfo {
        HitlRequestInfo {
            id: uuid::Uuid::now_v7().to_string(),
            kind,
            subject,
            question,
            plan_version: self.plan_version(),
            created_at: Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
            node_id: node.map(|n| n.id.clone()),
            context,
        }
    }

    /// The stored form of a request this run makes.
    fn request_row(&self, info: &HitlRequestInfo) -> Result<RequestRow, StoreError> {
        Ok(RequestRow {
            request_id: info.id.clone(),
            run_id: self.run_id(),
            kind: info.kind.as_str().into(),
            subject: info.subject.as_str().into(),
            plan_version: info.plan_version as i32,
            node_id: info.node_id.clone(),
            question: info.question.clone(),
            details: serde_json::to_string(info)?,
            status: "pending".into(),
            created_at: crate::store::now(),
            closed_at: None,
        })
    }
}
