//! The replan budget of a run: its caps (envelope `policies.replan`, else configuration) and its
//! persisted counters. Every replan is granted or refused here and nowhere else.

use serde::Serialize;

use crate::config::ReplanSettings;
use crate::envelope::ReplanPolicy;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplanLimits {
    pub enabled: bool,
    pub max_goal_condition_replans: u32,
    pub max_replans: u32,
}

impl ReplanLimits {
    /// The envelope's values where given, the configured ones otherwise.
    pub fn resolve(policy: &ReplanPolicy, settings: &ReplanSettings) -> Self {
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplanBudget {
    pub limits: ReplanLimits,
    pub goal_condition_replans: u32,
    pub replans: u32,
}

impl ReplanBudget {
    pub fn new(limits: ReplanLimits) -> Self {
        Self { limits, goal_condition_replans: 0, replans: 0 }
    }

    /// Grants one more replan for another reason than failed goal conditions (a capability's
    /// REPLAN signal) and counts it; returns the run's replan number.
    pub fn grant_replan(&mut self) -> Result<u32, Refused> {
        if !self.limits.enabled {
            return Err(Refused::Disabled);
        }
        if self.replans >= self.limits.max_replans {
            return Err(Refused::TotalLimit { limit: self.limits.max_replans });
        }
        self.replans += 1;
        Ok(self.replans)
    }

    /// Grants one more replan for failed goal conditions and counts it; returns its number.
    pub fn grant_goal_condition_replan(&mut self) -> Result<u32, Refused> {
        let limits = self.limits;
        if !limits.enabled {
            return Err(Refused::Disabled);
        }
        if self.goal_condition_replans >= limits.max_goal_condition_replans {
            return Err(Refused::GoalConditionLimit { limit: limits.max_goal_condition_replans });
        }
        if self.replans >= limits.max_replans {
            return Err(Refused::TotalLimit { limit: limits.max_replans });
        }
        self.goal_condition_replans += 1;
        self.replans += 1;
        Ok(self.goal_condition_replans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(enabled: bool, goal: u32, total: u32) -> ReplanLimits {
        ReplanLimits { enabled, max_goal_condition_replans: goal, max_replans: total }
    }

    #[test]
    fn grants_up_to_the_goal_condition_cap() {
        let mut budget = ReplanBudget::new(limits(true, 2, 4));
        assert_eq!(budget.grant_goal_condition_replan(), Ok(1));
        assert_eq!(budget.grant_goal_condition_replan(), Ok(2));
        assert_eq!(budget.grant_goal_condition_replan(), Err(Refused::GoalConditionLimit { limit: 2 }));
        assert_eq!((budget.goal_condition_replans, budget.replans), (2, 2));
    }

    #[test]
    fn total_cap_and_disabled() {
        let mut budget = ReplanBudget::new(limits(true, 5, 1));
        assert_eq!(budget.grant_goal_condition_replan(), Ok(1));
        assert_eq!(budget.grant_goal_condition_replan(), Err(Refused::TotalLimit { limit: 1 }));
        let mut off = ReplanBudget::new(limits(false, 5, 5));
        assert_eq!(off.grant_goal_condition_replan(), Err(Refused::Disabled));
        assert_eq!(
            ReplanBudget::new(limits(true, 0, 5)).grant_goal_condition_replan().unwrap_err().code(),
            "goal_condition_replan_limit"
        );
    }

    #[test]
    fn other_replans_count_toward_the_total_only() {
        let mut budget = ReplanBudget::new(limits(true, 1, 2));
        assert_eq!(budget.grant_replan(), Ok(1));
        assert_eq!(budget.grant_goal_condition_replan(), Ok(1));
        assert_eq!(budget.grant_replan(), Err(Refused::TotalLimit { limit: 2 }));
        assert_eq!((budget.goal_condition_replans, budget.replans), (1, 2));
        assert_eq!(ReplanBudget::new(limits(false, 1, 2)).grant_replan(), Err(Refused::Disabled));
    }

    #[test]
    fn envelope_overrides_settings() {
        let settings = ReplanSettings { enabled: true, max_goal_condition_replans: 2, max_replans: 4 };
        let policy = ReplanPolicy { enabled: None, max_goal_condition_replans: Some(1), max_replans: None };
        assert_eq!(ReplanLimits::resolve(&policy, &settings), limits(true, 1, 4));
    }
}
