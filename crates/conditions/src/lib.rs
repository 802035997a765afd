//! flexrun's condition language: predicates over a run's context that must all hold before a run
//! may complete (its goal conditions, a capability's post-conditions, runtime policies' `when`).
//!
//! A condition picks a value with a JSON Pointer inside one facet ([`FacetPath`]) and evaluates
//! a JSON-Logic rule on it ([`Rule`], compiled once); [`dsl`] compiles the condition DSL
//! (`post.quality_score >= 0.8 && all(tags, t, t != "")`) to JSON-Logic against a catalog of the
//! variables a condition may read. Everything here is pure — no I/O — so it is usable on its own:
//! see `README.md` and `examples/`.

pub mod dsl;
mod logic;
mod path;
pub mod suggest;
pub mod work;

pub use logic::{RUN_CONTEXT_VAR, RUN_VAR, Rule};
pub use path::FacetPath;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// A validated goal condition of an envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct GoalCondition {
    pub facet: String,
    pub path: FacetPath,
    /// The DSL as written, when the condition was written in DSL.
    pub dsl: Option<String>,
    /// How the condition is shown: its canonical DSL (also for JSON-Logic the DSL can express),
    /// else the JSON-Logic text.
    pub expression: String,
    pub rule: Rule,
    /// Canonical paths of the catalog variables it reads.
    pub variables: Vec<String>,
}

/// The outcome of one goal condition (persisted, sent on `complete`, listed in repair prompts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalConditionResult {
    pub facet: String,
    pub path: String,
    pub expression: String,
    pub satisfied: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dsl: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json_logic: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_value: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Read access to the run context, as goal evaluation needs it.
pub trait FacetSource {
    /// The current value of a facet, if any node or input has written it.
    fn facet_value(&self, facet: &str) -> Option<&Value>;
    /// The whole run context as `{facets: {<name>: {value, updatedAt, provenance}}}`.
    fn snapshot(&self) -> Value;
    /// Facts about the run, read by `run.*` variables (`{latencyMs, revisionCount, …}`).
    fn run_facts(&self) -> Value {
        json!({})
    }
}

/// Evaluates every condition (AND semantics are the caller's: see [`all_satisfied`]).
pub fn evaluate_all(conditions: &[GoalCondition], context: &impl FacetSource) -> Vec<GoalConditionResult> {
    let mut snapshot = None;
    conditions
        .iter()
        .map(|condition| {
            let snapshot =
                condition.rule.reads_run_context().then(|| &*snapshot.get_or_insert_with(|| context.snapshot()));
            evaluate(condition, context, snapshot)
        })
        .collect()
}

/// Whether every result holds.
pub fn all_satisfied(results: &[GoalConditionResult]) -> bool {
    results.iter().all(|r| r.satisfied)
}

fn evaluate(condition: &GoalCondition, context: &impl FacetSource, snapshot: Option<&Value>) -> GoalConditionResult {
    let mut result = GoalConditionResult {
        facet: condition.facet.clone(),
        path: condition.path.as_written().to_string(),
        expression: condition.expression.clone(),
        satisfied: false,
        dsl: condition.dsl.clone(),
        json_logic: Some(condition.rule.source().clone()),
        observed_value: None,
        error: None,
    };
    let Some(facet) = context.facet_value(&condition.facet) else {
        result.error = Some(format!("Facet \"{}\" not found in run context.", condition.facet));
        return result;
    };
    let Some(observed) = condition.path.resolve(facet) else {
        result.error =
            Some(format!("Path \"{}\" did not resolve within facet \"{}\".", condition.path, condition.facet));
        return result;
    };
    let data = evaluation_data(condition, observed, context, snapshot);
    match condition.rule.holds(&data) {
        Ok(holds) => result.satisfied = holds,
        Err(message) => result.error = Some(format!("Evaluation failed: {message}")),
    }
    result.observed_value = Some(observed.clone());
    result
}

/// The data a rule sees: an object or array as is; a scalar wrapped as `{<last segment>: v}`
/// (or `{"value": v}` at the root), so `{"var":"status"}` works for path `/asset/status`. Objects
/// (and wrapped scalars) also carry the run context under `metadata.runContextSnapshot` and the run
/// facts under `run`, each only when the rule reads them. Arrays are passed unchanged: they cannot
/// carry extra keys.
fn evaluation_data<'v>(
    condition: &GoalCondition,
    observed: &'v Value,
    context: &impl FacetSource,
    snapshot: Option<&Value>,
) -> Cow<'v, Value> {
    let reads_run = condition.rule.reads_run();
    let mut data = match observed {
        // The common case needs no copy: the value is the data as it is.
        Value::Object(_) if snapshot.is_none() && !reads_run => return Cow::Borrowed(observed),
        Value::Array(_) => return Cow::Borrowed(observed),
        Value::Object(_) => observed.clone(),
        scalar => {
            let key = condition.path.last_segment().unwrap_or_else(|| "value".to_string());
            Value::Object(Map::from_iter([(key, scalar.clone())]))
        }
    };
    if let Value::Object(map) = &mut data {
        if let Some(snapshot) = snapshot {
            let metadata = map.entry("metadata").or_insert_with(|| json!({}));
            if let Value::Object(metadata) = metadata {
                metadata.entry("runContextSnapshot").or_insert_with(|| snapshot.clone());
            }
        }
        if reads_run {
            map.entry(crate::RUN_VAR).or_insert_with(|| context.run_facts());
        }
    }
    Cow::Owned(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Facets(HashMap<String, Value>);

    impl FacetSource for Facets {
        fn facet_value(&self, facet: &str) -> Option<&Value> {
            self.0.get(facet)
        }
        fn snapshot(&self) -> Value {
            let facets: Map<String, Value> = self.0.iter().map(|(k, v)| (k.clone(), json!({"value": v}))).collect();
            json!({"facets": facets})
        }
    }

    fn condition(facet: &str, path: &str, rule: Value) -> GoalCondition {
        GoalCondition {
            facet: facet.into(),
            path: FacetPath::parse(path).unwrap(),
            dsl: None,
            expression: rule.to_string(),
            rule: Rule::compile(rule).unwrap(),
            variables: vec![],
        }
    }

    fn context() -> Facets {
        Facets(HashMap::from([(
            "post".to_string(),
            json!({"quality_score": 0.6, "variants": [{"text": "a"}], "status": "draft"}),
        )]))
    }

    #[test]
    fn scalar_is_wrapped_by_its_last_segment() {
        let c = condition("post", "/status", json!({"==": [{"var": "status"}, "draft"]}));
        let r = &evaluate_all(&[c], &context())[0];
        assert!(r.satisfied, "{r:?}");
        assert_eq!(r.observed_value, Some(json!("draft")));
        assert_eq!(r.error, None);
    }

    #[test]
    fn object_is_the_data_and_failure_keeps_the_observed_value() {
        let c = condition("post", "", json!({">=": [{"var": "quality_score"}, 0.8]}));
        let r = &evaluate_all(&[c], &context())[0];
        assert!(!r.satisfied);
        assert_eq!(r.observed_value.as_ref().unwrap()["quality_score"], json!(0.6));
    }

    #[test]
    fn missing_facet_and_unresolved_path_are_errors() {
        let results = evaluate_all(
            &[condition("nope", "", json!(true)), condition("post", "/variants/3", json!(true))],
            &context(),
        );
        assert_eq!(results[0].error.as_deref(), Some("Facet \"nope\" not found in run context."));
        assert!(results[1].error.as_deref().unwrap().contains("did not resolve"));
        assert!(!all_satisfied(&results));
        assert!(results.iter().all(|r| r.observed_value.is_none()));
    }

    #[test]
    fn run_context_is_reachable_when_read() {
        let c = condition(
            "post",
            "/status",
            json!({"==": [{"var": "metadata.runContextSnapshot.facets.post.value.quality_score"}, 0.6]}),
        );
        assert!(evaluate_all(&[c], &context())[0].satisfied);
    }

    #[test]
    fn evaluation_errors_are_failed_results() {
        let c = condition("post", "/status", json!({"+": [{"var": "status"}, 1]}));
        let r = &evaluate_all(&[c], &context())[0];
        assert!(!r.satisfied);
        assert!(r.error.is_some(), "{r:?}");
    }

    #[test]
    fn results_serialise_in_wire_order() {
        let c = condition("post", "/status", json!({"==": [{"var": "status"}, "x"]}));
        let json = serde_json::to_string(&evaluate_all(&[c], &context())[0]).unwrap();
        assert!(json.starts_with(r#"{"facet":"post","path":"/status","expression":"#), "{json}");
        assert!(json.contains(r#""observedValue":"draft""#));
    }
}
