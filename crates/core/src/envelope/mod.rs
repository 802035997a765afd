//! The TaskEnvelope: what a caller asks flexrun to do. Parsed once at the HTTP boundary into a
//! validated [`TaskEnvelope`]; every problem is reported with its JSON Pointer and nothing is
//! stored for a rejected envelope.

use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::budget::BudgetPolicy;
use crate::condition::GoalCondition;
use crate::condition::dsl::Catalog;
use crate::contract::OutputContract;
use crate::error_code::ErrorCode;
use crate::retry::RetryOverrides;
use crate::runtime_policy::{self, RuntimePolicy};
use crate::timeouts::TimeoutOverrides;
use crate::validation::{self, BodySchema, ConditionProblems, FieldError, pointer};

/// The longest `objective`, in characters (the schema's `maxLength`). An objective says what the
/// run is for; what it works on goes in `inputs`. Bounded because runs lists, thread searches and
/// LangGraph states show every run's objective whole.
pub const MAX_OBJECTIVE_CHARS: usize = 16_384;

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
    /// The envelope is well-formed but a condition's DSL does not compile.
    #[error("invalid condition expression: {} problem(s)", .0.len())]
    InvalidConditionDsl(Vec<FieldError>),
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
    pub replan: ReplanOverrides,
    /// `policies.budget`: limits on the run's spending.
    pub budget: BudgetPolicy,
    /// `policies.runtime`, in order (the first matching policy wins).
    pub runtime_policies: Vec<RuntimePolicy>,
    /// `policies.retry`.
    pub retry: RetryOverrides,
    /// `policies.models`: the chains of `<endpoint>/<model>` this run's calls go along, instead
    /// of the server's routes (the server checks them when the run starts).
    pub models: ModelPolicy,
    /// `policies.timeouts`.
    pub timeouts: TimeoutOverrides,
    pub special_instructions: Vec<String>,
    /// Where the run waits for an operator's approval.
    pub approval: Approval,
    pub thread_id: Option<String>,
    pub correlation_id: Option<String>,
    /// The run this one starts again (`metadata.rerunOf`; the schema checked its form).
    pub rerun_of: Option<String>,
    /// The envelope as posted; stored with the run and re-parsed after a restart.
    raw: Value,
}

impl TaskEnvelope {
    /// The envelope as posted (DSL conditions stored compiled), taken out: a run stores it once,
    /// at its creation, and holds only the parsed parts for as long as it is open.
    pub fn take_raw(&mut self) -> Value {
        self.raw.take()
    }
}

/// The operator approvals a run asks for: of each plan before any of its steps runs
/// (`policies.approval.plan = "required"`), of each step of an MCP tool that may destroy before
/// it runs (`policies.approval.destructiveTools = "required"`), and of the result before the run
/// completes (`constraints.requiresHitlApproval`, asked once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Approval {
    pub plan: bool,
    pub destructive_tools: bool,
    pub completion: bool,
}

/// `policies.models`: a run's own model chains (empty: the server's routes).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct ModelPolicy {
    pub planner: Vec<String>,
    pub capabilities: Vec<String>,
}

/// `policies.replan`: per-run overrides of the configured replan caps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplanOverrides {
    pub enabled: Option<bool>,
    pub max_goal_condition_replans: Option<u32>,
    pub max_replans: Option<u32>,
}

/// Parses and validates an envelope from a request body; DSL conditions compile against `catalog`.
pub fn parse(body: &[u8], catalog: &Catalog) -> Result<TaskEnvelope, EnvelopeError> {
    let raw: Value = serde_json::from_slice(body).map_err(|e| EnvelopeError::NotJson(e.to_string()))?;
    from_value(raw, catalog)
}

/// Validates an envelope already read as JSON: a request's, held to every rule.
pub fn from_value(raw: Value, catalog: &Catalog) -> Result<TaskEnvelope, EnvelopeError> {
    read(raw, catalog, Rules::Request)
}

/// Reads back the envelope a run was stored with (to resume or fork the run), validated again as
/// [`from_value`] does but for the rules on how a request names its run: the run has its
/// correlation id already, and a run stored before such a rule existed must still resume.
pub fn from_stored(raw: Value, catalog: &Catalog) -> Result<TaskEnvelope, EnvelopeError> {
    read(raw, catalog, Rules::Stored)
}

/// Which rules an envelope is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rules {
    Request,
    Stored,
}

fn read(mut raw: Value, catalog: &Catalog, rules: Rules) -> Result<TaskEnvelope, EnvelopeError> {
    validation::refuse_nul(&raw).map_err(|e| EnvelopeError::Invalid(vec![e]))?;
    let shape = SCHEMA.check(&raw);
    // Stored with `2.0` read as `2`, so every later reading of the policies agrees with this one.
    if let Some(policies) = raw.get_mut("policies") {
        *policies = validation::integral_numbers(policies.take());
    }
    let mut errors = unsupported_features(&raw);
    if rules == Rules::Request {
        errors.extend(correlation_id_problem(&raw));
    }
    let output_contract =
        OutputContract::parse(&raw["outputContract"], "/outputContract").map_err(|e| errors.extend(e)).ok();
    let mut dsl_errors = Vec::new();
    let goal_conditions = goal_conditions(&raw, catalog, &mut errors, &mut dsl_errors);
    let runtime_policies = match raw.pointer("/policies/runtime") {
        // A condition's DSL problems (those with a range) are answered as a goal condition's are.
        Some(value) => runtime_policy::parse(value, "/policies/runtime", catalog)
            .map_err(|problems| {
                let (dsl, other): (Vec<FieldError>, Vec<FieldError>) =
                    problems.into_iter().partition(|problem| problem.range.is_some());
                dsl_errors.extend(dsl);
                errors.extend(other);
            })
            .unwrap_or_default(),
        None => Vec::new(),
    };
    if let Some(contract) = &output_contract {
        errors.extend(undeclared_facets(&raw, contract, catalog));
    }
    if !shape.is_empty() {
        return Err(EnvelopeError::Invalid(with_meaning(shape, errors)));
    }
    let (Some(output_contract), true) = (output_contract, errors.is_empty()) else {
        return Err(EnvelopeError::Invalid(errors));
    };
    if !dsl_errors.is_empty() {
        return Err(EnvelopeError::InvalidConditionDsl(dsl_errors));
    }
    store_compiled_conditions(&mut raw, &goal_conditions);
    let policies = raw.get("policies");
    let replan = policy_at(policies, "replan", "/policies/replan")?;
    Ok(TaskEnvelope {
        objective: raw["objective"].as_str().unwrap_or_default().trim().to_string(),
        inputs: raw.get("inputs").and_then(Value::as_object).cloned().unwrap_or_default(),
        output_contract,
        goal_conditions,
        planner_policy: policies.and_then(|p| p.get("planner")).cloned(),
        replan,
        budget: policy_at(policies, "budget", "/policies/budget")?,
        runtime_policies,
        retry: policy_at(policies, "retry", "/policies/retry")?,
        models: policy_at(policies, "models", "/policies/models")?,
        timeouts: policy_at(policies, "timeouts", "/policies/timeouts")?,
        special_instructions: string_list(raw.get("specialInstructions")),
        approval: Approval {
            plan: raw.pointer("/policies/approval/plan").and_then(Value::as_str) == Some("required"),
            destructive_tools: raw.pointer("/policies/approval/destructiveTools").and_then(Value::as_str)
                == Some("required"),
            completion: raw.pointer("/constraints/requiresHitlApproval").and_then(Value::as_bool) == Some(true),
        },
        thread_id: string_at(&raw, "/constraints/threadId"),
        correlation_id: string_at(&raw, "/metadata/correlationId"),
        rerun_of: string_at(&raw, "/metadata/rerunOf"),
        raw,
    })
}

/// The shape problems of an envelope and, after them, the problems of its meaning (a facet nothing
/// provides, a feature not supported) at places no shape problem names — so one answer names every
/// offending field, and a part whose shape is wrong is not reported twice. Checking the meaning of
/// a badly shaped part would only restate its shape problem in other words.
fn with_meaning(mut shape: Vec<FieldError>, meaning: Vec<FieldError>) -> Vec<FieldError> {
    let within = |a: &str, b: &str| a == b || b.strip_prefix(a).is_some_and(|rest| rest.starts_with('/'));
    let apart = |path: &str| shape.iter().all(|s| !within(&s.path, path) && !within(path, &s.path));
    let meaning: Vec<FieldError> = meaning.into_iter().filter(|e| apart(&e.path)).collect();
    shape.extend(meaning);
    shape
}

/// Replaces each DSL condition of the stored envelope by its compiled form, so what is stored and
/// shown is what runs: `{dsl, canonicalDsl, jsonLogic, variables}`.
fn store_compiled_conditions(raw: &mut Value, goals: &[GoalCondition]) {
    let Some(entries) = raw.get_mut("goal_condition").and_then(Value::as_array_mut) else { return };
    for (entry, goal) in entries.iter_mut().zip(goals) {
        if let Some(dsl) = &goal.dsl {
            entry["condition"] = serde_json::json!({
                "dsl": dsl,
                "canonicalDsl": goal.expression,
                "jsonLogic": goal.rule.source(),
                "variables": goal.variables,
            });
        }
    }
}

/// A policy object of `policies` (its shape was checked by the schema; absent means defaults).
fn policy_at<T: serde::de::DeserializeOwned + Default>(
    policies: Option<&Value>,
    key: &str,
    path: &str,
) -> Result<T, EnvelopeError> {
    policies
        .and_then(|p| p.get(key))
        .map(|value| validation::decode(value, path))
        .transpose()
        .map(Option::unwrap_or_default)
        .map_err(|e| EnvelopeError::Invalid(vec![e]))
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

/// Parses every goal condition, collecting the problems of all of them (DSL problems apart, so
/// they can be answered with `invalid_condition_dsl`).
fn goal_conditions(
    raw: &Value,
    catalog: &Catalog,
    errors: &mut Vec<FieldError>,
    dsl_errors: &mut Vec<FieldError>,
) -> Vec<GoalCondition> {
    let Some(entries) = raw.get("goal_condition").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut conditions = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let at = pointer(["goal_condition".to_string(), i.to_string()]);
        match validation::parse_facet_condition(entry, &at, catalog) {
            Ok(condition) => conditions.push(condition),
            Err(ConditionProblems::Shape(e)) => errors.extend(e),
            Err(ConditionProblems::Dsl(e)) => dsl_errors.extend(e),
        }
    }
    conditions
}

/// Goal conditions on a facet that neither the output contract, the inputs nor any registered
/// capability provides: such a condition can never hold, and each replan to meet it would be a
/// paid model call wasted.
fn undeclared_facets(raw: &Value, contract: &OutputContract, catalog: &Catalog) -> Vec<FieldError> {
    let Some(entries) = raw.get("goal_condition").and_then(Value::as_array) else { return Vec::new() };
    let inputs = raw.get("inputs").and_then(Value::as_object);
    let provided = |facet: &str| {
        contract.facets().iter().any(|f| f == facet)
            || inputs.is_some_and(|inputs| inputs.contains_key(facet))
            || catalog.knows_facet(facet)
    };
    entries
        .iter()
        .enumerate()
        .filter_map(|(i, entry)| Some((i, entry.get("facet")?.as_str()?)))
        .filter(|(_, facet)| !provided(facet))
        .map(|(i, facet)| {
            FieldError::new(
                pointer(["goal_condition".to_string(), i.to_string(), "facet".to_string()]),
                "undeclared_facet",
                format!(
                    "no output contract facet, input or registered capability provides the facet `{}`",
                    crate::excerpt::excerpt(facet, 100)
                ),
            )
        })
        .collect()
}

/// `metadata.correlationId`, held to the rule `X-Correlation-Id` is ([`crate::correlation`]).
fn correlation_id_problem(raw: &Value) -> Option<FieldError> {
    const AT: &str = "/metadata/correlationId";
    let id = raw.pointer(AT)?.as_str()?;
    let error = crate::correlation::check(id).err()?;
    Some(FieldError::new(AT, ErrorCode::InvalidCorrelationId.as_str(), error.to_string()))
}

/// Envelope features that later flexrun versions implement. Rejecting them keeps a caller from
/// believing a policy is in force when it is not.
fn unsupported_features(raw: &Value) -> Vec<FieldError> {
    let unsupported = |path: &str, what: &str| {
        FieldError::new(path, "unsupported", format!("{what} is not supported by this flexrun version"))
    };
    let mut errors = Vec::new();
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
        match from_value(body, &Catalog::builtin()) {
            Err(EnvelopeError::Invalid(errors)) => errors,
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn accepts_a_full_envelope() {
        let e = from_value(valid(), &Catalog::builtin()).unwrap();
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
    fn shape_and_meaning_problems_are_named_in_one_answer() {
        let mut body = valid();
        body["objective"] = json!(" ");
        body["goal_condition"][0]["facet"] = json!("nothing_makes_this");
        body["goal_condition"]
            .as_array_mut()
            .unwrap()
            .push(json!({"facet": "", "path": "", "condition": {"dsl": "x > 1"}}));
        let errors = problems(body);
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert!(paths.contains(&"/objective"), "{errors:#?}");
        assert!(paths.contains(&"/goal_condition/1/facet"), "the blank facet, by its shape: {errors:#?}");
        let undeclared: Vec<&FieldError> = errors.iter().filter(|e| e.code == "undeclared_facet").collect();
        assert_eq!(undeclared.len(), 1, "the facet nothing provides, by its meaning: {errors:#?}");
        assert_eq!(undeclared[0].path, "/goal_condition/0/facet");
        assert_eq!(paths.iter().filter(|p| p.starts_with("/goal_condition/1")).count(), 1, "not twice: {errors:#?}");
        let blank = errors.iter().find(|e| e.path == "/goal_condition/1/facet").unwrap();
        assert_eq!(blank.message, "must not be empty");
    }

    #[test]
    fn an_objective_longer_than_its_bound_is_refused_in_a_bounded_message() {
        assert_eq!(schema()["properties"]["objective"]["maxLength"], json!(MAX_OBJECTIVE_CHARS), "declared once");
        let mut body = valid();
        body["objective"] = json!("é".repeat(MAX_OBJECTIVE_CHARS));
        assert!(from_value(body.clone(), &Catalog::builtin()).is_ok(), "the bound itself is allowed");
        body["objective"] = json!("é".repeat(MAX_OBJECTIVE_CHARS * 4 + 1));
        let errors = problems(body);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!((errors[0].path.as_str(), errors[0].code.as_str()), ("/objective", "maxLength"));
        assert_eq!(errors[0].message, "must be at most 16384 characters long (it is 65537)");
    }

    #[test]
    fn a_blank_objective_is_refused_in_words() {
        let errors = problems(json!({"objective": "  ", "outputContract": {"mode": "facets", "facets": ["a"]}}));
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!((errors[0].path.as_str(), errors[0].message.as_str()), ("/objective", "must hold more than spaces"));
    }

    #[test]
    fn a_budget_is_read_and_bad_values_are_refused_with_their_pointer() {
        let mut body = valid();
        body["policies"]["budget"] = json!({"maxCostUsd": 0.5, "maxModelCalls": 4, "onExceeded": "fail"});
        let e = from_value(body, &Catalog::builtin()).unwrap();
        assert_eq!((e.budget.max_cost_usd, e.budget.max_model_calls), (Some(0.5), Some(4)));
        assert_eq!(e.budget.on_exceeded, Some(crate::budget::OnExceeded::Fail));
        for (budget, at) in [
            (json!({"maxCostUsd": -1}), "/policies/budget/maxCostUsd"),
            (json!({"maxCostUsd": 0}), "/policies/budget/maxCostUsd"),
            (json!({"maxTokens": "many"}), "/policies/budget/maxTokens"),
            (json!({"maxModelCalls": 0}), "/policies/budget/maxModelCalls"),
            (json!({"onExceeded": "shrug"}), "/policies/budget/onExceeded"),
            (json!({"maxDollars": 1}), "/policies/budget/maxDollars"),
        ] {
            let mut body = valid();
            body["policies"]["budget"] = budget.clone();
            let errors = problems(body);
            assert!(errors.iter().any(|e| e.path == at), "{budget}: {errors:#?}");
        }
    }

    #[test]
    fn a_goal_condition_on_a_facet_nothing_provides_is_refused() {
        let condition = |facet: &str| json!({"facet": facet, "path": "/ok", "condition": {"jsonLogic": {"==": [{"var": "ok"}, true]}}});
        let mut body = valid();
        body["goal_condition"] = json!([condition("post_copy"), condition("brief"), condition("summary")]);
        let errors = problems(body.clone());
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!((errors[0].path.as_str(), errors[0].code.as_str()), ("/goal_condition/2/facet", "undeclared_facet"));
        // A registered capability producing it (with or without a schema) declares it.
        let produced = Catalog::builtin().produced(["summary"]);
        assert!(from_value(body.clone(), &produced).is_ok());
        let described = Catalog::with_facets([("summary", &json!({"type": "object"}))]);
        assert!(from_value(body, &described).is_ok());
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
            {"facet": "post_copy", "path": "no-slash", "condition": {"jsonLogic": {">": [1, 2]}}},
            {"facet": "brief", "path": "/x", "condition": {"jsonLogic": {"nope": []}}}
        ]);
        let errors = problems(body);
        let codes: Vec<_> = errors.iter().map(|e| (e.path.as_str(), e.code.as_str())).collect();
        assert_eq!(
            codes,
            [
                ("/goal_condition/0/path", "invalid_pointer"),
                ("/goal_condition/1/condition/jsonLogic", "invalid_json_logic")
            ]
        );
    }

    fn dsl_problems(body: Value) -> Vec<FieldError> {
        match from_value(body, &Catalog::builtin()) {
            Err(EnvelopeError::InvalidConditionDsl(errors)) => errors,
            other => panic!("expected invalid DSL, got {other:?}"),
        }
    }

    #[test]
    fn dsl_conditions_compile_relative_to_their_path() {
        let mut body = valid();
        body["goal_condition"] = json!([
            {"facet": "post_copy", "path": "/quality_score",
             "condition": {"dsl": "quality_score >= 0.8", "jsonLogic": {"==": [1, 2]}}}
        ]);
        let envelope = from_value(body, &Catalog::builtin()).unwrap();
        let goal = &envelope.goal_conditions[0];
        assert_eq!(goal.expression, "quality_score >= 0.8");
        assert_eq!(goal.rule.source(), &json!({">=": [{"var": "quality_score"}, 0.8]}), "the DSL wins");
        assert_eq!(goal.dsl.as_deref(), Some("quality_score >= 0.8"));
        assert_eq!(
            envelope.raw["goal_condition"][0]["condition"],
            json!({"dsl": "quality_score >= 0.8", "canonicalDsl": "quality_score >= 0.8",
                   "jsonLogic": {">=": [{"var": "quality_score"}, 0.8]}, "variables": []}),
            "the stored envelope holds the compiled form"
        );
        let again = from_value(envelope.raw.clone(), &Catalog::builtin()).unwrap();
        assert_eq!(again.goal_conditions, envelope.goal_conditions, "a stored envelope parses to the same conditions");
    }

    #[test]
    fn bad_dsl_is_reported_with_its_path_and_range() {
        let mut body = valid();
        body["goal_condition"] = json!([
            {"facet": "post_copy", "path": "", "condition": {"dsl": "score >= 0.8"}},
            {"facet": "post_copy", "path": "", "condition": {"dsl": "score >="}}
        ]);
        let errors = dsl_problems(body);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "/goal_condition/1/condition/dsl");
        assert_eq!(errors[0].code, "syntax_error");
        assert_eq!(errors[0].range.as_ref().unwrap().start.offset, 8);
    }

    #[test]
    fn a_runtime_policys_bad_dsl_is_answered_as_a_goal_conditions_is() {
        let mut body = valid();
        body["policies"] = json!({"runtime": [{"id": "p", "trigger": {"kind": "onNodeComplete",
            "condition": {"dsl": "quality_score >"}}, "action": {"type": "fail"}}]});
        let errors = dsl_problems(body);
        assert_eq!(
            (errors[0].path.as_str(), errors[0].code.as_str()),
            ("/policies/runtime/0/trigger/condition/dsl", "syntax_error")
        );
        assert!(errors[0].range.is_some());
    }

    #[test]
    fn json_logic_conditions_are_shown_as_dsl_when_possible() {
        let envelope = from_value(valid(), &Catalog::builtin()).unwrap();
        assert_eq!(envelope.goal_conditions[0].expression, "quality_score >= 0.8");
    }

    #[test]
    fn rejects_features_it_does_not_run() {
        let mut body = valid();
        body["policies"]["runtime"] = json!([{"id": "p", "trigger": {"kind": "onMetricBelow", "metric": "m", "threshold": 1}, "action": {"type": "fail"}}]);
        body["constraints"] = json!({"resumeRunId": "r"});
        let errors = problems(body);
        assert!(errors.iter().all(|e| e.code == "unsupported"), "{errors:?}");
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["/constraints/resumeRunId", "/policies/runtime/0/trigger/kind"]);
    }

    #[test]
    fn runtime_policies_are_parsed_in_order() {
        let mut body = valid();
        body["policies"]["runtime"] = json!([
            {"id": "a", "trigger": {"kind": "onStart"}, "action": {"type": "replan"}},
            {"id": "b", "trigger": {"kind": "onNodeComplete"}, "action": {"type": "emit", "event": "e"}}
        ]);
        let envelope = from_value(body, &Catalog::builtin()).unwrap();
        let ids: Vec<&str> = envelope.runtime_policies.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
    }

    #[test]
    fn approvals_are_read() {
        let mut body = valid();
        assert_eq!(from_value(body.clone(), &Catalog::builtin()).unwrap().approval, Approval::default());
        body["policies"]["approval"] = json!({"plan": "required", "destructiveTools": "required"});
        body["constraints"] = json!({"requiresHitlApproval": true});
        let approval = from_value(body, &Catalog::builtin()).unwrap().approval;
        assert_eq!(approval, Approval { plan: true, destructive_tools: true, completion: true });
    }

    #[test]
    fn bad_json_is_its_own_error() {
        assert!(matches!(parse(b"{\"objective\":", &Catalog::builtin()), Err(EnvelopeError::NotJson(_))));
    }
}
