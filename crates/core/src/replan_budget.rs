//! The replan budget of a run: its caps (envelope `policies.replan`, else configuration) and its
//! persisted counters. Every replan is granted or refused here and nowhere else.

use serde::{Deserialize, Serialize};

use crate::envelope::ReplanOverrides;
use crate::settings::ReplanSettings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplanLimits {
    pub enabled: bool,
    pub max_goal_condition_replans: u32,
    pub max_replans: u32,
}

impl ReplanLimits {
    /// The limits of a stored run: its envelope's `policies.replan` (as stored, already
    /// validated) over the configured ones.
    pub fn of_stored(envelope: &serde_json::Value, settings: &ReplanSettings) -> Result<Self, serde_json::Error> {
        let policy: ReplanOverrides = envelope
            .pointer("/policies/replan")
            .map(|p| serde_json::from_value(p.clone()))
            .transpose()?
            .unwrap_or_default();
        Ok(Self::resolve(&policy, settings))
    }

    /// Replans still allowed after those `counts` made: `maxReplans` minus them. An operator's
    /// replan is refused at 0, so the console offers none then.
    pub fn replans_left(&self, counts: &ReplanCounts) -> u32 {
        self.max_replans.saturating_sub(counts.total)
    }

    /// The envelope's values where given, the configured ones otherwise.
    pub fn resolve(policy: &ReplanOverrides, settings: &ReplanSettings) -> Self {
        Self {
            enabled: policy.enabled.unwrap_or(settings.enabled),
            max_goal_condition_replans: policy
                .max_goal_condition_replans
                .unwrap_or(settings.max_goal_condition_replans),
            max_replans: policy.max_replans.unwrap_or(settings.max_replans),
        }
    }
}

/// Why a replan was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Disabled,
    GoalConditionLimit { limit: u32 },
    TotalLimit { limit: u32 },
}

impl Refused {
    pub fn code(self) -> &'static str {
        match self {
            Self::Disabled | Self::GoalConditionLimit { .. } => "goal_condition_replan_limit",
            Self::TotalLimit { .. } => "replan_limit",
        }
    }

    /// What a failure for this refusal reports: the replans counted against the limit that was
    /// reached, and that limit (none is allowed when replanning is disabled).
    pub fn attempts_and_limit(self, counts: &ReplanCounts) -> (u32, u32) {
        match self {
            Self::Disabled => (counts.goal_condition, 0),
            Self::GoalConditionLimit { limit } => (counts.goal_condition, limit),
            Self::TotalLimit { limit } => (counts.total, limit),
        }
    }

    pub fn message(self) -> String {
        match self {
            Self::Disabled => "Replanning is disabled for this run".into(),
            Self::GoalConditionLimit { limit } => {
                format!("Automatic goal condition replans exceeded the configured limit ({limit})")
            }
            Self::TotalLimit { limit } => format!("The run used all {limit} replans it is allowed"),
        }
    }
}

/// How many replans a run made, in total and by what asked for them. Counted by the frames that
/// grant them (`run::state`); the run row keeps a copy for lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplanCounts {
    /// Every replan of the run, whatever asked for it.
    pub total: u32,
    pub goal_condition: u32,
    pub capability_signal: u32,
    pub runtime_policy: u32,
    pub operator: u32,
    pub post_condition: u32,
    /// Replans after a node failed in a way a different plan may avoid. Not a column of the run
    /// row: `total` covers them there.
    #[serde(default)]
    pub node_error: u32,
}

/// A run's caps and what it used of them: whether one more replan is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplanBudget {
    pub limits: ReplanLimits,
    pub counts: ReplanCounts,
}

/// A run's replan budget as `GET /runs/{id}` and `plan_requested` show it: the caps and what was
/// used of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetView {
    #[serde(flatten)]
    pub limits: ReplanLimits,
    pub used: ReplanCounts,
}

impl ReplanBudget {
    pub fn new(limits: ReplanLimits, counts: ReplanCounts) -> Self {
        Self { limits, counts }
    }

    pub fn view(&self) -> BudgetView {
        BudgetView { limits: self.limits, used: self.counts }
    }

    /// Whether one more replan (asked for by anything but failed goal conditions) is granted; if
    /// so, the run's replan number it would be. It is counted when the frame that asks for it is
    /// recorded (`run::state`).
    pub fn grant_replan(&self) -> Result<u32, Refused> {
        self.check_total()?;
        Ok(self.counts.total + 1)
    }

    /// Whether one more replan for failed goal conditions is granted; if so, its number among
    /// goal-condition replans.
    pub fn grant_goal_condition_replan(&self) -> Result<u32, Refused> {
        if self.limits.enabled && self.counts.goal_condition >= self.limits.max_goal_condition_replans {
            return Err(Refused::GoalConditionLimit { limit: self.limits.max_goal_condition_replans });
        }
        self.check_total()?;
        Ok(self.counts.goal_condition + 1)
    }

    fn check_total(&self) -> Result<(), Refused> {
        if !self.limits.enabled {
            return Err(Refused::Disabled);
        }
        if self.counts.total >= self.limits.max_replans {
            return Err(Refused::TotalLimit { limit: self.limits.max_replans });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(enabled: bool, goal: u32, total: u32) -> ReplanLimits {
        ReplanLimits { enabled, max_goal_condition_replans: goal, max_replans: total }
    }

    fn budget(enabled: bool, goal: u32, total: u32, used: (u32, u32)) -> ReplanBudget {
        let counts = ReplanCounts { goal_condition: used.0, total: used.1, ..ReplanCounts::default() };
        ReplanBudget::new(limits(enabled, goal, total), counts)
    }

    #[test]
    fn grants_up_to_the_goal_condition_cap() {
        assert_eq!(budget(true, 2, 4, (0, 0)).grant_goal_condition_replan(), Ok(1));
        assert_eq!(budget(true, 2, 4, (1, 1)).grant_goal_condition_replan(), Ok(2));
        assert_eq!(
            budget(true, 2, 4, (2, 2)).grant_goal_condition_replan(),
            Err(Refused::GoalConditionLimit { limit: 2 })
        );
    }

    #[test]
    fn total_cap_and_disabled() {
        assert_eq!(budget(true, 5, 1, (0, 0)).grant_goal_condition_replan(), Ok(1));
        assert_eq!(budget(true, 5, 1, (1, 1)).grant_goal_condition_replan(), Err(Refused::TotalLimit { limit: 1 }));
        assert_eq!(budget(false, 5, 5, (0, 0)).grant_goal_condition_replan(), Err(Refused::Disabled));
        let refused = budget(true, 0, 5, (0, 0)).grant_goal_condition_replan().unwrap_err();
        assert_eq!(refused.code(), "goal_condition_replan_limit");
    }

    #[test]
    fn every_reason_shares_the_total() {
        assert_eq!(budget(true, 1, 3, (1, 2)).grant_replan(), Ok(3));
        assert_eq!(budget(true, 1, 3, (1, 3)).grant_replan(), Err(Refused::TotalLimit { limit: 3 }));
        assert_eq!(
            budget(true, 1, 3, (1, 2)).grant_goal_condition_replan(),
            Err(Refused::GoalConditionLimit { limit: 1 })
        );
        assert_eq!(budget(false, 1, 2, (0, 0)).grant_replan(), Err(Refused::Disabled));
    }

    #[test]
    fn envelope_overrides_settings() {
        let settings = ReplanSettings { enabled: true, max_goal_condition_replans: 2, max_replans: 4 };
        let policy = ReplanOverrides { enabled: None, max_goal_condition_replans: Some(1), max_replans: None };
        assert_eq!(ReplanLimits::resolve(&policy, &settings), limits(true, 1, 4));
    }
}
