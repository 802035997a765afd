//! The optional facet catalog from the configuration: descriptions for the planner and JSON
//! Schemas that every value written to a facet must satisfy.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::contract::{CompiledSchema, SchemaViolation};
use crate::settings::FacetDefinition;

#[derive(Debug, Clone, Default)]
pub struct FacetCatalog {
    definitions: BTreeMap<String, FacetDefinition>,
    schemas: BTreeMap<String, CompiledSchema>,
}

#[derive(Debug, thiserror::Error)]
#[error("facet catalog: facet `{facet}` has an invalid schema: {message}")]
pub struct FacetCatalogError {
    pub facet: String,
    pub message: String,
}

/// The facet values an output writes: each of the output facets present as a key of an object
/// output; if there is none, and there is exactly one output facet, the whole output goes to that
/// facet.
pub fn writes<'o>(output_facets: &[String], output: &'o Value) -> Vec<(String, &'o Value)> {
    let keyed: Vec<(String, &Value)> = output_facets
        .iter()
        .filter_map(|facet| output.get(facet.as_str()).map(|value| (facet.clone(), value)))
        .collect();
    match (keyed.is_empty(), output_facets) {
        (true, [only]) => vec![(only.clone(), output)],
        _ => keyed,
    }
}

impl FacetCatalog {
    pub fn new(definitions: BTreeMap<String, FacetDefinition>) -> Result<Self, FacetCatalogError> {
        let mut schemas = BTreeMap::new();
        for (facet, definition) in &definitions {
            if let Some(schema) = &definition.schema {
                let compiled = CompiledSchema::compile(schema.clone())
                    .map_err(|message| FacetCatalogError { facet: facet.clone(), message })?;
                schemas.insert(facet.clone(), compiled);
            }
        }
        Ok(Self { definitions, schemas })
    }

    pub fn definitions(&self) -> &BTreeMap<String, FacetDefinition> {
        &self.definitions
    }

    /// Problems of `value` as a value of `facet` (none for facets without a schema).
    pub fn violations(&self, facet: &str, value: &Value) -> Vec<SchemaViolation> {
        self.schemas.get(facet).map(|schema| schema.violations(value)).unwrap_or_default()
    }

    /// Problems of the facet values a node's `output` writes to its `output_facets`, each path
    /// prefixed with its facet.
    pub fn output_violations(&self, output_facets: &[String], output: &Value) -> Vec<SchemaViolation> {
        writes(output_facets, output)
            .into_iter()
            .flat_map(|(facet, value)| {
                self.violations(&facet, value).into_iter().map(move |mut v| {
                    v.instance_path = format!("/{facet}{}", v.instance_path);
                    v
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checks_values_of_facets_with_a_schema() {
        let definitions = BTreeMap::from([(
            "post".to_string(),
            FacetDefinition { description: None, schema: Some(json!({"type": "object", "required": ["text"]})) },
        )]);
        let catalog = FacetCatalog::new(definitions).unwrap();
        assert!(catalog.violations("post", &json!({"text": "x"})).is_empty());
        assert_eq!(catalog.violations("post", &json!({})).len(), 1);
        assert!(catalog.violations("other", &json!(1)).is_empty());
    }

    #[test]
    fn rejects_invalid_schemas() {
        let definitions = BTreeMap::from([(
            "bad".to_string(),
            FacetDefinition { description: None, schema: Some(json!({"type": 5})) },
        )]);
        assert_eq!(FacetCatalog::new(definitions).unwrap_err().facet, "bad");
    }
}
