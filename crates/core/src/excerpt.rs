//! Bounded text: what an error response or a log line shows of something a client, a model or a
//! capability sent never grows with it. Long text is cut at a character boundary and says how
//! much was left out.

use std::borrow::Cow;
use std::fmt::{self, Display, Write as _};

/// Characters of one message in an error response.
pub const MESSAGE: usize = 300;

/// Characters of one value in a log line.
pub const LOG: usize = 1_000;

/// Characters of an error message in a frame (`node_error`, `complete.error`, a schema
/// violation): enough for a capability's or model's explanation, never its whole answer.
pub const FRAME: usize = 1_000;

/// `text`, cut to at most `max` characters (and a note of how many more there were).
pub fn excerpt(text: &str, max: usize) -> Cow<'_, str> {
    // No more bytes than `max`: no more characters either, and nothing to count.
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some((cut, _)) => {
            let more = text[cut..].chars().count();
            Cow::Owned(format!("{}… ({more} more characters)", &text[..cut]))
        }
    }
}

/// The longest [`identifier`], in bytes.
pub const IDENTIFIER: usize = 200;

/// `text` if it is a name another system chose that is fit to keep as it is — 1 to
/// [`IDENTIFIER`] bytes, no control character — else nothing: a model's name, a response's id or
/// finish reason. Such a value is copied as a whole (into frames, lists, trace attributes), so one
/// of megabytes, or one that breaks a log line, is not taken rather than cut.
pub fn identifier(text: &str) -> Option<&str> {
    Some(text).filter(|text| !text.is_empty() && text.len() <= IDENTIFIER && !text.chars().any(char::is_control))
}

/// Shows `value` as [`excerpt`] would, without formatting more of it than it shows.
pub struct Excerpt<T>(pub T, pub usize);

/// `value` for a log line: at most [`LOG`] characters.
pub fn log<T: Display>(value: T) -> Excerpt<T> {
    Excerpt(value, LOG)
}

impl<T: Display> Display for Excerpt<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bounded = Bounded { kept: String::new(), max: self.1, seen: 0 };
        // `Bounded` never fails; it only stops keeping what it is given.
        let _ = write!(bounded, "{}", self.0);
        f.write_str(&bounded.kept)?;
        match bounded.seen.checked_sub(self.1) {
            Some(more) if more > 0 => write!(f, "… ({more} more characters)"),
            _ => Ok(()),
        }
    }
}

/// Keeps the first `max` characters written to it and counts the rest.
struct Bounded {
    kept: String,
    max: usize,
    seen: usize,
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // The common case, a piece that fits whole: kept in one copy, not a character at a time.
        if self.seen.saturating_add(s.len()) <= self.max {
            self.kept.push_str(s);
            self.seen += s.chars().count();
            return Ok(());
        }
        for c in s.chars() {
            if self.seen < self.max {
                self.kept.push(c);
            }
            self.seen += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identifier_is_short_and_one_line_or_not_kept() {
        for kept in ["chatcmpl-123", "stop", &"x".repeat(IDENTIFIER)] {
            assert_eq!(identifier(kept), Some(kept));
        }
        for dropped in ["", &"x".repeat(IDENTIFIER + 1), "stop\nforged line", "a\u{1b}[2Jb", &"x".repeat(3_000_000)] {
            assert_eq!(identifier(dropped), None, "{} bytes", dropped.len());
        }
    }

    #[test]
    fn long_text_is_cut_and_says_how_much_is_missing() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("ééééé", 2), "éé… (3 more characters)");
        let huge = "x".repeat(1_000_000);
        assert!(excerpt(&huge, MESSAGE).len() < MESSAGE + 40);
        assert_eq!(format!("{}", Excerpt("abcdef", 3)), "abc… (3 more characters)");
        assert_eq!(format!("{}", Excerpt(format_args!("{}{}", "ab", "éé"), 3)), "abé… (1 more characters)");
        assert_eq!(format!("{}", Excerpt(format_args!("{}{}", "ab", "cd"), 4)), "abcd");
        assert_eq!(format!("{}", log(&huge)).chars().count(), LOG + "… (999000 more characters)".chars().count());
        assert_eq!(format!("{}", Excerpt("abc", 3)), "abc");
    }
}
