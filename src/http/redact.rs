//! Hides values whose key looks like a secret before a stored document leaves the server.

use serde_json::Value;

const SECRET_MARKERS: [&str; 8] =
    ["token", "secret", "apikey", "api_key", "authorization", "password", "bearer", "credential"];

pub const REDACTED: &str = "[redacted]";

fn looks_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace('-', "_");
    SECRET_MARKERS.iter().any(|marker| key.contains(marker))
}

pub fn redact(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| {
                    let value = if looks_secret(&key) { Value::String(REDACTED.into()) } else { redact(value) };
                    (key, value)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(redact).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redacts_nested_secret_keys() {
        let out = redact(json!({"inputs": {"apiKey": "sk-1", "list": [{"Auth-Token": "t"}], "topic": "x"}}));
        assert_eq!(out, json!({"inputs": {"apiKey": REDACTED, "list": [{"Auth-Token": REDACTED}], "topic": "x"}}));
    }
}
