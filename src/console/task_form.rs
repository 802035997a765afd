//! The form a human task is answered with, generated from its capability's output JSON Schema:
//! one field per top-level property (text, number, yes/no, a choice, or JSON for anything
//! nested), or one JSON field when the schema is not an object of properties. The server checks
//! the submission against the schema; the page shows its errors at their fields.

use serde_json::Value;

use crate::capability::Registry;

/// One field of the form.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The property name (empty for the whole output as JSON).
    pub name: String,
    pub label: String,
    /// `text`, `textarea`, `number`, `integer`, `checkbox`, `select` or `json`.
    pub kind: &'static str,
    pub required: bool,
    pub options: Vec<String>,
    pub description: String,
}

/// Longest text that still gets a one-line input.
const SHORT_TEXT: u64 = 120;

/// The fields for the output contract of the capability `capability_id` (one JSON field when
/// the capability is unknown or declares no schema).
pub fn for_capability(registry: &Registry, capability_id: &str) -> Vec<Field> {
    let snapshot = registry.snapshot();
    let schema = snapshot.get(capability_id).and_then(|c| c.registration.pointer("/outputContract/schema"));
    fields(schema.unwrap_or(&Value::Null))
}

/// The fields for an output `schema`.
pub fn fields(schema: &Value) -> Vec<Field> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object).filter(|p| !p.is_empty()) else {
        return vec![Field {
            name: String::new(),
            label: "Output (JSON)".into(),
            kind: "json",
            required: true,
            options: Vec::new(),
            description: String::new(),
        }];
    };
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    properties
        .iter()
        .map(|(name, property)| {
            let options: Vec<String> = property
                .get("enum")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|o| o.as_str().map(String::from))
                .collect();
            Field {
                name: name.clone(),
                label: property.get("title").and_then(Value::as_str).unwrap_or(name).to_string(),
                kind: kind(property, !options.is_empty()),
                required: required.contains(&name.as_str()),
                options,
                description: property.get("description").and_then(Value::as_str).unwrap_or_default().to_string(),
            }
        })
        .collect()
}

fn kind(property: &Value, has_options: bool) -> &'static str {
    let type_name = match property.get("type") {
        Some(Value::String(t)) => t.as_str(),
        // `["string", "null"]`: the first type that is not null.
        Some(Value::Array(types)) => types.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or(""),
        _ => "",
    };
    match type_name {
        "string" if has_options => "select",
        "string" if property.get("maxLength").and_then(Value::as_u64).is_some_and(|n| n <= SHORT_TEXT) => "text",
        "string" => "textarea",
        "number" => "number",
        "integer" => "integer",
        "boolean" => "checkbox",
        _ => "json",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_property_becomes_a_field_of_its_type() {
        let schema = json!({
            "type": "object",
            "required": ["title", "score"],
            "properties": {
                "title": {"type": "string", "maxLength": 80, "title": "Post title"},
                "body": {"type": "string", "description": "The text"},
                "score": {"type": "number"},
                "count": {"type": ["integer", "null"]},
                "publish": {"type": "boolean"},
                "tone": {"type": "string", "enum": ["calm", "bold"]},
                "tags": {"type": "array", "items": {"type": "string"}}
            }
        });
        let fields = fields(&schema);
        let kinds: Vec<(&str, &str, bool)> = fields.iter().map(|f| (f.name.as_str(), f.kind, f.required)).collect();
        assert_eq!(
            kinds,
            [
                ("body", "textarea", false),
                ("count", "integer", false),
                ("publish", "checkbox", false),
                ("score", "number", true),
                ("tags", "json", false),
                ("title", "text", true),
                ("tone", "select", false)
            ]
        );
        assert_eq!(fields[5].label, "Post title");
        assert_eq!(fields[6].options, ["calm", "bold"]);
        assert_eq!(fields[0].description, "The text");
    }

    #[test]
    fn a_schema_without_properties_is_one_json_field() {
        for schema in [json!({"type": "object"}), json!({"type": "array"}), json!(true)] {
            let fields = fields(&schema);
            assert_eq!(fields.len(), 1);
            assert_eq!((fields[0].name.as_str(), fields[0].kind), ("", "json"));
        }
    }
}
