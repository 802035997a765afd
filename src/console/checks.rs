//! A goal condition or post-condition as pages show its result: facet, path, the condition as
//! written, the value observed (redacted, as the API shows it), pass or fail.

use crate::condition::GoalConditionResult;
use crate::excerpt::excerpt;
use crate::redact::Redaction;

/// One condition as an evaluation left it.
pub struct Check {
    pub facet: String,
    pub path: String,
    pub condition: String,
    pub observed: String,
    pub satisfied: bool,
}

impl Check {
    /// A goal condition or post-condition as an evaluation left it.
    pub fn of(result: &GoalConditionResult, redaction: &Redaction) -> Self {
        Self {
            facet: result.facet.clone(),
            path: result.path.clone(),
            condition: result.dsl.clone().unwrap_or_else(|| result.expression.clone()),
            observed: result
                .observed_value
                .as_ref()
                .map_or_else(|| "—".into(), |v| excerpt(&redaction.value(v.clone()).to_string(), 200).into_owned()),
            satisfied: result.satisfied,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_observed_value_is_shown_redacted() {
        let result: GoalConditionResult = serde_json::from_value(json!({
            "facet": "brief", "path": "", "expression": "{}", "satisfied": true,
            "observedValue": {"topic": "flexrun", "api_key": "sk-observed"}
        }))
        .unwrap();
        let check = Check::of(&result, &Redaction::default());
        assert!(check.observed.contains("flexrun") && check.observed.contains("[redacted]"), "{}", check.observed);
        assert!(!check.observed.contains("sk-observed"));
    }
}
