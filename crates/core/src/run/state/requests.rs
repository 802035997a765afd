//! What operator requests do to a run's state: a request opened (an approval, a node's question,
//! a runtime policy's pause) and a request closed (answered, superseded or cancelled).

use super::{ApplyError, At, RunState, rfc3339};
use crate::capability::Clarification;
use crate::events::payload::*;
use crate::mcp::question::ToolQuestion;
use crate::plan::NodeStatus;
use crate::run::status::RunStatus;

/// An operator's decision on a runtime policy's request, for its follow-up action.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyFollowUp {
    pub request_id: String,
    pub policy_id: String,
    pub node_id: Option<String>,
    pub approved: bool,
}

impl RunState {
    pub(super) fn request_opened(&mut self, at: At, request: &HitlRequestInfo) -> Result<(), ApplyError> {
        match (request.kind, request.subject) {
            (_, HitlSubject::Policy) => {
                let policy = request.policy();
                self.policy_acted(policy.as_ref());
                if let Some(node_id) = &request.node_id {
                    self.post_conditions.failing.remove(node_id);
                }
            }
            // A node asked a question: it waits for the answer.
            (HitlKind::Clarify, _) => {
                let node_id = request.node_id.clone().unwrap_or_default();
                self.set_node(at.seq, "hitl_request", &node_id, NodeStatus::AwaitingHitl)?;
                self.clarifications.push(Clarification {
                    request_id: request.id.clone(),
                    node_id,
                    question: request.question.clone(),
                    asked_at: request.created_at.clone(),
                    answer: None,
                    answered_at: None,
                    tool_question: ToolQuestion::from_context(&request.context),
                });
            }
            // An approval of a plan or of the result: the run waits for it.
            _ => self.move_to(at.seq, "hitl_request", RunStatus::AwaitingHitl)?,
        }
        self.requests.push(request.clone());
        Ok(())
    }

    pub(super) fn request_closed(&mut self, at: At, resolved: &HitlResolved) -> Result<(), ApplyError> {
        let id = &resolved.request.id;
        let request = self.requests.iter().position(|r| &r.id == id).map(|i| self.requests.remove(i));
        // Only an operator's action restarts the clock of the run's time limit.
        self.operator_at = Some(at.timestamp);
        let Some(decision) = &resolved.decision else {
            // Superseded or cancelled: what follows (a replan, the run's end) moves the run.
            return Ok(());
        };
        let approved = decision.decision == Verdict::Approved;
        self.completion_approved |= approved && resolved.request.subject == HitlSubject::Completion;
        let node_approved =
            (resolved.request.kind, resolved.request.subject) == (HitlKind::Approval, HitlSubject::Node);
        if let Some(node_id) = request.as_ref().and_then(|r| r.node_id.clone()).filter(|_| approved && node_approved) {
            self.approved_nodes.push(node_id);
        }
        if let Some(policy) = request.as_ref().and_then(HitlRequestInfo::policy) {
            self.policy_follow_up = Some(PolicyFollowUp {
                request_id: id.clone(),
                policy_id: policy.policy_id,
                node_id: request.as_ref().and_then(|r| r.node_id.clone()),
                approved,
            });
        }
        if let Some(answer) = &decision.answer {
            self.answered(at, id, answer)?;
        }
        if let Some(raised) = resolved.budget {
            self.budget = Some(raised);
        }
        match &resolved.replan {
            Some(replan) => {
                self.replan = Some(replan.clone());
                self.move_to(at.seq, "hitl_resolved", RunStatus::Planning)
            }
            // A raised budget: the run goes back to what it was doing, planning (the replan it was
            // to ask for, if any) or running.
            None => match request.as_ref().and_then(budget_request) {
                Some(BudgetRequest { phase: BudgetPhase::Planning, replan, .. }) => {
                    if replan.is_some() {
                        self.replan = replan;
                    }
                    self.move_to(at.seq, "hitl_resolved", RunStatus::Planning)
                }
                _ => self.move_to(at.seq, "hitl_resolved", RunStatus::Running),
            },
        }
    }

    /// An operator answered a node's question: the node runs again, with the answer.
    fn answered(&mut self, at: At, request_id: &str, answer: &str) -> Result<(), ApplyError> {
        let Some(asked) = self.clarifications.iter_mut().find(|c| c.request_id == request_id) else {
            return Ok(());
        };
        asked.answer = Some(answer.to_string());
        asked.answered_at = Some(rfc3339(at.timestamp));
        let node_id = asked.node_id.clone();
        if self.nodes.get(node_id.as_str()) == Some(&NodeStatus::AwaitingHitl) {
            self.set_node(at.seq, "hitl_resolved", &node_id, NodeStatus::Pending)?;
        }
        Ok(())
    }
}

/// A budget request's context: where its run stopped.
fn budget_request(request: &HitlRequestInfo) -> Option<BudgetRequest> {
    (request.kind == HitlKind::Budget).then(|| serde_json::from_value(request.context.clone()).ok()).flatten()
}
