//! The TaskEnvelope: what a caller asks flexrun to do. Parsed once at the HTTP boundary into a
//! validated [`TaskEnvelope`]; every problem is reported with its JSON Pointer and nothing is
//! stored for a rejected envelope.

use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::condition::{FacetPath, GoalCondition, Rule};
use crate::contract::OutputContract;
use crate::validation::{BodySchema, FieldError, pointer};

static SCHEMA: LazyLock<BodySchema> = LazyLock::new(|| BodySchema::builtin(include_str!("task-envelope.schema.json")));

/// The JSON Schema of the envelope's shape (served at `GET /api/v1/flex/schemas/task-envelope`).
pub fn schema() -> &'static Value {
    SCHEMA.document()
}

/// Why an envelope was rejected.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error("request body is not valid JSON: {0}")]
    NotJson(String),
    #[error("invalid task envelope: {} problem(s)", .0.len())]
    Invalid(Vec<FieldError>),
}

/// A validated task envelope.
#[derive(Debug, Clone)]
pub struct TaskEnvelope {
    pub objective: String,
    /// Facets seeded into the run context.
    pub inputs: Map<String, Value>,
    pub output_contract: OutputContract,
    pub goal_conditions: Vec<GoalCondition>,
    /// `policies.planner`, passed to the planner as written.
    pub planner_policy: Option<Value>,
    pub replan: ReplanPolicy,
    pub special_instructions: Vec<String>,
    pub thread_id: Option<String>,
    pub correlation_id: Option<String>,
    /// The envelope as posted; stored with the run and re-parsed after a restart.
    pub raw: Value,
}

/// `policies.replan`: per-run overrides of the configured replan caps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplanPolicy {
    pub enabled: Option<bool>,
    pub max_goal_condition_replans: Option<u32>,
    pub max_replans: Option<u32>,
}

/// Parses and validates an envelope from a request body.
pub fn parse(body: &[u8]) -> Result<TaskEnvelope, EnvelopeError> {
    let raw: Value = serde_json::from_slice(body).map_err(|e| EnvelopeError::NotJson(e.to_string()))?;
    from_value(raw)
}

/// Validates an envelope already read as JSON.
pub fn from_value(raw: Value) -> Result<TaskEnvelope, EnvelopeError> {
    let mut errors = SCHEMA.check(&raw);
    if !errors.is_empty() {
        return Err(EnvelopeError::Invalid(errors));
    }
    errors.extend(unsupported_features(&raw));
    let output_contract =
        OutputContract::parse(&raw["outputContract"], "/outputContract").map_err(|e| errors.extend(e)).ok();
    let goal_conditions = goal_conditions(&raw, &mut errors);
    let (Some(output_contract), true) = (output_contract, errors.is_empty()) else {
        return Err(EnvelopeError::Invalid(errors));
    };
    let policies = raw.get("policies");
    let replan = policies
        .and_then(|p| p.get("replan"))
        .map(|r| serde_json::from_value(r.clone()))
        .transpose()
        .map_err(|e| EnvelopeError::Invalid(vec![FieldError::new("/policies/replan", "invalid", e.to_string())]))?
        .unwrap_or_default();
    Ok(TaskEnvelope {
        objective: raw["objective"].as_str().unwrap_or_default().trim().to_string(),
        inputs: raw.get("inputs").and_then(Value::as_object).cloned().unwrap_or_default(),
        output_contract,
        goal_conditions,
        planner_policy: policies.and_then(|p| p.get("planner")).cloned(),
        replan,
        special_instructions: string_list(raw.get("specialInstructions")),
        thread_id: string_at(&raw, "/constraints/threadId"),
        correlation_id: string_at(&raw, "/metadata/correlationId"),
        raw,
    })
}

fn string_at(raw: &Value, at: &str) -> Option<String> {
    raw.pointer(at).and_then(Value::as_str).map(String::from)
}

fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

/// Parses every goal condition, collecting the problems of all of them.
fn goal_conditions(raw: &Value, errors: &mut Vec<FieldError>) -> Vec<GoalCondition> {
    let Some(entries) = raw.get("goal_condition").and_then(Value::as_array) else {
        return Vec::new();
    };
    entries
        .iter()
        .enumerate()
        .filter_map(|(i, entry)| {
            goal_condition(entry, &pointer(["goal_condition".to_string(), i.to_string()]))
                .map_err(|e| errors.extend(e))
                .ok()
        })
        .collect()
}

fn goal_condition(entry: &Value, at: &str) -> Result<GoalCondition, Vec<FieldError>> {
    let mut errors = Vec::new();
    let facet = entry["facet"].as_str().unwrap_or_default().to_string();
    let written_path = entry["path"].as_str().unwrap_or_default();
    let path = FacetPath::parse(written_path)
        .map_err(|message| errors.push(FieldError::new(format!("{at}/path"), "invalid_pointer", message)))
        .ok();
    let condition = &entry["condition"];
    let dsl = condition.get("dsl").and_then(Value::as_str).map(String::from);
    let rule = match condition.get("jsonLogic") {
        Some(json_logic) => Rule::compile(json_logic.clone())
            .map_err(|message| {
                errors.push(FieldError::new(
                    format!("{at}/condition/jsonLogic"),
                    "invalid_json_logic",
                    format!("not a valid JSON-Logic rule: {message}"),
                ))
            })
            .ok(),
        None => {
            errors.push(FieldError::new(
                format!("{at}/condition"),
                "dsl_not_supported",
                "a goal condition needs `jsonLogic`: this flexrun version does not compile \
                 condition DSL yet (write the rule as JSON-Logic, e.g. \
                 {\">=\": [{\"var\": \"quality_score\"}, 0.8]})",
            ));
            None
        }
    };
    match (path, rule) {
        (Some(path), Some(rule)) if errors.is_empty() => Ok(GoalCondition { facet, path, dsl, rule }),
        _ => Err(errors),
    }
}

/// Envelope features that later flexrun versions implement. Rejecting them keeps a caller from
/// believing a policy is in force when it is not.
fn unsupported_features(raw: &Value) -> Vec<FieldError> {
    let unsupported = |path: &str, what: &str| {
        FieldError::new(path, "unsupported", format!("{what} is not supported by this flexrun version"))
    };
    let mut errors = Vec::new();
    if raw.pointer("/policies/runtime").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
        errors.push(unsupported("/policies/runtime", "runtime policies"));
    }
    if raw.pointer("/policies/approval/plan").and_then(Value::as_str) == Some("required") {
        errors.push(unsupported("/policies/approval/plan", "plan approval (\"required\")"));
    }
    if raw.pointer("/policies/retry").is_some() {
        errors.push(unsupported("/policies/retry", "a per-run retry policy"));
    }
    if raw.pointer("/constraints/requiresHitlApproval").and_then(Value::as_bool) == Some(true) {
        errors.push(unsupported("/constraints/requiresHitlApproval", "operator approval before completion"));
    }
    if raw.pointer("/constraints/resumeRunId").is_some() {
        errors.push(unsupported("/constraints/resumeRunId", "resuming a run through run.stream"));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn valid() -> Value {
        json!({
            "objective": "Write a post",
            "inputs": {"brief": {"topic": "flexrun"}},
            "outputContract": {"mode": "facets", "facets": ["post_copy"]},
            "goal_condition": [{"facet": "post_copy", "path": "/quality_score",
                                "condition": {"jsonLogic": {">=": [{"var": "quality_score"}, 0.8]}}}],
            "policies": {"replan": {"maxGoalConditionReplans": 1}},
            "specialInstructions": ["Be brief"],
            "constraints": {"threadId": "t-1"},
            "metadata": {"correlationId": "c-1", "extra": 1}
        })
    }

    fn problems(body: Value) -> Vec<FieldError> {
        match from_value(body) {
            Err(EnvelopeError::Invalid(errors)) => errors,
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn accepts_a_full_envelope() {
        let e = from_value(valid()).unwrap();
        assert_eq!(e.objective, "Write a post");
        assert_eq!(e.goal_conditions.len(), 1);
        assert_eq!(e.replan.max_goal_condition_replans, Some(1));
        assert_eq!(e.thread_id.as_deref(), Some("t-1"));
        assert_eq!(e.correlation_id.as_deref(), Some("c-1"));
        assert_eq!(e.output_contract.facets(), ["post_copy"]);
    }

    #[test]
    fn reports_every_shape_problem() {
        let errors = problems(json!({
            "objective": "",
            "goalConditions": [],
            "outputContract": {"mode": "facets", "facets": [], "schema": {}},
            "policies": {"replan": {"maxReplans": -1}}
        }));
        let at = |p: &str| errors.iter().any(|e| e.path == p);
        assert!(at("/objective"), "{errors:#?}");
        assert!(at("/goalConditions"), "{errors:#?}");
        assert!(at("/outputContract/facets"), "{errors:#?}");
        assert!(at("/outputContract/schema"), "{errors:#?}");
        assert!(at("/policies/replan/maxReplans"), "{errors:#?}");
        let unknown = errors.iter().find(|e| e.path == "/goalConditions").unwrap();
        assert!(unknown.message.contains("goal_condition"), "{}", unknown.message);
    }

    #[test]
    fn missing_objective_and_contract_are_required() {
        let errors = problems(json!({}));
        let paths: Vec<_> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["/objective", "/outputContract"]);
    }

    #[test]
    fn reports_every_goal_condition_problem() {
        let mut body = valid();
        body["goal_condition"] = json!([
            {"facet": "a", "path": "no-slash", "condition": {"jsonLogic": {"nope": []}}},
            {"facet": "b", "path": "/x", "condition": {"dsl": "x > 1"}}
        ]);
        let errors = problems(body);
        let codes: Vec<_> = errors.iter().map(|e| (e.path.as_str(), e.code.as_str())).collect();
        assert_eq!(
            codes,
            [
                ("/goal_condition/0/path", "invalid_pointer"),
                ("/goal_condition/0/condition/jsonLogic", "invalid_json_logic"),
                ("/goal_condition/1/condition", "dsl_not_supported"),
            ]
        );
    }

    #[test]
    fn rejects_features_it_does_not_run() {
        let mut body = valid();
        body["policies"]["runtime"] = json!([{"id": "p"}]);
        body["policies"]["approval"] = json!({"plan": "required"});
        let errors = problems(body);
        assert!(errors.iter().all(|e| e.code == "unsupported"), "{errors:?}");
        assert_eq!(errors.len(), 2);
    }

    #[test]
    fn bad_json_is_its_own_error() {
        assert!(matches!(parse(b"{\"objective\":"), Err(EnvelopeError::NotJson(_))));
    }
}
