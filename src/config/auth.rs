//! Who may call: API keys with their holders' names and roles, and the console's sessions.

use std::fmt;

use serde::Deserialize;

use super::ConfigError;
use flexrun_core::settings::integer;

/// A secret string (API keys): deserialises like a string, never prints its value.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    /// The value, for the one place that must send it (an Authorization header).
    pub fn expose(&self) -> &str {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"[redacted]\"" })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    pub api_keys: Vec<Secret>,
    pub operator_keys: Vec<Secret>,
    pub allow_anonymous: bool,
}

impl AuthSettings {
    /// Whether any key is configured; without keys every request is an anonymous operator.
    pub fn enabled(&self) -> bool {
        self.api_keys.iter().chain(&self.operator_keys).any(|k| !k.is_empty())
    }

    /// The configured keys with their holders' names: callers' first, then operators'.
    pub fn named_keys(&self) -> (Vec<NamedKey>, Vec<NamedKey>) {
        let named = |keys: &[Secret]| keys.iter().filter(|k| !k.is_empty()).map(NamedKey::parse).collect();
        (named(&self.api_keys), named(&self.operator_keys))
    }
}

impl AuthSettings {
    /// Key lists flexrun would read otherwise than meant: a key with white space in it (a list
    /// written `"al ice:k1"`), a name with no key, a name flexrun does not take (`a@b:k1`, which
    /// would be read as a nameless key), the same key twice, or one key or name with
    /// both roles (it would silently be an operator). Messages name entries by position, never
    /// by value.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        let invalid = |key, problem: String| Err(ConfigError::Invalid { key, problem });
        let lists = [("auth.api_keys", &self.api_keys), ("auth.operator_keys", &self.operator_keys)];
        for (key, list) in lists {
            for (index, entry) in list.iter().enumerate().filter(|(_, entry)| !entry.is_empty()) {
                let text = entry.expose();
                let position = index + 1;
                if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return invalid(key, format!("entry {position} contains white space or a control character"));
                }
                if text.ends_with(':') {
                    return invalid(key, format!("entry {position} has a name but no key (`name:key`)"));
                }
                // `alice@corp.com:k1` would be one nameless key, `alice@corp.com:k1` itself.
                if text.split_once(':').is_some_and(|(name, _)| !NamedKey::is_name(name)) {
                    return invalid(
                        key,
                        format!(
                            "entry {position} names its key with other than letters, digits, `.`, `_`, `-` (at most {} \
                             characters); a key with `:` in it is written `name:key`",
                            NamedKey::MAX_NAME
                        ),
                    );
                }
            }
        }
        let (callers, operators) = self.named_keys();
        let all: Vec<(&str, &NamedKey)> = callers
            .iter()
            .map(|k| ("auth.api_keys", k))
            .chain(operators.iter().map(|k| ("auth.operator_keys", k)))
            .collect();
        for (index, (list, key)) in all.iter().enumerate() {
            for (other_list, other) in &all[index + 1..] {
                if key.key == other.key {
                    let problem = if list == other_list {
                        "lists one key twice".to_string()
                    } else {
                        "and `auth.api_keys` list the same key: a key has one role".to_string()
                    };
                    return invalid(other_list, problem);
                }
                if key.name == other.name && list != other_list {
                    let problem = format!("and `auth.api_keys` both name `{}`: a name has one role", key.name);
                    return invalid("auth.operator_keys", problem);
                }
            }
        }
        Ok(())
    }
}

/// Browser sessions of the console (`http::session`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSettings {
    #[serde(deserialize_with = "integer")]
    pub max_per_principal: usize,
    #[serde(deserialize_with = "integer")]
    pub sign_in_attempts_per_minute: u32,
}

/// An API key and the name of whoever holds it: `name:key` in the configuration. A key given
/// without a name is named after its hash (`key-<8 hex digits>`), so logs never show a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedKey {
    pub name: String,
    pub key: Secret,
}

impl NamedKey {
    /// The longest name.
    pub const MAX_NAME: usize = 64;

    fn parse(entry: &Secret) -> Self {
        let text = entry.expose();
        match text.split_once(':') {
            Some((name, key)) if Self::is_name(name) && !key.is_empty() => {
                Self { name: name.to_string(), key: Secret::new(key) }
            }
            _ => {
                use sha2::Digest;
                let hash = format!("{:x}", sha2::Sha256::digest(text.as_bytes()));
                Self { name: format!("key-{}", hash.get(..8).unwrap_or_default()), key: entry.clone() }
            }
        }
    }

    /// Letters, digits, `.`, `_`, `-`; starting with a letter or digit.
    fn is_name(name: &str) -> bool {
        name.len() <= Self::MAX_NAME
            && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    }
}
