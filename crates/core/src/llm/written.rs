//! What model calls send again and again — the planner's instructions, response schemas — with
//! its JSON written once.
//!
//! Writing a request is mostly escaping its text into JSON strings, and the planner's system
//! prompt and the draft schema are most of a planning request; they are the same in every one.
//! Kept as JSON, they are copied into a request, not escaped again: the request's bytes are the
//! same either way.

use serde::Serialize;
use serde_json::value::RawValue;

/// Text every call of a kind sends unchanged, with its JSON string.
#[derive(Debug)]
pub struct FixedText {
    text: String,
    json: Box<RawValue>,
}

impl FixedText {
    pub fn new(text: String) -> Self {
        let json = written(&text);
        Self { text, json }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text as a JSON string, quotes and escapes included.
    pub fn json(&self) -> &RawValue {
        &self.json
    }
}

/// `value` as JSON, written once to be copied into requests.
pub fn written<T: Serialize + ?Sized>(value: &T) -> Box<RawValue> {
    // Only text and `serde_json::Value`s come here, which serialize without fail; `null` would
    // show a failure in the request rather than end the process.
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn written_json_is_what_serializing_writes() {
        let text = "say \"hi\"\n\tand \\ leave";
        let fixed = FixedText::new(text.to_owned());
        assert_eq!(fixed.text(), text);
        assert_eq!(fixed.json().get(), serde_json::to_string(text).unwrap());
        let value = json!({"b": [1, "two"], "a": {"c": null}});
        assert_eq!(written(&value).get(), serde_json::to_string(&value).unwrap());
    }
}
