//! A goal condition or post-condition as pages show its result: facet, path, the condition as
//! written, the value observed, pass or fail.

use crate::condition::GoalConditionResult;

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
    pub fn of(result: &GoalConditionResult) -> Self {
        Self {
            facet: result.facet.clone(),
            path: result.path.clone(),
            condition: result.dsl.clone().unwrap_or_else(|| result.expression.clone()),
            observed: result
                .observed_value
                .as_ref()
                .map_or_else(|| "—".into(), |v| crate::excerpt::excerpt(&v.to_string(), 200).into_owned()),
            satisfied: result.satisfied,
        }
    }
}
