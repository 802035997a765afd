//! JSON-Logic rules, compiled once with datalogic-rs and evaluated many times.
//!
//! datalogic-rs was chosen over jsonlogic-rs: both pass the official test suite, but datalogic
//! compiles a rule once and evaluates it in tens of nanoseconds, where jsonlogic-rs re-parses the
//! rule on every call (2–7 µs) and has not been maintained since 2020.

use std::fmt;
use std::sync::{Arc, LazyLock};

use datalogic_rs::{Engine, Logic, bumpalo::Bump};
use serde::{Serialize, Serializer};
use serde_json::Value;

static ENGINE: LazyLock<Engine> = LazyLock::new(Engine::new);

/// Where the whole run context is reachable from inside a condition (as in the anchor server).
pub const RUN_CONTEXT_VAR: &str = "metadata.runContextSnapshot";

/// A compiled JSON-Logic rule.
#[derive(Clone)]
pub struct Rule {
    source: Value,
    compiled: Arc<Logic>,
    reads_run_context: bool,
}

impl Rule {
    /// Compiles `source`; the error names the problem (unknown operator, wrong arity, …).
    pub fn compile(source: Value) -> Result<Self, String> {
        check_operators(&source)?;
        let compiled = ENGINE.compile(&source).map_err(|e| e.to_string())?;
        let reads_run_context = source.to_string().contains(RUN_CONTEXT_VAR);
        Ok(Self { source, compiled: Arc::new(compiled), reads_run_context })
    }

    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Whether the rule refers to `metadata.runContextSnapshot`, so callers only build that
    /// (potentially large) snapshot when it is read.
    pub fn reads_run_context(&self) -> bool {
        self.reads_run_context
    }

    /// Evaluates the rule against `data` and applies JSON-Logic truthiness to the result.
    pub fn holds(&self, data: &Value) -> Result<bool, String> {
        let arena = Bump::new();
        let result = ENGINE.evaluate(&self.compiled, data, &arena).map_err(|e| e.to_string())?;
        Ok(ENGINE.truthy(result))
    }
}

/// Rejects single-key objects whose key is not an operator: datalogic would accept them and only
/// fail at evaluation, long after the caller could have fixed the rule.
fn check_operators(rule: &Value) -> Result<(), String> {
    match rule {
        Value::Array(items) => items.iter().try_for_each(check_operators),
        Value::Object(map) => {
            if let (1, Some((name, arguments))) = (map.len(), map.iter().next()) {
                if !ENGINE.builtin_operator_names().any(|known| known == name) {
                    let mut message = format!("unknown operator `{name}`");
                    if let Some(close) = crate::validation::closest(name, ENGINE.builtin_operator_names()) {
                        message.push_str(&format!("; did you mean `{close}`?"));
                    }
                    return Err(message);
                }
                return check_operators(arguments);
            }
            map.values().try_for_each(check_operators)
        }
        _ => Ok(()),
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rule({})", self.source)
    }
}

impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Serialize for Rule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.source.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn evaluates_with_truthiness() {
        let rule = Rule::compile(json!({">=": [{"var": "score"}, 0.8]})).unwrap();
        assert!(rule.holds(&json!({"score": 0.9})).unwrap());
        assert!(!rule.holds(&json!({"score": 0.5})).unwrap());
        let var = Rule::compile(json!({"var": "items"})).unwrap();
        assert!(!var.holds(&json!({"items": []})).unwrap());
        assert!(var.holds(&json!({"items": [1]})).unwrap());
    }

    #[test]
    fn unknown_operators_fail_to_compile() {
        let err = Rule::compile(json!({"frobnicate": [1, 2]})).unwrap_err();
        assert!(err.contains("frobnicate"), "{err}");
        let err = Rule::compile(json!({"and": [{"vr": "x"}, true]})).unwrap_err();
        assert!(err.contains("did you mean `var`"), "{err}");
    }

    #[test]
    fn notices_run_context_reads() {
        let rule = Rule::compile(json!({"var": "metadata.runContextSnapshot.facets.a.value"}));
        assert!(rule.unwrap().reads_run_context());
        assert!(!Rule::compile(json!({"var": "a"})).unwrap().reads_run_context());
    }
}
