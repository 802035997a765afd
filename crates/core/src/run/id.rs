//! [`RunId`]: which run. flexrun makes them (UUIDv7, so they sort by creation time); one that
//! arrives from a client (a path, a body) is checked before it is used.

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A run's id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct RunId(String);

/// Text that is not a run id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a run id: a run id is 1 to {max} letters, digits, `-` or `_`", max = RunId::MAX_LEN)]
pub struct InvalidRunId;

impl RunId {
    /// Longer than any id flexrun makes (36), short enough to bound what an error repeats.
    pub const MAX_LEN: usize = 64;

    /// A new run's id.
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    /// A run id a client sent.
    pub fn parse(text: &str) -> Result<Self, InvalidRunId> {
        let valid = (1..=Self::MAX_LEN).contains(&text.len())
            && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if valid { Ok(Self(text.to_string())) } else { Err(InvalidRunId) }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for RunId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Borrow<str> for RunId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for RunId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_sent_ids_are_checked() {
        let made = RunId::generate();
        assert_eq!(RunId::parse(made.as_str()), Ok(made));
        assert!(RunId::parse("").is_err());
        assert!(RunId::parse(&"a".repeat(65)).is_err());
        assert!(RunId::parse("../etc").is_err());
        assert!(serde_json::from_str::<RunId>("\"a b\"").is_err());
    }
}
