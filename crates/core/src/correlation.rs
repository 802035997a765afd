//! A run's correlation id as a caller gives it — the `X-Correlation-Id` header, or the envelope's
//! `metadata.correlationId` when no header is sent — and the one rule both are held to.
//!
//! Visible ASCII, because the id goes where only that is safe: it is written into every frame and
//! log line of its run (a newline or another control character could forge a line in a log read
//! line by line), and callers carry it from one request to the next in the header, which carries
//! nothing else reliably. The two ways of giving it take the same values, so an id one accepts is
//! never refused by the other.

/// The longest correlation id, in characters (ASCII: bytes too).
pub const MAX_LEN: usize = 200;

/// What a correlation id may be, for messages and documentation.
pub const RULE: &str = "1 to 200 visible ASCII characters (no spaces)";

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a correlation id must be {RULE}")]
pub struct InvalidCorrelationId;

/// `id`, if it keeps the rule.
pub fn check(id: &str) -> Result<&str, InvalidCorrelationId> {
    if !id.is_empty() && id.len() <= MAX_LEN && id.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(id)
    } else {
        Err(InvalidCorrelationId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_ascii_from_1_to_200_characters() {
        for id in ["c-1", "order:42/retry#3", "~!\"'<>", &"x".repeat(MAX_LEN)] {
            assert_eq!(check(id), Ok(id));
        }
        for id in ["", "order 42", "tab\there", "line\nbreak", "café", "\u{7f}", &"x".repeat(MAX_LEN + 1)] {
            assert_eq!(check(id), Err(InvalidCorrelationId), "{id:?}");
        }
    }
}
