//! The settings the core reads. The server's `config` loads them with the rest of its settings
//! (defaults, file, environment); here they are plain data.

use serde::Deserialize;
use serde_json::Value;

/// How the planner asks the model for JSON; not every OpenAI-compatible server supports every form.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PlannerResponseFormat {
    JsonSchema,
    JsonObject,
    None,
}

/// Replanning when the configured defaults apply (an envelope's `policies.replan` overrides them).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplanSettings {
    pub enabled: bool,
    pub max_goal_condition_replans: u32,
    pub max_replans: u32,
}

/// Retries of failed model and capability calls (an envelope's `policies.retry` overrides them).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySettings {
    pub max_retries: u32,
    pub base_delay_secs: f64,
}

/// One entry of the optional facet catalog.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacetDefinition {
    pub description: Option<String>,
    pub schema: Option<Value>,
}
