//! Runs stored before a run's `start` frame recorded the inputs and replan caps it was started
//! with. A reader completes such a `start` from the run's stored envelope as it folds the log,
//! the way the run was read then, so every other reader sees one kind of log. Only runs stored
//! before then go through here: nothing else reads a stored envelope to read a run. Pure: no I/O.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::events::payload::Start;
use crate::replan_budget::ReplanLimits;
use crate::settings::ReplanSettings;

/// What a run's `start` did not record, as its stored envelope gives it.
#[derive(Deserialize)]
struct StoredEnvelope {
    #[serde(default)]
    inputs: Map<String, Value>,
}

/// Completes `start` from `envelope` (the stored envelope's text) where it lacks the inputs or
/// the replan caps: the envelope's `inputs`, and its `policies.replan` over `settings`.
pub fn complete_start(start: &mut Start, envelope: &str, settings: &ReplanSettings) -> Result<(), serde_json::Error> {
    if start.inputs.is_some() && start.replan_limits.is_some() {
        return Ok(());
    }
    let value: Value = serde_json::from_str(envelope)?;
    if start.replan_limits.is_none() {
        start.replan_limits = Some(ReplanLimits::of_stored(&value, settings)?);
    }
    if start.inputs.is_none() {
        start.inputs = Some(StoredEnvelope::deserialize(value)?.inputs);
    }
    Ok(())
}

/// The replan cap of a run stored before its row kept one: its `envelope`'s over `settings`
/// (`None` if the envelope is unreadable).
pub fn max_replans(envelope: &str, settings: &ReplanSettings) -> Option<u32> {
    let value = serde_json::from_str(envelope).ok()?;
    ReplanLimits::of_stored(&value, settings).ok().map(|limits| limits.max_replans)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::run::decide::testing::bare_start;

    fn settings() -> ReplanSettings {
        ReplanSettings { enabled: true, max_goal_condition_replans: 2, max_replans: 4 }
    }

    #[test]
    fn a_bare_start_takes_the_envelopes_inputs_and_caps() {
        let envelope = json!({"objective": "o", "inputs": {"brief": {"topic": "t"}},
                              "policies": {"replan": {"maxReplans": 7}}});
        let mut start = bare_start();
        complete_start(&mut start, &envelope.to_string(), &settings()).unwrap();
        assert_eq!(start.inputs, Some(json!({"brief": {"topic": "t"}}).as_object().unwrap().clone()));
        let limits = ReplanLimits { enabled: true, max_goal_condition_replans: 2, max_replans: 7 };
        assert_eq!(start.replan_limits, Some(limits));
    }

    #[test]
    fn an_envelope_without_inputs_seeds_nothing() {
        let mut start = bare_start();
        complete_start(&mut start, r#"{"objective": "o"}"#, &settings()).unwrap();
        assert_eq!(start.inputs, Some(Map::new()));
    }

    #[test]
    fn a_start_that_recorded_both_is_left_alone_and_the_envelope_unread() {
        let limits = ReplanLimits { enabled: false, max_goal_condition_replans: 0, max_replans: 1 };
        let mut start = Start { inputs: Some(Map::new()), replan_limits: Some(limits), ..bare_start() };
        let before = start.clone();
        complete_start(&mut start, "not json at all", &settings()).unwrap();
        assert_eq!(start, before);
    }

    #[test]
    fn an_unreadable_envelope_is_an_error() {
        assert!(complete_start(&mut bare_start(), "{", &settings()).is_err());
        assert_eq!(max_replans("{", &settings()), None);
    }

    #[test]
    fn a_listed_runs_cap_is_its_envelopes_else_the_configured_one() {
        assert_eq!(max_replans(r#"{"policies": {"replan": {"maxReplans": 9}}}"#, &settings()), Some(9));
        assert_eq!(max_replans(r#"{"objective": "o"}"#, &settings()), Some(4));
    }
}
