//! A plan node's arguments for an MCP tool: a JSON object in which a value may be taken from a
//! facet when the node runs — `{"$facet": "<facet>", "pointer": "<JSON Pointer, optional>"}`
//! anywhere in it. [`references`] finds them (checked when the draft is: each must name a facet
//! the run will have), [`resolve`] replaces them just before the call.

use serde_json::{Map, Value};

use crate::capability::McpTool;
use crate::validation::pointer;

/// The key that makes an object a facet reference.
pub const FACET_KEY: &str = "$facet";

/// A facet reference found in a node's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FacetRef {
    /// Where in the arguments (a JSON Pointer into them).
    pub at: String,
    pub facet: String,
    /// Where in the facet's value (`""`: the whole value).
    pub pointer: String,
}

/// Why arguments could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentError {
    /// An object with `$facet` that is not `{"$facet": "<name>", "pointer"?: "/…"}`.
    #[error("{at}: a facet reference is {{\"$facet\": \"<facet>\", \"pointer\": \"/optional/path\"}}: {problem}")]
    Malformed { at: String, problem: String },
    /// When the node ran, the facet (or the place the pointer names in it) had no value.
    #[error("{at}: facet `{facet}` has no value at `{pointer}`")]
    Unresolved { at: String, facet: String, pointer: String },
}

/// A problem of drafted arguments: a diagnostic's code and its message.
pub type Problem = (&'static str, String);

/// A node's arguments as a draft gives them, checked for `tool`: an object (none given: `{}`),
/// its facet references well formed, and valid against the tool's input schema wherever it is
/// not a reference (a reference's value is known only when the node runs). Returns the arguments
/// and the facets they read (the node's inputs), or every problem as `(code, message)`.
pub fn check(tool: &McpTool, arguments: Option<Value>) -> Result<(Value, Vec<String>), Vec<Problem>> {
    let arguments = arguments.unwrap_or_else(|| Value::Object(Map::new()));
    if !arguments.is_object() {
        return Err(vec![("INVALID_ARGUMENTS", "`arguments` must be a JSON object".to_string())]);
    }
    let found = references(&arguments).map_err(|e| vec![("INVALID_FACET_REFERENCE", e.to_string())])?;
    let under_a_reference = |path: &str| {
        found.iter().any(|r| path == r.at || path.strip_prefix(r.at.as_str()).is_some_and(|rest| rest.starts_with('/')))
    };
    let problems: Vec<Problem> = tool
        .arguments
        .violations(&arguments)
        .into_iter()
        .filter(|v| !under_a_reference(&v.instance_path))
        .map(|v| {
            let at = if v.instance_path.is_empty() { "/".to_string() } else { v.instance_path };
            ("INVALID_ARGUMENTS", format!("arguments at `{at}`: {}", v.message))
        })
        .collect();
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut facets: Vec<String> = Vec::new();
    for reference in found {
        if !facets.contains(&reference.facet) {
            facets.push(reference.facet);
        }
    }
    Ok((arguments, facets))
}

/// Every facet reference in `arguments`.
pub fn references(arguments: &Value) -> Result<Vec<FacetRef>, ArgumentError> {
    let mut found = Vec::new();
    collect(arguments, &mut Vec::new(), &mut found)?;
    Ok(found)
}

/// `arguments` with every facet reference replaced by the value it names; `facet` gives a facet's
/// current value.
pub fn resolve<'a>(arguments: &Value, facet: impl Fn(&str) -> Option<&'a Value>) -> Result<Value, ArgumentError> {
    let mut resolved = arguments.clone();
    for reference in references(arguments)? {
        let value = facet(&reference.facet).and_then(|v| v.pointer(&reference.pointer)).cloned();
        let Some(value) = value else {
            let FacetRef { at, facet, pointer } = reference;
            return Err(ArgumentError::Unresolved { at, facet, pointer });
        };
        match resolved.pointer_mut(&reference.at) {
            Some(slot) => *slot = value,
            None => resolved = value,
        }
    }
    Ok(resolved)
}

/// Adds the references in `value` (at `path`) to `found`, not looking inside a reference.
fn collect(value: &Value, path: &mut Vec<String>, found: &mut Vec<FacetRef>) -> Result<(), ArgumentError> {
    match value {
        Value::Object(object) if object.contains_key(FACET_KEY) => found.push(reference(object, pointer(path.iter()))?),
        Value::Object(object) => {
            for (key, item) in object {
                path.push(key.clone());
                collect(item, path, found)?;
                path.pop();
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                path.push(index.to_string());
                collect(item, path, found)?;
                path.pop();
            }
        }
        _ => {}
    }
    Ok(())
}

fn reference(object: &Map<String, Value>, at: String) -> Result<FacetRef, ArgumentError> {
    let malformed = |problem: &str| ArgumentError::Malformed { at: at.clone(), problem: problem.to_string() };
    if let Some(extra) = object.keys().find(|k| *k != FACET_KEY && *k != "pointer") {
        return Err(malformed(&format!("unexpected key `{}`", crate::excerpt::excerpt(extra, 40))));
    }
    let facet = object.get(FACET_KEY).and_then(Value::as_str).filter(|f| !f.is_empty());
    let facet = facet.ok_or_else(|| malformed("`$facet` must name a facet"))?;
    let pointer = match object.get("pointer") {
        None => "",
        Some(Value::String(p)) if p.is_empty() || p.starts_with('/') => p,
        Some(_) => return Err(malformed("`pointer` must be a JSON Pointer (`/a/0/b`)")),
    };
    Ok(FacetRef { at, facet: facet.to_string(), pointer: pointer.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_are_found_anywhere_and_resolved_from_facets() {
        let arguments = json!({"query": {"$facet": "brief", "pointer": "/topic"}, "limit": 3,
                               "ids": [1, {"$facet": "picked"}]});
        let found = references(&arguments).unwrap();
        let mut at: Vec<(&str, &str, &str)> =
            found.iter().map(|r| (r.at.as_str(), r.facet.as_str(), r.pointer.as_str())).collect();
        at.sort();
        assert_eq!(at, [("/ids/1", "picked", ""), ("/query", "brief", "/topic")]);

        let brief = json!({"topic": "flexrun"});
        let picked = json!([7, 8]);
        let facets = |name: &str| match name {
            "brief" => Some(&brief),
            "picked" => Some(&picked),
            _ => None,
        };
        let resolved = resolve(&arguments, facets).unwrap();
        assert_eq!(resolved, json!({"query": "flexrun", "limit": 3, "ids": [1, [7, 8]]}));
    }

    #[test]
    fn a_reference_that_finds_nothing_says_where_and_what() {
        let arguments = json!({"query": {"$facet": "brief", "pointer": "/missing"}});
        let brief = json!({"topic": "flexrun"});
        let error = resolve(&arguments, |_| Some(&brief)).unwrap_err();
        assert_eq!(
            error,
            ArgumentError::Unresolved { at: "/query".into(), facet: "brief".into(), pointer: "/missing".into() }
        );
        assert!(resolve(&json!({"q": {"$facet": "nowhere"}}), |_| None).is_err());
    }

    #[test]
    fn malformed_references_are_refused_with_their_place() {
        for (arguments, at) in [
            (json!({"q": {"$facet": 3}}), "/q"),
            (json!({"q": {"$facet": ""}}), "/q"),
            (json!({"q": {"$facet": "brief", "pointer": "topic"}}), "/q"),
            (json!({"q": [{"$facet": "brief", "extra": true}]}), "/q/0"),
        ] {
            match references(&arguments) {
                Err(ArgumentError::Malformed { at: found, .. }) => assert_eq!(found, at, "{arguments}"),
                other => panic!("{arguments}: {other:?}"),
            }
        }
    }

    fn tool(schema: Value) -> McpTool {
        McpTool {
            server: "s".into(),
            name: "t".into(),
            arguments: crate::contract::CompiledSchema::compile(schema).unwrap(),
            output: None,
            hints: Default::default(),
        }
    }

    #[test]
    fn drafted_arguments_are_checked_against_the_schema_except_where_a_facet_gives_them() {
        let add = tool(json!({"type": "object", "required": ["a", "b"], "additionalProperties": false,
                              "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}));
        let (arguments, facets) =
            check(&add, Some(json!({"a": 1, "b": {"$facet": "sum", "pointer": "/total"}}))).unwrap();
        assert_eq!((arguments["a"].clone(), facets), (json!(1), vec!["sum".to_string()]));

        let problems = check(&add, Some(json!({"a": "one", "b": 2}))).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0, "INVALID_ARGUMENTS");
        assert!(problems[0].1.contains("`/a`"), "{}", problems[0].1);
        assert!(check(&add, None).unwrap_err().iter().any(|(_, m)| m.contains("\"a\"")));
        assert_eq!(check(&add, Some(json!([1]))).unwrap_err()[0].0, "INVALID_ARGUMENTS");
        assert_eq!(check(&add, Some(json!({"a": {"$facet": 1}}))).unwrap_err()[0].0, "INVALID_FACET_REFERENCE");
        assert_eq!(check(&tool(json!({"type": "object"})), None).unwrap(), (json!({}), vec![]));
    }

    #[test]
    fn arguments_without_references_are_left_as_they_are() {
        let arguments = json!({"q": "plain", "nested": {"a": [1, 2]}});
        assert_eq!(references(&arguments).unwrap(), []);
        assert_eq!(resolve(&arguments, |_| None).unwrap(), arguments);
    }
}
