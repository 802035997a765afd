//! Typed reading of a body part that already passed its JSON Schema check.
//!
//! Two things would otherwise disagree with the schema the caller was shown: JSON Schema's
//! `integer` accepts `2.0` (a number with no fraction) where serde's `u32` refuses it, and serde
//! names the struct it was reading rather than the field at fault. [`decode`] reads whole numbers
//! written with a fraction as integers, and reports the failing field's own JSON Pointer.

use serde::de::DeserializeOwned;
use serde_json::{Number, Value};
use serde_path_to_error::Segment;

use super::FieldError;

/// Reads `value` (found at `at` in the body) as `T`, numbers normalised by [`integral_numbers`].
pub fn decode<T: DeserializeOwned>(value: &Value, at: &str) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(integral_numbers(value.clone())).map_err(|error| {
        let mut path = at.to_string();
        for segment in error.path() {
            match segment {
                Segment::Seq { index } => path.push_str(&super::pointer([index])),
                Segment::Map { key } => path.push_str(&super::pointer([key])),
                Segment::Enum { .. } | Segment::Unknown => {}
            }
        }
        FieldError::new(path, "invalid", error.into_inner().to_string())
    })
}

/// `value` with every number that is whole but written with a fraction (`2.0`, `1e3`) made an
/// integer, as JSON Schema's `integer` type reads it. Other numbers are left alone.
pub fn integral_numbers(value: Value) -> Value {
    match value {
        Value::Number(number) => Value::Number(integral(number)),
        Value::Array(items) => Value::Array(items.into_iter().map(integral_numbers).collect()),
        Value::Object(fields) => Value::Object(fields.into_iter().map(|(k, v)| (k, integral_numbers(v))).collect()),
        other => other,
    }
}

fn integral(number: Number) -> Number {
    let Some(float) = number.as_f64().filter(|_| number.is_f64()) else { return number };
    if float.fract() != 0.0 {
        return number;
    }
    // Exact only within ±2^53; beyond it a float is not a faithful integer, and is left as written.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if float.abs() > EXACT {
        return number;
    }
    #[allow(clippy::as_conversions)] // Whole and within ±2^53: the conversion is exact.
    let whole = float as i64;
    Number::from(whole)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Policy {
        max_retries: Option<u32>,
        base_delay: Option<f64>,
        steps: Option<Vec<Step>>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Step {
        count: u8,
    }

    #[test]
    fn whole_numbers_written_with_a_fraction_are_integers() {
        let policy: Policy = decode(&json!({"maxRetries": 2.0, "baseDelay": 1.5}), "/p").unwrap();
        assert_eq!(policy, Policy { max_retries: Some(2), base_delay: Some(1.5), steps: None });
        let policy: Policy = decode(&json!({"maxRetries": 3e0, "baseDelay": 2.0}), "/p").unwrap();
        assert_eq!((policy.max_retries, policy.base_delay), (Some(3), Some(2.0)));
        assert_eq!(integral_numbers(json!([-4.0, 0.5, 1e300, "2.0"])), json!([-4, 0.5, 1e300, "2.0"]));
    }

    #[test]
    fn an_error_names_the_field_at_fault() {
        let error = decode::<Policy>(&json!({"maxRetries": 2.5}), "/policies/retry").unwrap_err();
        assert_eq!(error.path, "/policies/retry/maxRetries");
        let error = decode::<Policy>(&json!({"steps": [{"count": 1}, {"count": 300}]}), "/p").unwrap_err();
        assert_eq!(error.path, "/p/steps/1/count");
        assert!(error.message.contains("300"), "{}", error.message);
    }
}
