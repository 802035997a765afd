//! Boundary validation shared by every request body flexrun accepts (task envelopes, capability
//! registrations): a JSON Schema check that reports *every* offending field by JSON Pointer, with a
//! "did you mean" for unknown keys, the parsing of the facet conditions a body carries, plus the
//! [`FieldError`] type the HTTP layer turns into a 400.
//!
//! This module may use [`crate::condition`]; the condition modules never use it.

use jsonschema::error::ValidationErrorKind;
use serde::Serialize;
use serde_json::Value;

/// The pattern the schemas give a string that must not be blank.
const NOT_BLANK: &str = r"\S";

use crate::condition::dsl::{DslError, Range};
use crate::suggest::closest;

mod decode;
mod facet_condition;

pub use decode::{decode, integral_numbers};
pub use facet_condition::{ConditionProblems, parse_facet_condition};

/// One problem with one field of a request body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// JSON Pointer (RFC 6901) of the offending value in the request body; `""` is the body itself.
    pub path: String,
    /// Stable machine-readable code, e.g. `required`, `unknown_field`, `invalid_pointer`.
    pub code: String,
    /// What is wrong, for people.
    pub message: String,
    /// For a condition expression: where in the expression text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<Box<Range>>,
}

impl FieldError {
    pub fn new(path: impl Into<String>, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), code: code.into(), message: message.into(), range: None }
    }

    /// A DSL error in the expression found at `path`.
    pub fn from_dsl(path: impl Into<String>, error: DslError) -> Self {
        let code = serde_json::to_value(error.code).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        Self { path: path.into(), code, message: error.message, range: Some(Box::new(error.range)) }
    }
}

/// Builds a JSON Pointer from segments, escaping `~` and `/` as RFC 6901 requires.
pub fn pointer<I, S>(segments: I) -> String
where
    I: IntoIterator<Item = S>,
    S: ToString,
{
    segments.into_iter().fold(String::new(), |mut out, segment| {
        out.push('/');
        out.push_str(&segment.to_string().replace('~', "~0").replace('/', "~1"));
        out
    })
}

/// A compiled JSON Schema for a request body.
pub struct BodySchema {
    validator: jsonschema::Validator,
    schema: Value,
}

impl BodySchema {
    /// Compiles a schema that ships with flexrun. Panics only if that built-in schema is invalid,
    /// which the unit tests of each body type rule out.
    #[expect(clippy::expect_used, reason = "a compiled-in schema, checked by each body type's unit tests")]
    pub fn builtin(schema_json: &str) -> Self {
        let schema: Value = serde_json::from_str(schema_json).expect("built-in schema is JSON");
        let validator = jsonschema::validator_for(&schema).expect("built-in schema compiles");
        Self { validator, schema }
    }

    /// The schema document itself (served to clients that want to validate before posting).
    pub fn document(&self) -> &Value {
        &self.schema
    }

    /// Every violation in `body`, unknown keys with a suggestion of the closest allowed key.
    pub fn check(&self, body: &Value) -> Vec<FieldError> {
        let mut errors: Vec<FieldError> = Vec::new();
        for error in self.validator.iter_errors(body) {
            let path = error.instance_path().to_string();
            match error.kind() {
                ValidationErrorKind::AdditionalProperties { unexpected } => {
                    let allowed = self.allowed_keys_at(error.schema_path().to_string().as_str());
                    for key in unexpected {
                        errors.push(unknown_field(&path, key, &allowed));
                    }
                }
                ValidationErrorKind::Required { property } => {
                    let name = property.as_str().unwrap_or_default();
                    errors.push(FieldError::new(
                        format!("{path}{}", pointer([name])),
                        "required",
                        format!("`{name}` is required"),
                    ));
                }
                // The schemas' ways of saying "not empty" and "not blank" read as riddles in the
                // validator's words (`"" is shorter than 1 character`, `" " does not match "\S"`).
                ValidationErrorKind::MinLength { limit: 1 } => {
                    errors.push(FieldError::new(path, "minLength", "must not be empty".to_string()));
                }
                ValidationErrorKind::Pattern { pattern } if pattern == NOT_BLANK => {
                    errors.push(FieldError::new(path, "pattern", "must hold more than spaces".to_string()));
                }
                // The validator's words quote the whole text, which can be as long as a body.
                ValidationErrorKind::MaxLength { limit } => {
                    let length = error.instance().as_str().map_or(0, |text| text.chars().count());
                    let message = format!("must be at most {limit} characters long (it is {length})");
                    errors.push(FieldError::new(path, "maxLength", message));
                }
                kind => {
                    errors.push(FieldError::new(path, kind.keyword(), error.to_string()));
                }
            }
        }
        errors.dedup();
        errors
    }

    /// The property names the schema allows where an `additionalProperties` check failed.
    fn allowed_keys_at(&self, schema_path: &str) -> Vec<String> {
        let object_path = schema_path.strip_suffix("/additionalProperties").unwrap_or(schema_path);
        self.schema
            .pointer(&format!("{object_path}/properties"))
            .and_then(Value::as_object)
            .map(|props| props.keys().cloned().collect())
            .unwrap_or_default()
    }
}

/// The first string or object key in `body` holding U+0000, as a field error.
///
/// Every request body is checked with this: PostgreSQL's `text` cannot hold the character, so a
/// body SQLite would store and PostgreSQL refuse (as an internal error, mid-write) is refused up
/// front, alike on both backends. JSON can only spell the character as `\u0000`, and serde_json
/// bounds nesting at 128 levels, so the recursion is bounded too.
pub fn refuse_nul(body: &Value) -> Result<(), FieldError> {
    let found =
        |path: String| FieldError::new(path, "nul_character", "strings must not contain the NUL character (U+0000)");
    match body {
        Value::String(text) if text.contains('\0') => Err(found(String::new())),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| refuse_nul(item).map_err(|e| found(format!("{}{}", pointer([i]), e.path)))),
        Value::Object(fields) => fields.iter().try_for_each(|(key, value)| {
            if key.contains('\0') {
                return Err(found(pointer([key])));
            }
            refuse_nul(value).map_err(|e| found(format!("{}{}", pointer([key]), e.path)))
        }),
        _ => Ok(()),
    }
}

fn unknown_field(parent: &str, key: &str, allowed: &[String]) -> FieldError {
    let mut message = format!("unknown field `{key}`");
    if let Some(suggestion) = closest(key, allowed.iter().map(String::as_str)) {
        message.push_str(&format!("; did you mean `{suggestion}`?"));
    } else if !allowed.is_empty() {
        message.push_str(&format!("; expected one of: {}", allowed.join(", ")));
    }
    FieldError::new(format!("{parent}{}", pointer([key])), "unknown_field", message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SCHEMA: &str = r#"{
        "type": "object", "additionalProperties": false, "required": ["objective"],
        "properties": {
            "objective": {"type": "string", "minLength": 1},
            "goal_condition": {"type": "array"},
            "nested": {"type": "object", "additionalProperties": false,
                       "properties": {"maxReplans": {"type": "integer"}}}
        }
    }"#;

    #[test]
    fn reports_every_error_with_its_pointer() {
        let schema = BodySchema::builtin(SCHEMA);
        let errors = schema.check(&json!({"goalConditions": [], "nested": {"maxReplan": 1}}));
        let paths: Vec<_> = errors.iter().map(|e| (e.path.as_str(), e.code.as_str())).collect();
        assert!(paths.contains(&("/objective", "required")), "{errors:?}");
        assert!(paths.contains(&("/goalConditions", "unknown_field")), "{errors:?}");
        assert!(paths.contains(&("/nested/maxReplan", "unknown_field")), "{errors:?}");
        let unknown = errors.iter().find(|e| e.path == "/goalConditions").unwrap();
        assert!(unknown.message.contains("did you mean `goal_condition`"), "{}", unknown.message);
        let nested = errors.iter().find(|e| e.path == "/nested/maxReplan").unwrap();
        assert!(nested.message.contains("`maxReplans`"), "{}", nested.message);
    }

    #[test]
    fn refuses_nul_in_strings_and_keys_with_its_pointer() {
        assert_eq!(refuse_nul(&json!({"a": ["x", {"b": "fine"}], "n": 1, "z": null})), Ok(()));
        let at = |body: Value| refuse_nul(&body).map_err(|e| (e.path, e.code));
        assert_eq!(at(json!("a\u{0}")), Err((String::new(), "nul_character".into())));
        assert_eq!(at(json!({"a": ["x", {"b/c": "y\u{0}"}]})), Err(("/a/1/b~1c".into(), "nul_character".into())));
        assert_eq!(at(json!({"k": {"\u{0}": 1}})), Err(("/k/\u{0}".into(), "nul_character".into())));
    }

    #[test]
    fn pointer_escapes_segments() {
        assert_eq!(pointer(["a/b", "c~d"]), "/a~1b/c~0d");
        assert_eq!(pointer(Vec::<String>::new()), "");
    }
}
