//! Output contracts: what a run (envelope `outputContract`) or a capability (`outputContract`)
//! promises to produce, and the compiled JSON Schemas that check it.

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::excerpt;
use crate::llm::written::written;
use crate::validation::FieldError;

/// A JSON Schema compiled once, kept with its source so it can be shown to people and models.
#[derive(Clone)]
pub struct CompiledSchema {
    source: Value,
    validator: Arc<jsonschema::Validator>,
    /// The source as JSON, written when first sent to a model and then for every call.
    json: OnceLock<Box<RawValue>>,
}

impl CompiledSchema {
    /// Compiles `source`; the error names what is wrong with the schema.
    pub fn compile(source: Value) -> Result<Self, String> {
        let validator = jsonschema::validator_for(&source).map_err(|e| e.to_string())?;
        Ok(Self { source, validator: Arc::new(validator), json: OnceLock::new() })
    }

    pub fn source(&self) -> &Value {
        &self.source
    }

    /// [`Self::source`] as JSON, for a model's `response_format`.
    pub fn json(&self) -> &RawValue {
        self.json.get_or_init(|| written(&self.source))
    }

    /// The violations of `instance` (the first [`MAX_VIOLATIONS`]), each message bounded: a
    /// schema error quotes the offending value, which may be a capability's whole answer.
    pub fn violations(&self, instance: &Value) -> Vec<SchemaViolation> {
        self.validator
            .iter_errors(instance)
            .take(MAX_VIOLATIONS)
            .map(|e| SchemaViolation {
                instance_path: excerpt::excerpt(&e.instance_path().to_string(), excerpt::MESSAGE).into_owned(),
                keyword: e.kind().keyword().to_string(),
                message: excerpt::Excerpt(&e, excerpt::MESSAGE).to_string(),
            })
            .collect()
    }
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CompiledSchema({})", self.source)
    }
}

impl PartialEq for CompiledSchema {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Serialize for CompiledSchema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.source.serialize(serializer)
    }
}

/// Violations reported of one value; a value that breaks its contract is refused all the same.
pub const MAX_VIOLATIONS: usize = 20;

/// One schema violation of a produced value (sent in `validation_error` frames).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaViolation {
    pub instance_path: String,
    pub keyword: String,
    pub message: String,
}

/// What a run or capability must produce.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum OutputContract {
    /// A JSON value valid against `schema`.
    JsonSchema {
        schema: CompiledSchema,
        #[serde(skip_serializing_if = "Option::is_none")]
        hints: Option<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        example: Option<Value>,
    },
    /// Free text (or any JSON) following `instructions`.
    Freeform {
        instructions: String,
        #[serde(rename = "expectedFormat", skip_serializing_if = "Option::is_none")]
        expected_format: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        example: Option<Value>,
    },
    /// An object with one key per listed facet.
    Facets { facets: Vec<String> },
}

/// The wire form, checked for shape by the body schemas before it gets here.
#[derive(Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
enum RawContract {
    JsonSchema {
        schema: Value,
        hints: Option<Value>,
        example: Option<Value>,
    },
    Freeform {
        instructions: String,
        #[serde(rename = "expectedFormat")]
        expected_format: Option<String>,
        example: Option<Value>,
    },
    Facets {
        facets: Vec<String>,
    },
}

impl OutputContract {
    /// Parses a contract at `path` of a request body, reporting every problem found.
    pub fn parse(value: &Value, path: &str) -> Result<Self, Vec<FieldError>> {
        let raw: RawContract = crate::validation::decode(value, path)
            .map_err(|e| vec![FieldError { code: "invalid_contract".into(), ..e }])?;
        match raw {
            RawContract::JsonSchema { schema, hints, example } => {
                let schema = CompiledSchema::compile(schema).map_err(|message| {
                    vec![FieldError::new(
                        format!("{path}/schema"),
                        "invalid_schema",
                        format!("not a valid JSON Schema: {message}"),
                    )]
                })?;
                Ok(Self::JsonSchema { schema, hints, example })
            }
            RawContract::Freeform { instructions, expected_format, example } => {
                Ok(Self::Freeform { instructions, expected_format, example })
            }
            RawContract::Facets { facets } => {
                let mut errors = Vec::new();
                for (i, facet) in facets.iter().enumerate() {
                    if facets[..i].contains(facet) {
                        errors.push(FieldError::new(
                            format!("{path}/facets/{i}"),
                            "duplicate_facet",
                            format!("facet \"{facet}\" is declared multiple times"),
                        ));
                    }
                }
                if errors.is_empty() { Ok(Self::Facets { facets }) } else { Err(errors) }
            }
        }
    }

    /// The facets this contract names (facets mode only).
    pub fn facets(&self) -> &[String] {
        match self {
            Self::Facets { facets } => facets,
            _ => &[],
        }
    }

    /// The JSON Schema a value must satisfy, if the contract has one.
    pub fn schema(&self) -> Option<&CompiledSchema> {
        match self {
            Self::JsonSchema { schema, .. } => Some(schema),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn facets_must_be_unique() {
        let err = OutputContract::parse(&json!({"mode": "facets", "facets": ["a", "b", "a"]}), "/oc").unwrap_err();
        assert_eq!(err[0].path, "/oc/facets/2");
        assert_eq!(err[0].code, "duplicate_facet");
    }

    #[test]
    fn invalid_schema_is_reported_at_its_path() {
        let err = OutputContract::parse(&json!({"mode": "json_schema", "schema": {"type": 12}}), "/oc").unwrap_err();
        assert_eq!(err[0].path, "/oc/schema");
    }

    #[test]
    fn schema_violations_name_the_instance_path() {
        let contract = OutputContract::parse(
            &json!({"mode": "json_schema", "schema": {"type": "object", "required": ["a"],
                    "properties": {"b": {"type": "string"}}}}),
            "",
        )
        .unwrap();
        let violations = contract.schema().unwrap().violations(&json!({"b": 1}));
        assert_eq!(violations.len(), 2, "{violations:?}");
        assert!(violations.iter().any(|v| v.instance_path == "/b" && v.keyword == "type"));
    }

    #[test]
    fn serialises_back_to_the_wire_form() {
        let wire = json!({"mode": "freeform", "instructions": "x", "expectedFormat": "md"});
        let contract = OutputContract::parse(&wire, "").unwrap();
        assert_eq!(serde_json::to_value(&contract).unwrap(), wire);
    }
}
