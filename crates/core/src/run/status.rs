//! The run status state machine: every allowed transition is listed here and nowhere else.
//! The store applies a transition as a conditional update on the expected current status, so two
//! writers can never both win.

use serde::{Deserialize, Serialize};

/// Where a run is in its life.
#[cfg_attr(feature = "diesel", derive(diesel::expression::AsExpression, diesel::deserialize::FromSqlRow))]
#[cfg_attr(feature = "diesel", diesel(sql_type = diesel::sql_types::Text))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Accepted and stored; the coordinator has not started planning.
    Pending,
    /// Waiting for the planner (first plan or a replan).
    Planning,
    /// Executing plan nodes or evaluating goal conditions.
    Running,
    /// Paused until an operator answers a HITL request.
    AwaitingHitl,
    /// Paused until a person submits a human node's output.
    AwaitingHuman,
    Completed,
    Failed,
    Cancelled,
}

use RunStatus::*;

impl RunStatus {
    pub const ALL: [RunStatus; 8] =
        [Pending, Planning, Running, AwaitingHitl, AwaitingHuman, Completed, Failed, Cancelled];

    /// The statuses a run may move to from this one.
    pub fn successors(self) -> &'static [RunStatus] {
        match self {
            // A fork's first commit installs its parent's plan: it runs without planning.
            Pending => &[Planning, Running, Failed, Cancelled],
            Planning => &[Running, AwaitingHitl, Failed, Cancelled],
            Running => &[Planning, AwaitingHitl, AwaitingHuman, Completed, Failed, Cancelled],
            AwaitingHitl | AwaitingHuman => &[Running, Planning, Failed, Cancelled],
            Completed | Failed | Cancelled => &[],
        }
    }

    pub fn can_become(self, next: RunStatus) -> bool {
        self.successors().contains(&next)
    }

    /// No transition leaves this status.
    pub fn is_terminal(self) -> bool {
        self.successors().is_empty()
    }

    /// The statuses of a run a coordinator is (or should be) working on.
    pub const ACTIVE: [RunStatus; 3] = [Pending, Planning, Running];

    /// A coordinator is (or should be) working on the run.
    pub fn is_active(self) -> bool {
        Self::ACTIVE.contains(&self)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Pending => "pending",
            Planning => "planning",
            Running => "running",
            AwaitingHitl => "awaiting_hitl",
            AwaitingHuman => "awaiting_human",
            Completed => "completed",
            Failed => "failed",
            Cancelled => "cancelled",
        }
    }
}

/// A status name that flexrun does not know.
pub type UnknownStatus = crate::vocabulary::UnknownWord;

crate::stored_as_text!(RunStatus, "run status");

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole transition table, row by row: (from, to, allowed).
    #[test]
    fn transition_table() {
        let allowed: &[(RunStatus, &[RunStatus])] = &[
            (Pending, &[Planning, Running, Failed, Cancelled]),
            (Planning, &[Running, AwaitingHitl, Failed, Cancelled]),
            (Running, &[Planning, AwaitingHitl, AwaitingHuman, Completed, Failed, Cancelled]),
            (AwaitingHitl, &[Running, Planning, Failed, Cancelled]),
            (AwaitingHuman, &[Running, Planning, Failed, Cancelled]),
            (Completed, &[]),
            (Failed, &[]),
            (Cancelled, &[]),
        ];
        for (from, targets) in allowed {
            for to in RunStatus::ALL {
                assert_eq!(from.can_become(to), targets.contains(&to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn terminal_and_active() {
        let terminal: Vec<_> = RunStatus::ALL.into_iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(terminal, [Completed, Failed, Cancelled]);
        let active: Vec<_> = RunStatus::ALL.into_iter().filter(|s| s.is_active()).collect();
        assert_eq!(active, [Pending, Planning, Running]);
    }

    #[test]
    fn names_round_trip() {
        for status in RunStatus::ALL {
            assert_eq!(status.as_str().parse::<RunStatus>().unwrap(), status);
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        assert!("paused".parse::<RunStatus>().is_err());
    }
}
