//! Which environment variables an MCP server registration may name as its `bearerTokenEnv`
//! (`mcp.token_variables` in the configuration).
//!
//! The token is read from the server's own environment and sent to the registered URL, so a
//! registration naming any variable could send any of them — `FLEXRUN_API_KEYS`, the model's key,
//! a cloud credential — to a URL its author chose. Registering takes only the operator role, not
//! the host: which variables hold tokens for MCP servers is the host's to say, here.

use std::fmt;

/// The variables a registration may name: each entry a variable's name, or a name with `*` as
/// its first or last character (`*_MCP_TOKEN` allows `CALC_MCP_TOKEN`; `MCP_*` allows
/// `MCP_SEARCH`). Empty allows none.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "Vec<String>")]
pub struct TokenVariables(Vec<Pattern>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Exactly(String),
    StartingWith(String),
    EndingWith(String),
}

/// A configured entry that is not a variable name with at most one `*` at one end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not an environment variable's name (letters, digits and _, not starting with a digit), with at most \
     one * as its first or last character"
)]
pub struct InvalidTokenVariables(String);

impl TokenVariables {
    /// Reads the configured entries; a bad one is refused (so it stops the server at start-up
    /// instead of never matching).
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, InvalidTokenVariables> {
        entries.iter().map(|entry| Pattern::parse(entry.as_ref())).collect::<Result<_, _>>().map(Self)
    }

    /// Whether a registration may name `variable`.
    pub fn allows(&self, variable: &str) -> bool {
        self.0.iter().any(|pattern| pattern.matches(variable))
    }
}

impl TryFrom<Vec<String>> for TokenVariables {
    type Error = InvalidTokenVariables;

    fn try_from(entries: Vec<String>) -> Result<Self, Self::Error> {
        Self::parse(&entries)
    }
}

impl Pattern {
    fn parse(entry: &str) -> Result<Self, InvalidTokenVariables> {
        let invalid = || InvalidTokenVariables(crate::excerpt::excerpt(entry, 80).into_owned());
        let pattern = if let Some(rest) = entry.strip_prefix('*') {
            Self::EndingWith(rest.to_string())
        } else if let Some(rest) = entry.strip_suffix('*') {
            Self::StartingWith(rest.to_string())
        } else {
            Self::Exactly(entry.to_string())
        };
        let fixed = pattern.fixed();
        let name_chars = fixed.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric());
        // What a `*` does not precede starts a name, so it may not start with a digit.
        let digit_first = !matches!(pattern, Self::EndingWith(_)) && fixed.starts_with(|c: char| c.is_ascii_digit());
        if fixed.is_empty() || fixed.len() > 128 || !name_chars || digit_first {
            return Err(invalid());
        }
        Ok(pattern)
    }

    /// The entry without its `*`.
    fn fixed(&self) -> &str {
        match self {
            Self::Exactly(text) | Self::StartingWith(text) | Self::EndingWith(text) => text,
        }
    }

    fn matches(&self, variable: &str) -> bool {
        match self {
            Self::Exactly(name) => variable == name,
            Self::StartingWith(prefix) => variable.starts_with(prefix.as_str()),
            Self::EndingWith(suffix) => variable.ends_with(suffix.as_str()),
        }
    }
}

impl fmt::Display for TokenVariables {
    /// The entries as configured, for a refusal's message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        for (i, pattern) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match pattern {
                Pattern::Exactly(name) => f.write_str(name)?,
                Pattern::StartingWith(prefix) => write!(f, "{prefix}*")?,
                Pattern::EndingWith(suffix) => write!(f, "*{suffix}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_prefixes_and_suffixes_match_what_they_say() {
        let allowed = TokenVariables::parse(&["*_MCP_TOKEN", "SEARCH_*", "GITHUB_TOKEN"]).unwrap();
        for variable in ["CALC_MCP_TOKEN", "SEARCH_KEY", "GITHUB_TOKEN"] {
            assert!(allowed.allows(variable), "{variable}");
        }
        for variable in ["FLEXRUN_API_KEYS", "FLEXRUN_LLM_API_KEY", "MCP_TOKEN", "GITHUB_TOKEN_2", "PATH"] {
            assert!(!allowed.allows(variable), "{variable}");
        }
        assert_eq!(allowed.to_string(), "*_MCP_TOKEN, SEARCH_*, GITHUB_TOKEN");
        assert!(!TokenVariables::default().allows("CALC_MCP_TOKEN"), "none configured, none allowed");
    }

    #[test]
    fn entries_that_are_not_names_are_refused() {
        for entry in ["", "*", "**", "*A*", "A*B", "1TOKEN", "1_*", "A-B", "A B", "ÄPFEL", &"A".repeat(129)] {
            assert!(TokenVariables::parse(&[entry]).is_err(), "{entry:?}");
        }
        assert!(TokenVariables::parse(&["*1_TOKEN", "A1_*", "_X"]).is_ok());
    }
}
