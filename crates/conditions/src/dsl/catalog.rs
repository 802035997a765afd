//! The variable catalog: every name a condition may use, with its type.
//!
//! Built-in `run.*` variables plus `facets.<facet>[.<prop>…]` generated from facet JSON Schemas
//! (the facet catalog in the configuration and the output contracts of registered capabilities).
//! A facet variable's canonical path is where goal and policy conditions find it at evaluation:
//! `metadata.runContextSnapshot.facets.<facet>.value[.<prop>…]`.

use serde::Serialize;
use serde_json::Value;

use std::collections::{HashMap, HashSet};

/// Where the run context sits inside the data a condition is evaluated against.
pub const SNAPSHOT_FACETS: &str = "metadata.runContextSnapshot.facets";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VarType {
    String,
    Number,
    Boolean,
    Array,
}

impl VarType {
    pub fn name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Array => "array",
        }
    }

    /// The type a JSON Schema `type` keyword names, if it is one a condition can compare.
    fn from_schema_type(name: &str) -> Option<Self> {
        match name {
            "string" => Some(Self::String),
            "number" | "integer" => Some(Self::Number),
            "boolean" => Some(Self::Boolean),
            "array" => Some(Self::Array),
            _ => None,
        }
    }

    /// Operators a variable of this type may be used with: numbers are ordered, the rest are not.
    pub fn allows_ordering(self) -> bool {
        self == Self::Number
    }
}

/// One variable of the catalog.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Variable {
    /// The path the compiled JSON-Logic reads.
    pub path: String,
    /// The shortest name, used by canonical rendering.
    pub dsl_path: String,
    /// Other accepted names (the legacy `facets.<facet>.value.<prop>` form).
    pub aliases: Vec<String>,
    #[serde(rename = "type")]
    pub var_type: VarType,
    pub description: String,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    variables: Vec<Variable>,
    /// Every accepted name (dsl path, aliases, canonical path) → index.
    names: HashMap<String, usize>,
    /// The schema of each facet, for checking names relative to a value inside it.
    facet_schemas: HashMap<String, Value>,
    /// Facets something on this server produces (a capability's output facet), with or without
    /// a schema: a goal condition on any other facet could never be met.
    produced: HashSet<String>,
}

const RUN_VARIABLES: [(&str, VarType, &str); 4] = [
    ("run.latencyMs", VarType::Number, "Milliseconds since the run started"),
    ("run.revisionCount", VarType::Number, "Replans so far (all reasons)"),
    ("run.planVersion", VarType::Number, "Version of the current plan"),
    ("run.requiresHitl", VarType::Boolean, "Whether the run asks for operator approval"),
];

impl Catalog {
    /// The built-in `run.*` variables only.
    pub fn builtin() -> Self {
        let mut catalog = Self::default();
        for (path, var_type, description) in RUN_VARIABLES {
            catalog.add(Variable {
                path: path.into(),
                dsl_path: path.into(),
                aliases: vec![],
                var_type,
                description: description.into(),
            });
        }
        catalog
    }

    /// The built-in variables plus those generated from `(facet name, JSON Schema)` pairs. The
    /// first definition of a path wins.
    pub fn with_facets<'a>(facets: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Self {
        let mut catalog = Self::builtin();
        for (facet, schema) in facets {
            catalog.facet_schemas.entry(facet.to_string()).or_insert_with(|| schema.clone());
            let at = Names {
                dsl: format!("facets.{facet}"),
                legacy: format!("facets.{facet}.value"),
                canonical: format!("{SNAPSHOT_FACETS}.{facet}.value"),
            };
            catalog.walk(schema, &at, facet, 0);
        }
        catalog.variables.sort_by(|a, b| a.dsl_path.cmp(&b.dsl_path));
        catalog.names = catalog
            .variables
            .iter()
            .enumerate()
            .flat_map(|(i, v)| names_of(v).map(move |n| (n.to_string(), i)))
            .collect();
        catalog
    }

    /// Records that something produces `facets`.
    pub fn produced(mut self, facets: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.produced.extend(facets.into_iter().map(Into::into));
        self
    }

    /// Whether a facet is described (has a schema) or produced by something on this server.
    pub fn knows_facet(&self, facet: &str) -> bool {
        self.facet_schemas.contains_key(facet) || self.produced.contains(facet)
    }

    /// Adds `variable` unless one of the same DSL name is there. Its DSL name takes the place of
    /// another variable's alias: an array's legacy alias (`facets.recs.value`) yields to a field
    /// of its items named `value`, whose own name it is.
    fn add(&mut self, variable: Variable) {
        let taken =
            self.names.get(&variable.dsl_path).is_some_and(|&i| self.variables[i].dsl_path == variable.dsl_path);
        if taken {
            return;
        }
        let index = self.variables.len();
        for name in names_of(&variable) {
            self.names.insert(name.to_string(), index);
        }
        self.variables.push(variable);
    }

    /// Registers the leaves and arrays of `schema` under `at` (bounded depth against cycles).
    fn walk(&mut self, schema: &Value, at: &Names, facet: &str, depth: usize) {
        if depth > 16 {
            return;
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            for sub in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
                self.walk(sub, at, facet, depth + 1);
            }
        }
        let types = schema_types(schema);
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (name, sub) in properties {
                self.walk(sub, &at.child(name), facet, depth + 1);
            }
        }
        let description =
            schema.get("description").and_then(Value::as_str).map_or_else(|| format!("facet {facet}"), String::from);
        for var_type in types {
            self.add(Variable {
                path: at.canonical.clone(),
                dsl_path: at.dsl.clone(),
                aliases: vec![at.legacy.clone()],
                var_type,
                description: description.clone(),
            });
            if var_type == VarType::Array
                && let Some(items) = schema.get("items")
            {
                // Fields of array items appear under the array's own path (`facets.recs.severity`).
                self.walk(items, at, facet, depth + 1);
            }
        }
    }

    /// The variable known by `name` (its dsl path, an alias or its canonical path).
    pub fn get(&self, name: &str) -> Option<&Variable> {
        self.names.get(name).map(|&i| &self.variables[i])
    }

    pub fn variables(&self) -> &[Variable] {
        &self.variables
    }

    /// The JSON Schema of the value at `pointer` (RFC 6901 segments, decoded) inside `facet`, if the
    /// catalog knows it. A scalar is described as the one-property object a condition sees:
    /// `{<last segment or "value">: <scalar>}`.
    pub fn schema_at(&self, facet: &str, segments: &[String]) -> Option<Value> {
        let mut schema = self.facet_schemas.get(facet)?;
        for segment in segments {
            schema = if segment.parse::<usize>().is_ok() && schema.get("items").is_some() {
                schema.get("items")?
            } else {
                schema.get("properties")?.get(segment)?
            };
        }
        let is_object = schema.get("properties").is_some() || schema.get("type") == Some(&Value::from("object"));
        let is_array = schema.get("type") == Some(&Value::from("array"));
        if is_object || is_array {
            return Some(schema.clone());
        }
        let name = segments.last().map_or("value", String::as_str);
        Some(serde_json::json!({"type": "object", "properties": {name: schema}}))
    }

    /// A registered name close to `name`: a plausible typo, else the entry sharing the longest
    /// run of leading dotted segments.
    pub fn suggest(&self, name: &str) -> Option<&str> {
        let names = self.variables.iter().map(|v| v.dsl_path.as_str());
        if let Some(close) = crate::suggest::closest(name, names) {
            return Some(close);
        }
        let segments: Vec<&str> = name.split('.').collect();
        self.variables
            .iter()
            .map(|v| (v.dsl_path.as_str(), v.dsl_path.split('.').zip(&segments).take_while(|(a, b)| a == *b).count()))
            .filter(|(_, shared)| *shared > 0)
            .max_by_key(|(_, shared)| *shared)
            .map(|(path, _)| path)
    }
}

fn names_of(v: &Variable) -> impl Iterator<Item = &str> {
    std::iter::once(v.dsl_path.as_str())
        .chain(v.aliases.iter().map(String::as_str))
        .chain(std::iter::once(v.path.as_str()))
}

/// The comparable types a schema allows (`null` ignored; inferred from `enum` when untyped).
fn schema_types(schema: &Value) -> Vec<VarType> {
    let from_names = |names: Vec<&str>| names.into_iter().filter_map(VarType::from_schema_type).collect::<Vec<_>>();
    match schema.get("type") {
        Some(Value::String(name)) => from_names(vec![name]),
        Some(Value::Array(names)) => from_names(names.iter().filter_map(Value::as_str).collect()),
        _ => match schema.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
            Some(Value::String(_)) => vec![VarType::String],
            Some(Value::Number(_)) => vec![VarType::Number],
            Some(Value::Bool(_)) => vec![VarType::Boolean],
            _ => vec![],
        },
    }
    .into_iter()
    .take(1)
    .collect()
}

/// The three names of one schema location.
struct Names {
    dsl: String,
    legacy: String,
    canonical: String,
}

impl Names {
    fn child(&self, property: &str) -> Names {
        Names {
            dsl: format!("{}.{property}", self.dsl),
            legacy: format!("{}.{property}", self.legacy),
            canonical: format!("{}.{property}", self.canonical),
        }
    }
}

/// The type of the value at `path` (dotted property names) inside `schema`, if the schema says.
/// `Ok(None)`: the schema allows it but gives no comparable type; `Err(())`: no such property.
pub fn type_in_schema(schema: &Value, path: &str) -> Result<Option<VarType>, ()> {
    let mut current = schema;
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let items = current.get("items").filter(|_| schema_types(current) == [VarType::Array]);
        let holder = items.unwrap_or(current);
        match holder.get("properties").and_then(|p| p.get(segment)) {
            Some(sub) => current = sub,
            None if holder.get("additionalProperties") == Some(&Value::Bool(false))
                || holder.get("properties").is_some() =>
            {
                return Err(());
            }
            None => return Ok(None),
        }
    }
    Ok(schema_types(current).first().copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog() -> Catalog {
        let plan_knobs = json!({"type": "object", "properties": {
            "hookIntensity": {"type": "number"},
            "formatType": {"enum": ["text", "image"]},
            "structure": {"type": "object", "properties": {"lengthLevel": {"type": ["integer", "null"]}}}
        }});
        let recs =
            json!({"type": "array", "items": {"type": "object", "properties": {"severity": {"type": "string"}}}});
        let copy = json!({"type": "string"});
        Catalog::with_facets([("planKnobs", &plan_knobs), ("recommendationSet", &recs), ("post_copy", &copy)])
    }

    #[test]
    fn generates_facet_variables() {
        let c = catalog();
        let v = c.get("facets.planKnobs.hookIntensity").unwrap();
        assert_eq!(v.path, "metadata.runContextSnapshot.facets.planKnobs.value.hookIntensity");
        assert_eq!(v.var_type, VarType::Number);
        assert_eq!(c.get("facets.planKnobs.value.hookIntensity").unwrap().dsl_path, "facets.planKnobs.hookIntensity");
        assert_eq!(c.get("facets.planKnobs.formatType").unwrap().var_type, VarType::String);
        assert_eq!(c.get("facets.planKnobs.structure.lengthLevel").unwrap().var_type, VarType::Number);
        assert_eq!(c.get("facets.recommendationSet").unwrap().var_type, VarType::Array);
        assert_eq!(c.get("facets.recommendationSet.severity").unwrap().var_type, VarType::String);
        assert_eq!(c.get("facets.post_copy").unwrap().var_type, VarType::String);
        assert!(c.get("facets.planKnobs").is_none(), "objects themselves are not variables");
        assert_eq!(c.get("run.latencyMs").unwrap().var_type, VarType::Number);
    }

    #[test]
    fn a_field_named_value_of_an_arrays_items_is_that_field() {
        let recs = json!({"type": "array", "items": {"type": "object", "properties": {"value": {"type": "number"}}}});
        let c = Catalog::with_facets([("recs", &recs)]);
        assert_eq!(c.get("facets.recs.value").unwrap().var_type, VarType::Number, "not the array's legacy alias");
        assert_eq!(c.get("facets.recs").unwrap().var_type, VarType::Array);
        let compiled = crate::dsl::compile("some(facets.recs, item.value > 1)", &c, crate::dsl::Scope::Catalog);
        assert!(compiled.is_ok(), "{compiled:?}");
    }

    #[test]
    fn suggests_close_names() {
        let c = catalog();
        assert_eq!(c.suggest("facets.planKnobs.hookIntensty"), Some("facets.planKnobs.hookIntensity"));
        assert_eq!(c.suggest("facets.planKnobs.somethingElse").map(|s| s.starts_with("facets.planKnobs.")), Some(true));
        assert_eq!(c.suggest("zzz"), None);
    }

    #[test]
    fn types_inside_schemas() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "boolean"}}},
                             "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}}}}}});
        assert_eq!(type_in_schema(&schema, "a.b"), Ok(Some(VarType::Boolean)));
        assert_eq!(type_in_schema(&schema, "list"), Ok(Some(VarType::Array)));
        assert_eq!(type_in_schema(&schema, "nope"), Err(()));
        assert_eq!(type_in_schema(&json!({"type": "object"}), "free"), Ok(None));
    }
}
