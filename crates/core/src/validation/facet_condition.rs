//! Parsing facet conditions (goal conditions of an envelope, post-conditions of a capability) at
//! the boundary, every problem a [`FieldError`] at its JSON Pointer.

use serde_json::Value;

use super::FieldError;
use crate::condition::dsl::{self, Catalog, Scope};
use crate::condition::{FacetPath, GoalCondition, Rule};

/// Why a facet condition was not accepted: its shape, or its DSL (answered apart, with
/// `invalid_condition_dsl`).
#[derive(Debug)]
pub enum ConditionProblems {
    Shape(Vec<FieldError>),
    Dsl(Vec<FieldError>),
}

/// Parses a facet condition `{facet, path, condition: {dsl} | {jsonLogic}}` found at `at` (a goal
/// condition of an envelope, a post-condition of a capability). DSL names are relative to the
/// value at `path`, or catalog paths.
pub fn parse_facet_condition(entry: &Value, at: &str, catalog: &Catalog) -> Result<GoalCondition, ConditionProblems> {
    let facet = entry["facet"].as_str().unwrap_or_default().to_string();
    let path = FacetPath::parse(entry["path"].as_str().unwrap_or_default()).map_err(|message| {
        ConditionProblems::Shape(vec![FieldError::new(format!("{at}/path"), "invalid_pointer", message)])
    })?;
    let condition = &entry["condition"];
    if let Some(source) = condition.get("dsl").and_then(Value::as_str) {
        // The DSL wins over a `jsonLogic` given alongside: it is what gets compiled and shown.
        let schema = catalog.schema_at(&facet, &path.segments());
        let at_dsl = format!("{at}/condition/dsl");
        let compiled =
            dsl::compile(source, catalog, Scope::Relative { schema: schema.as_ref() }).map_err(|errors| {
                ConditionProblems::Dsl(errors.into_iter().map(|e| FieldError::from_dsl(at_dsl.clone(), e)).collect())
            })?;
        let rule = Rule::from_dsl(compiled.json_logic, compiled.eval_logic).map_err(|message| {
            ConditionProblems::Dsl(vec![FieldError::new(at_dsl.clone(), "invalid_json_logic", message)])
        })?;
        return Ok(GoalCondition {
            facet,
            path,
            dsl: Some(source.to_string()),
            expression: compiled.canonical_dsl,
            rule,
            variables: compiled.variables,
        });
    }
    let json_logic = condition.get("jsonLogic").cloned().unwrap_or(Value::Null);
    let text = json_logic.to_string();
    let schema = catalog.schema_at(&facet, &path.segments());
    let (rule, shown) = dsl::json_logic_rule(json_logic, catalog, Scope::Relative { schema: schema.as_ref() })
        .map_err(|message| {
            ConditionProblems::Shape(vec![FieldError::new(
                format!("{at}/condition/jsonLogic"),
                "invalid_json_logic",
                format!("not a valid JSON-Logic rule: {message}"),
            )])
        })?;
    let expression = shown.unwrap_or(text);
    Ok(GoalCondition { facet, path, dsl: None, expression, rule, variables: Vec::new() })
}
