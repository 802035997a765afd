//! The models: the default endpoint, more endpoints, the routes calls go along, the breaker,
//! and the prices of each model.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ConfigError, PlannerResponseFormat, Secret, Settings};
use flexrun_core::settings::{integer, optional_integer};
use flexrun_core::usage::{Micros, Price, Prices};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    pub base_url: String,
    pub api_key: Secret,
    pub model: String,
    #[serde(deserialize_with = "integer")]
    pub timeout_secs: u64,
    pub planner_response_format: PlannerResponseFormat,
    #[serde(deserialize_with = "integer")]
    pub max_response_bytes: usize,
    /// Model calls of this node in flight at once; more wait for a free slot.
    #[serde(deserialize_with = "integer")]
    pub max_concurrent_calls: usize,
    /// US dollars per million tokens, by model name (`[llm.prices."<model>"]`): read through
    /// [`Settings::prices`].
    #[serde(default)]
    prices: BTreeMap<String, PriceSettings>,
    /// More endpoints beside `default` (these settings), by name (`[llm.endpoints.<name>]`).
    #[serde(default)]
    pub endpoints: BTreeMap<String, EndpointSettings>,
    /// The chains of `<endpoint>/<model>` entries calls go along (`[llm.routes]`).
    #[serde(default)]
    pub routes: RouteSettings,
    /// When an endpoint is skipped after failures (`[llm.breaker]`).
    #[serde(default)]
    pub breaker: BreakerConfig,
}

/// A named model endpoint (`[llm.endpoints.<name>]`); what it leaves out is `[llm]`'s.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSettings {
    pub base_url: String,
    /// The environment variable holding its API key (never the key itself); none: no key.
    pub api_key_env: Option<String>,
    /// The model names it serves (routes may name only these; empty: any).
    #[serde(default)]
    pub models: Vec<String>,
    #[serde(default, deserialize_with = "optional_integer")]
    pub timeout_secs: Option<u64>,
    #[serde(default, deserialize_with = "optional_integer")]
    pub max_concurrent_calls: Option<usize>,
    pub planner_response_format: Option<PlannerResponseFormat>,
}

/// `[llm.routes]`: ordered fallback chains; left out: `default/<llm.model>`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSettings {
    #[serde(default)]
    pub planner: Option<Vec<String>>,
    /// For `ai` capabilities without `preferredModels` of their own.
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
}

/// `[llm.breaker]`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Failures in a row that open an endpoint's breaker.
    #[serde(deserialize_with = "integer")]
    pub failures: u32,
    /// How long an open breaker skips its endpoint before one call probes it.
    #[serde(deserialize_with = "integer")]
    pub cool_down_secs: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self { failures: 5, cool_down_secs: 30 }
    }
}

/// One model's prices as configured, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceSettings {
    input_per_mtok: f64,
    output_per_mtok: f64,
    /// Input tokens read from the provider's prompt cache; the input price when not set.
    cached_input_per_mtok: Option<f64>,
}

impl Settings {
    /// The model prices (`[llm.prices]`), each checked: a negative or unrepresentable price is
    /// refused with its key.
    pub fn prices(&self) -> Result<Prices, ConfigError> {
        let mut prices = BTreeMap::new();
        for (model, configured) in &self.llm.prices {
            let micros = |field: &'static str, value: f64| {
                Micros::from_dollars(value).ok_or_else(|| ConfigError::Price { model: model.clone(), field, value })
            };
            let input = micros("input_per_mtok", configured.input_per_mtok)?;
            let output = micros("output_per_mtok", configured.output_per_mtok)?;
            let cached_input = match configured.cached_input_per_mtok {
                Some(value) => micros("cached_input_per_mtok", value)?,
                None => input,
            };
            prices.insert(model.clone(), Price { input, output, cached_input });
        }
        Ok(Prices::new(prices))
    }
}
