//! JSON-Logic rules, compiled once with datalogic-rs and evaluated many times.
//!
//! datalogic-rs was chosen over jsonlogic-rs: both pass the official test suite, but datalogic
//! compiles a rule once and evaluates it in tens of nanoseconds, where jsonlogic-rs re-parses the
//! rule on every call (2–7 µs) and has not been maintained since 2020.

use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, LazyLock};

use datalogic_rs::{DataValue, Engine, Logic, bumpalo::Bump};

use crate::work;
use serde::{Serialize, Serializer};
use serde_json::{Value, json};

static ENGINE: LazyLock<Engine> = LazyLock::new(Engine::new);

thread_local! {
    /// Scratch memory for evaluations on this thread, reset before each one.
    static ARENA: RefCell<Bump> = RefCell::new(Bump::with_capacity(4096));
}

/// Where the whole run context is reachable from inside a condition.
pub const RUN_CONTEXT_VAR: &str = "metadata.runContextSnapshot";

/// Where a condition finds facts about its run (`run.latencyMs`, …).
pub const RUN_VAR: &str = "run";

/// A compiled JSON-Logic rule.
#[derive(Clone)]
pub struct Rule {
    /// The rule as written or shown (for a DSL condition, the stored form with alias-prefixed
    /// quantifier variables).
    source: Value,
    compiled: Arc<Logic>,
    /// The form evaluated, kept when an evaluation's work is to be estimated first
    /// ([`crate::work`]: the rule iterates or builds values).
    estimated: Option<Arc<Value>>,
    reads_run_context: bool,
    reads_run: bool,
}

impl Rule {
    /// Compiles standard JSON-Logic; the error names the problem (unknown operator, …).
    pub fn compile(source: Value) -> Result<Self, String> {
        let eval = source.clone();
        Self::from_dsl(source, eval)
    }

    /// A rule shown as `source` and evaluated as `eval` (a compiled DSL condition's two forms).
    pub fn from_dsl(source: Value, eval: Value) -> Result<Self, String> {
        check_operators(&eval)?;
        let compiled = ENGINE.compile(&eval).map_err(|e| e.to_string())?;
        let mut paths = Vec::new();
        read_paths(&eval, &mut paths);
        let reads_run_context = paths.iter().any(|p| p.starts_with(RUN_CONTEXT_VAR));
        let reads_run = paths.iter().any(|p| p == RUN_VAR || p.starts_with(&format!("{RUN_VAR}.")));
        let estimated = work::needs_estimate(&eval).then(|| Arc::new(eval));
        Ok(Self { source, compiled: Arc::new(compiled), estimated, reads_run_context, reads_run })
    }

    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Whether the rule reads `metadata.runContextSnapshot`, so callers only build that
    /// (potentially large) snapshot when it is read.
    pub fn reads_run_context(&self) -> bool {
        self.reads_run_context
    }

    /// Whether the rule reads `run.*` facts.
    pub fn reads_run(&self) -> bool {
        self.reads_run
    }

    /// Evaluates the rule against `data` and returns the result as JSON. An evaluation that could
    /// take more than [`work::MOST_WORK`] steps over `data` is refused before it starts.
    pub fn evaluate(&self, data: &Value) -> Result<Value, String> {
        self.within_bounds(data)?;
        let arena = Bump::new();
        let result = ENGINE.evaluate(&self.compiled, data, &arena).map_err(|e| message(&e))?;
        serde_json::to_value(result.to_owned()).map_err(|e| e.to_string())
    }

    /// Evaluates the rule against `data` and applies JSON-Logic truthiness to the result (refused
    /// as [`Self::evaluate`] is).
    pub fn holds(&self, data: &Value) -> Result<bool, String> {
        self.within_bounds(data)?;
        with_arena(|arena| truth(ENGINE.evaluate(&self.compiled, data, arena)))
    }

    fn within_bounds(&self, data: &Value) -> Result<(), String> {
        self.estimated.as_deref().map_or(Ok(()), |rule| work::check(rule, data))
    }
}

/// Runs `f` with this thread's evaluation arena, emptied first.
fn with_arena<T>(f: impl FnOnce(&Bump) -> T) -> T {
    ARENA.with(|arena| {
        let mut arena = arena.borrow_mut();
        arena.reset();
        f(&arena)
    })
}

fn truth(result: datalogic_rs::Result<&DataValue<'_>>) -> Result<bool, String> {
    result.map(|value| ENGINE.truthy(value)).map_err(|e| message(&e))
}

/// An evaluation error as a reader can act on it. The engine reports arithmetic or a comparison on
/// a value that is not a number as a thrown `{"type":"NaN"}`, which reads as an internal error.
fn message(error: &datalogic_rs::Error) -> String {
    let nan = error.thrown_value().and_then(|thrown| serde_json::to_value(thrown).ok()) == Some(json!({"type": "NaN"}));
    match (nan, error.operator()) {
        (true, Some(operator)) => {
            format!("`{operator}` needs numbers, and an operand is not one (a string, null, a list or an object)")
        }
        (true, None) => {
            "an operator needs numbers, and an operand is not one (a string, null, a list or an object)".into()
        }
        (false, _) => error.to_string(),
    }
}

/// Every data path the rule reads (`var`, `val` and `missing` operands), dotted.
fn read_paths(rule: &Value, out: &mut Vec<String>) {
    match rule {
        Value::Array(items) => items.iter().for_each(|item| read_paths(item, out)),
        Value::Object(map) => {
            for (op, args) in map {
                match (op.as_str(), args) {
                    ("var", Value::String(path)) => out.push(path.clone()),
                    ("var", Value::Array(items)) => out.extend(items.first().and_then(Value::as_str).map(String::from)),
                    ("val", Value::Array(items)) => {
                        out.push(items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("."))
                    }
                    ("missing", Value::Array(items)) => {
                        out.extend(items.iter().filter_map(Value::as_str).map(String::from))
                    }
                    _ => read_paths(args, out),
                }
            }
        }
        _ => {}
    }
}

/// Rejects single-key objects whose key is not an operator: datalogic would accept them and only
/// fail at evaluation, long after the caller could have fixed the rule. An object of several keys
/// one of which is an operator is told as such (the engine says "Unknown Operator").
fn check_operators(rule: &Value) -> Result<(), String> {
    match rule {
        Value::Array(items) => items.iter().try_for_each(check_operators),
        Value::Object(map) => {
            if let (1, Some((name, arguments))) = (map.len(), map.iter().next()) {
                if !ENGINE.builtin_operator_names().any(|known| known == name) {
                    let mut message = format!("unknown operator `{name}`");
                    if let Some(close) = crate::suggest::closest(name, ENGINE.builtin_operator_names()) {
                        message.push_str(&format!("; did you mean `{close}`?"));
                    }
                    return Err(message);
                }
                return check_operators(arguments);
            }
            if map.len() > 1 && map.keys().any(|key| ENGINE.builtin_operator_names().any(|known| known == key)) {
                return Err(format!(
                    "an operation is an object of one key, its operator; this one has {} keys",
                    map.len()
                ));
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
    fn a_comparison_of_a_value_that_is_not_a_number_says_so() {
        let rule = Rule::compile(json!({">": [{"var": "a"}, 1]})).unwrap();
        for error in [rule.holds(&json!({"a": "x"})).unwrap_err(), rule.evaluate(&json!({"a": "x"})).unwrap_err()] {
            assert_eq!(error, "`>` needs numbers, and an operand is not one (a string, null, a list or an object)");
        }
    }

    #[test]
    fn unknown_operators_fail_to_compile() {
        let err = Rule::compile(json!({"frobnicate": [1, 2]})).unwrap_err();
        assert!(err.contains("frobnicate"), "{err}");
        let err = Rule::compile(json!({"and": [{"vr": "x"}, true]})).unwrap_err();
        assert!(err.contains("did you mean `var`"), "{err}");
        let err = Rule::compile(json!({"==": [1, 1], "!=": [1, 2]})).unwrap_err();
        assert_eq!(err, "an operation is an object of one key, its operator; this one has 2 keys");
    }

    #[test]
    fn notices_run_context_reads() {
        let rule = Rule::compile(json!({"var": "metadata.runContextSnapshot.facets.a.value"}));
        assert!(rule.unwrap().reads_run_context());
        assert!(!Rule::compile(json!({"var": "a"})).unwrap().reads_run_context());
    }
}
