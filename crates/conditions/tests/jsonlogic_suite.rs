//! The official JSON-Logic test suite (tests/data/jsonlogic-tests.json, the `tests.json` published
//! with the JSON-Logic specification, MIT licence) through flexrun's rule engine.
//!
//! Every one of the 275 cases must pass: flexrun supports every operator the suite uses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

use serde_json::Value;

use flexrun_conditions::Rule;

#[test]
fn every_case_of_the_official_suite_passes() {
    let suite: Vec<Value> = serde_json::from_str(include_str!("data/jsonlogic-tests.json")).unwrap();
    let mut failures = Vec::new();
    let mut cases = 0;
    for entry in &suite {
        let Value::Array(case) = entry else { continue }; // section comments
        let (rule, data, expected) = (&case[0], &case[1], &case[2]);
        cases += 1;
        let outcome = Rule::compile(rule.clone()).and_then(|r| r.evaluate(data));
        match outcome {
            Ok(actual) if same(&actual, expected) => {}
            other => failures.push(format!("{rule} with {data}: expected {expected}, got {other:?}")),
        }
    }
    assert_eq!(cases, 275);
    assert!(failures.is_empty(), "{} of {cases} cases failed:\n{}", failures.len(), failures.join("\n"));
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}
