//! `[budget]`: the budget a run gets when its envelope sets none, and the most it may ask for.

use serde::Deserialize;

use super::{ConfigError, Settings};
use flexrun_core::budget::BudgetDefaults;
use flexrun_core::settings::optional_integer;
use flexrun_core::usage::Micros;

/// `[budget]` as configured: read through [`Settings::budget`].
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BudgetSettings {
    default_max_cost_usd: Option<f64>,
    #[serde(default, deserialize_with = "optional_integer")]
    default_max_tokens: Option<u64>,
    #[serde(default, deserialize_with = "optional_integer")]
    default_max_model_calls: Option<u64>,
    ceiling_max_cost_usd: Option<f64>,
}

impl Settings {
    /// The budget defaults and ceiling (`[budget]`), checked: an amount must be above 0 (a
    /// limit of 0 would stop every run before its first call), and the default cost within the
    /// ceiling.
    pub fn budget(&self) -> Result<BudgetDefaults, ConfigError> {
        let configured = &self.budget;
        let dollars = |key: &'static str, value: Option<f64>| {
            value
                .map(|v| match Micros::from_dollars(v).filter(|m| m.0 > 0) {
                    Some(micros) => Ok(micros),
                    None => {
                        Err(ConfigError::Invalid { key, problem: format!("= {v} is not an amount of dollars above 0") })
                    }
                })
                .transpose()
        };
        let count = |key: &'static str, value: Option<u64>| match value {
            Some(0) => Err(ConfigError::Invalid { key, problem: "must be at least 1".into() }),
            other => Ok(other),
        };
        let defaults = BudgetDefaults {
            max_cost_usd: dollars("budget.default_max_cost_usd", configured.default_max_cost_usd)?,
            max_tokens: count("budget.default_max_tokens", configured.default_max_tokens)?,
            max_model_calls: count("budget.default_max_model_calls", configured.default_max_model_calls)?,
            ceiling_max_cost_usd: dollars("budget.ceiling_max_cost_usd", configured.ceiling_max_cost_usd)?,
        };
        if let (Some(default), Some(ceiling)) = (defaults.max_cost_usd, defaults.ceiling_max_cost_usd)
            && default > ceiling
        {
            let problem = format!("= {default} is above `budget.ceiling_max_cost_usd` ({ceiling})");
            return Err(ConfigError::Invalid { key: "budget.default_max_cost_usd", problem });
        }
        Ok(defaults)
    }
}
