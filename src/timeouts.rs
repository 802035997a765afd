//! Time limits: one model call, one `http` capability call, a whole run. The configuration sets
//! them (`llm.timeout_secs`, `limits.capability_timeout_secs`, `limits.run_timeout_secs`);
//! `policies.timeouts` of an envelope overrides them for its run.

use std::time::Duration;

use serde::Deserialize;

use crate::config::Settings;

/// `policies.timeouts` of an envelope (seconds; the schema bounds them to 1..=86400).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutOverrides {
    pub run_seconds: Option<u64>,
    pub model_call_seconds: Option<u64>,
    pub capability_call_seconds: Option<u64>,
}

/// The time limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From the run's start to its `complete`, restarts included.
    pub run: Duration,
    /// One Chat Completions call (planner or `ai` capability).
    pub model_call: Duration,
    /// One `http` capability call.
    pub capability_call: Duration,
}

impl Timeouts {
    /// The envelope's values where given, the configured ones otherwise.
    pub fn resolve(overrides: &TimeoutOverrides, settings: &Settings) -> Self {
        let seconds = |value: Option<u64>, default: u64| Duration::from_secs(value.unwrap_or(default).max(1));
        Self {
            run: seconds(overrides.run_seconds, settings.limits.run_timeout_secs),
            model_call: seconds(overrides.model_call_seconds, settings.llm.timeout_secs),
            capability_call: seconds(overrides.capability_call_seconds, settings.limits.capability_timeout_secs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_overrides_settings() {
        let settings = Settings::load_from(|_| None).unwrap();
        let defaults = Timeouts::resolve(&TimeoutOverrides::default(), &settings);
        assert_eq!(defaults.run, Duration::from_secs(settings.limits.run_timeout_secs));
        assert_eq!(defaults.model_call, Duration::from_secs(settings.llm.timeout_secs));
        let overrides =
            TimeoutOverrides { run_seconds: Some(30), model_call_seconds: None, capability_call_seconds: Some(5) };
        let resolved = Timeouts::resolve(&overrides, &settings);
        assert_eq!((resolved.run, resolved.capability_call), (Duration::from_secs(30), Duration::from_secs(5)));
        assert_eq!(resolved.model_call, defaults.model_call);
    }
}
