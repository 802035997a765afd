//! [`Seq`]: a frame's place in its run's log — from 1, without gaps.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A frame's sequence number in its run's log (the SSE `id`). At most `i64::MAX`, so the
/// database (a signed 64-bit column) holds every one; a number above that is refused where it
/// enters (`Last-Event-ID`, `?after=`) rather than wrapping into a negative one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Seq(u64);

/// A sequence number no log can reach.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not a frame sequence number (0 to {max})", max = Seq::MAX.0)]
pub struct SeqOutOfRange(pub String);

impl Seq {
    /// Before the first frame.
    pub const ZERO: Seq = Seq(0);
    pub const MAX: Seq = Seq(i64::MAX.unsigned_abs());

    pub fn new(n: u64) -> Result<Self, SeqOutOfRange> {
        if n <= Self::MAX.0 { Ok(Self(n)) } else { Err(SeqOutOfRange(n.to_string())) }
    }

    /// Reads a sequence number sent as text (`Last-Event-ID`).
    pub fn parse(text: &str) -> Result<Self, SeqOutOfRange> {
        text.trim().parse::<u64>().map_err(|_| SeqOutOfRange(excerpt(text))).and_then(Self::new)
    }

    /// A sequence number the database handed back.
    pub fn from_stored(n: i64) -> Result<Self, SeqOutOfRange> {
        u64::try_from(n).map(Self).map_err(|_| SeqOutOfRange(n.to_string()))
    }

    pub fn get(self) -> u64 {
        self.0
    }

    /// As the database stores it.
    pub fn stored(self) -> i64 {
        // Never above `i64::MAX` (see `new`).
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }

    /// The sequence number after this one.
    pub fn next(self) -> Self {
        Self(self.0.saturating_add(1).min(Self::MAX.0))
    }

    /// `n` frames later.
    pub fn plus(self, n: usize) -> Self {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        Self(self.0.saturating_add(n).min(Self::MAX.0))
    }

    /// How many frames are at or before this one (a log's length up to it).
    pub fn count(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl<'de> Deserialize<'de> for Seq {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Self::new(u64::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The start of a client-sent text, for an error that does not grow with it.
fn excerpt(text: &str) -> String {
    let mut excerpt: String = text.chars().take(24).collect();
    if excerpt.len() < text.len() {
        excerpt.push('…');
    }
    excerpt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_stay_within_what_the_database_holds() {
        assert_eq!(Seq::parse(" 42 ").map(Seq::get), Ok(42));
        assert_eq!(Seq::parse("9223372036854775807").map(Seq::stored), Ok(i64::MAX));
        assert!(Seq::parse("9223372036854775808").is_err(), "2^63 would wrap to a negative number");
        assert!(Seq::parse("-1").is_err());
        assert!(Seq::parse(&"9".repeat(1000)).unwrap_err().0.chars().count() <= 25, "the error stays short");
        assert!(Seq::from_stored(-1).is_err());
        assert_eq!(Seq::MAX.next(), Seq::MAX);
        assert!(serde_json::from_str::<Seq>("18446744073709551615").is_err());
        assert_eq!(serde_json::to_string(&Seq::new(7).unwrap()).unwrap(), "7");
    }
}
