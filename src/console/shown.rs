//! How a value from a run is put on a page: redacted (`crate::redact`), pretty-printed and
//! bounded, so one huge output cannot make a page of megabytes. The API serves the whole value.

use serde_json::Value;

use crate::redact::Redaction;

/// The most characters of one value a page shows.
pub const VALUE_CHARS: usize = 20_000;

/// `value`, redacted and pretty-printed, cut at [`VALUE_CHARS`] with a note saying so.
pub fn json(redaction: &Redaction, value: &Value) -> String {
    let redacted = redaction.value(value.clone());
    let text = serde_json::to_string_pretty(&redacted).unwrap_or_default();
    bounded(&text)
}

/// A JSON text (a frame), redacted and pretty-printed, bounded like [`json`].
pub fn json_text(redaction: &Redaction, text: &str) -> String {
    let redacted = redaction.text(text);
    match serde_json::from_str::<Value>(&redacted) {
        Ok(value) => bounded(&serde_json::to_string_pretty(&value).unwrap_or_default()),
        Err(_) => bounded(&redacted),
    }
}

fn bounded(text: &str) -> String {
    if text.chars().count() <= VALUE_CHARS {
        return text.to_string();
    }
    let cut: String = text.chars().take(VALUE_CHARS).collect();
    format!("{cut}\n… (cut at {VALUE_CHARS} characters; the API returns the whole value)")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_are_redacted_and_bounded() {
        let r = Redaction::default();
        let shown = json(&r, &json!({"apiKey": "sk-1", "text": "hi"}));
        assert!(shown.contains("[redacted]") && !shown.contains("sk-1") && shown.contains("\"hi\""), "{shown}");
        let big = json(&r, &json!({"text": "x".repeat(VALUE_CHARS * 2)}));
        assert!(big.chars().count() < VALUE_CHARS + 100 && big.ends_with("whole value)"));
        assert!(json_text(&r, r#"{"password":"p"}"#).contains("[redacted]"));
    }
}
