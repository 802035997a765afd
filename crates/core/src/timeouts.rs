//! Time limits: one model call, one `http` capability call, a whole run. The configuration sets
//! them (`llm.timeout_secs`, `limits.capability_timeout_secs`, `limits.run_timeout_secs`);
//! `policies.timeouts` of an envelope overrides them for its run.

use std::time::Duration;

use serde::Deserialize;

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
    pub fn resolve(overrides: &TimeoutOverrides, configured: Timeouts) -> Self {
        let or = |value: Option<u64>, default: Duration| value.map_or(default, |s| Duration::from_secs(s.max(1)));
        Self {
            run: or(overrides.run_seconds, configured.run),
            model_call: or(overrides.model_call_seconds, configured.model_call),
            capability_call: or(overrides.capability_call_seconds, configured.capability_call),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_overrides_settings() {
        let configured = Timeouts {
            run: Duration::from_secs(600),
            model_call: Duration::from_secs(60),
            capability_call: Duration::from_secs(30),
        };
        assert_eq!(Timeouts::resolve(&TimeoutOverrides::default(), configured), configured);
        let overrides =
            TimeoutOverrides { run_seconds: Some(30), model_call_seconds: None, capability_call_seconds: Some(5) };
        let resolved = Timeouts::resolve(&overrides, configured);
        assert_eq!((resolved.run, resolved.capability_call), (Duration::from_secs(30), Duration::from_secs(5)));
        assert_eq!(resolved.model_call, configured.model_call);
    }
}
