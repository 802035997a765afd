//! The one redaction policy: a value whose key names a secret never leaves the server, on any
//! read path — a run, a page of its events, its live frames, a capability's registration, what
//! the command line and the console show. The log keeps every value (a run needs them); what is
//! read out of it is redacted.
//!
//! A key names a secret when its words (split at `_`, `-`, `.`, spaces and lower→upper case
//! changes) contain one of the marker words, or a run of words spells one: `apiKey`,
//! `X-Api-Key`, `client_secret`, `Auth-Token`, `sessionId` and `credentials` do (plurals count,
//! so `maxTokens` does too: hiding a harmless value is the safer mistake); `author` and `tokenizer`
//! do not.

use std::borrow::Cow;

use aho_corasick::AhoCorasick;
use serde_json::Value;

/// What a redacted value is replaced by.
pub const REDACTED: &str = "[redacted]";

/// The marker words flexrun always redacts (a word may also be their plural).
pub const DEFAULT_MARKERS: [&str; 16] = [
    "token",
    "secret",
    "apikey",
    "authorization",
    "auth",
    "password",
    "passwd",
    "pwd",
    "bearer",
    "credential",
    "privatekey",
    "cookie",
    "session",
    "signature",
    "accesskey",
    "passphrase",
];

/// The markers in force: the defaults and those an operator added (`redaction.extra_keys`).
#[derive(Debug, Clone)]
pub struct Redaction {
    markers: Vec<String>,
    /// Finds, in one pass over a text, whether any marker could be spelled in it at all (each
    /// marker, and the compound ones also with `_` and `-` between their words), so a text that
    /// cannot hold a secret key is passed on untouched without looking at its keys.
    /// (`None` if the automaton could not be built: then every text is looked at.)
    candidates: Option<AhoCorasick>,
}

/// The default markers made of two words, as keys may spell them.
const COMPOUNDS: [(&str, &str); 3] = [("api", "key"), ("private", "key"), ("access", "key")];

impl Default for Redaction {
    fn default() -> Self {
        Self::new(&[])
    }
}

impl Redaction {
    /// The defaults plus `extra` marker words (compared without case, `_` and `-`).
    pub fn new(extra: &[String]) -> Self {
        let normalise =
            |m: &str| m.chars().filter(char::is_ascii_alphanumeric).collect::<String>().to_ascii_lowercase();
        let mut markers: Vec<String> = DEFAULT_MARKERS.iter().map(|m| normalise(m)).collect();
        markers.extend(extra.iter().map(|m| normalise(m)).filter(|m| !m.is_empty()));
        markers.sort();
        markers.dedup();
        let mut patterns: Vec<String> = markers.clone();
        patterns.extend(COMPOUNDS.iter().flat_map(|(a, b)| [format!("{a}_{b}"), format!("{a}-{b}")]));
        patterns.extend(extra.iter().map(|m| m.to_ascii_lowercase()));
        // Building fails only for absurdly large pattern sets.
        let candidates = AhoCorasick::builder().ascii_case_insensitive(true).build(&patterns).ok();
        Self { markers, candidates }
    }

    /// Whether a value under `key` is a secret.
    pub fn is_secret(&self, key: &str) -> bool {
        let words = words(key);
        (0..words.len()).any(|start| {
            let mut spelled = String::new();
            words[start..].iter().any(|word| {
                spelled.push_str(word);
                self.markers.iter().any(|m| spelled == *m || spelled.strip_suffix('s') == Some(m.as_str()))
            })
        })
    }

    /// `value` with every secret replaced by [`REDACTED`].
    pub fn value(&self, value: Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(key, value)| {
                        let value =
                            if self.is_secret(&key) { Value::String(REDACTED.into()) } else { self.value(value) };
                        (key, value)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.value(v)).collect()),
            other => other,
        }
    }

    /// A JSON text (a frame) with every secret replaced: the same text when it has no secret
    /// key — found in one pass without parsing, so the common frame costs no copy.
    pub fn text<'a>(&self, json: &'a str) -> Cow<'a, str> {
        let candidate = self.candidates.as_ref().is_none_or(|c| c.is_match(json));
        if !candidate || !keys(json).any(|key| self.is_secret(&key)) {
            return Cow::Borrowed(json);
        }
        match serde_json::from_str::<Value>(json) {
            Ok(value) => Cow::Owned(self.value(value).to_string()),
            // Not JSON: nothing flexrun wrote; show nothing of it.
            Err(_) => Cow::Owned(format!("\"{REDACTED}\"")),
        }
    }
}

/// A URL as callers are shown it: no credentials (`user:pass@`), no query string or fragment
/// (where tokens travel).
pub fn url(raw: &str) -> String {
    let without_query = raw.split(['?', '#']).next().unwrap_or_default();
    match without_query.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
            let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
            if path.is_empty() && !rest.contains('/') {
                format!("{scheme}://{host}")
            } else {
                format!("{scheme}://{host}/{path}")
            }
        }
        None => without_query.to_string(),
    }
}

/// The words of a key, lowercased: split at non-alphanumerics and where a lowercase letter or
/// digit is followed by an uppercase one.
fn words(key: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in key.chars() {
        if !c.is_ascii_alphanumeric() {
            words.extend((!word.is_empty()).then(|| std::mem::take(&mut word)));
            previous_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && previous_lower {
            words.push(std::mem::take(&mut word));
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        word.push(c.to_ascii_lowercase());
    }
    words.extend((!word.is_empty()).then_some(word));
    words
}

/// The object keys of a JSON text, in one pass over its bytes (strings followed by `:`).
fn keys(json: &str) -> impl Iterator<Item = String> + '_ {
    let bytes = json.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() {
            if bytes[at] != b'"' {
                at += 1;
                continue;
            }
            let start = at + 1;
            let mut end = start;
            while end < bytes.len() && bytes[end] != b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            at = end + 1;
            let mut next = at;
            while next < bytes.len() && bytes[next].is_ascii_whitespace() {
                next += 1;
            }
            if bytes.get(next) == Some(&b':') {
                return Some(json.get(start..end.min(bytes.len())).unwrap_or_default().to_string());
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secret_keys_are_found_by_their_words() {
        let r = Redaction::default();
        for secret in [
            "apiKey",
            "X-Api-Key",
            "api_key",
            "client_secret",
            "Auth-Token",
            "accessToken",
            "sessionId",
            "privateKey",
            "passwd",
            "pwd",
            "Set-Cookie",
            "authorization",
            "credentials",
            "AWS_SECRET_ACCESS_KEY",
        ] {
            assert!(r.is_secret(secret), "{secret}");
        }
        for plain in ["author", "tokenizer", "topic", "keyPoints", "monkey", "authors_note"] {
            assert!(!r.is_secret(plain), "{plain}");
        }
        assert!(!r.is_secret("tenant"));
        assert!(Redaction::new(&["tenant".into()]).is_secret("tenantId"), "operators add markers");
    }

    #[test]
    fn values_and_texts_lose_their_secrets_only() {
        let r = Redaction::default();
        let value = json!({"inputs": {"apiKey": "sk-1", "list": [{"Auth-Token": "t"}], "topic": "x"}});
        let redacted = json!({"inputs": {"apiKey": REDACTED, "list": [{"Auth-Token": REDACTED}], "topic": "x"}});
        assert_eq!(r.value(value.clone()), redacted);
        let clean = r#"{"type":"log","payload":{"message":"token: not a key"}}"#;
        assert!(matches!(r.text(clean), Cow::Borrowed(_)), "no secret key: the same text");
        let text = value.to_string();
        let out = r.text(&text);
        assert!(!out.contains("sk-1") && out.contains(REDACTED), "{out}");
        assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), redacted);
        let compounds = r#"{"X-Api-Key":"k1","private_key":"k2","AccessKey":"k3","Tenant-ID":"k4"}"#;
        let out = Redaction::new(&["tenant".into()]).text(compounds).into_owned();
        assert!(["k1", "k2", "k3", "k4"].iter().all(|k| !out.contains(k)), "{out}");
        let escaped = r#"{"a\"b":1,"password":"p"}"#;
        assert!(!r.text(escaped).contains("\"p\""));
    }

    #[test]
    fn urls_lose_credentials_and_query_strings() {
        assert_eq!(url("https://user:pw@tools.example/run?token=abc#x"), "https://tools.example/run");
        assert_eq!(url("http://127.0.0.1:9000/capability"), "http://127.0.0.1:9000/capability");
        assert_eq!(url("http://host"), "http://host");
        assert_eq!(url("http://host?key=1"), "http://host");
    }
}
