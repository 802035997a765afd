//! What operators say to a run: a [`Command`] (answer its request, replan, cancel), with the
//! [`Answer`] to a request and the [`Actor`] who sent it. The vocabulary of the operator API, the
//! console, the CLI and the nodes that pass a cancel on; what a command does is decided in
//! [`decide::operator`](super::decide::operator).

use serde_json::Value;

use crate::budget::BudgetRaise;

/// Who acted, and why (recorded with the decision; sent to the node driving the run with a
/// cancel from another node).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Actor {
    /// Who, as authenticated: the name of the key the command came with.
    pub principal: String,
    /// `{id?, displayName?, email?}` as the operator described themselves.
    pub operator: Option<Value>,
    pub note: Option<String>,
}

/// What an operator asks of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `run.resume`: answer the pending request.
    Resume { expected_plan_version: Option<u32>, answer: Answer, actor: Actor },
    /// `runs/{id}/replan`: drop the waiting plan and plan again.
    Replan { feedback: Option<String>, actor: Actor },
    /// `runs/{id}/cancel`. `stopped` when this process's coordinator has just stopped the run.
    Cancel { stopped: bool, actor: Actor },
}

impl Command {
    /// Who sends the command.
    pub fn actor(&self) -> &Actor {
        match self {
            Self::Resume { actor, .. } | Self::Replan { actor, .. } | Self::Cancel { actor, .. } => actor,
        }
    }

    /// What the command is, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Resume { .. } => "resume",
            Self::Replan { .. } => "replan",
            Self::Cancel { .. } => "cancel",
        }
    }
}

/// An answer to the pending request.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Approve (or, with `approved: false`, reject) an approval request. A rejection with
    /// `feedback` asks for another plan when replans are left.
    /// Approving a budget request takes `budget`, the raised limits.
    Decide { request_id: Option<String>, approved: bool, feedback: Option<String>, budget: Option<BudgetRaise> },
    /// A human node's output. With `request_id`, only if the run still waits on that request:
    /// after a replan a new plan's node of the same id opens another (a page open on the old one
    /// must not answer the new).
    Submit { request_id: Option<String>, node_id: String, output: Value },
    /// A human node's task refused (`request_id` as for `Submit`).
    Decline { request_id: Option<String>, node_id: String, reason: String, note: Option<String> },
}
