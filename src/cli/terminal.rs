//! What the command line writes: text that came from a server, made harmless for a terminal, and
//! the one writer of standard output.
//!
//! A run's objective, a node's output, an error message or a question reach the command line from
//! the server, which got them from callers and models. Printed as they are, control characters in
//! them are obeyed by the terminal: an escape sequence can clear the screen, rewrite lines above,
//! retitle the window or fake a whole run. So everything from a server is printed through
//! [`safe`] (one line), [`safe_block`] (several lines) or [`safe_json`] (JSON text), which show
//! control characters instead of sending them.
//!
//! Standard output is written by [`print_line`] only: when its reader has gone (`| head`), the
//! process ends quietly instead of panicking.

use std::borrow::Cow;
use std::io::{ErrorKind, Write};

/// The exit code when standard output was closed by its reader: a process that SIGPIPE ends
/// reports 128 + 13 to its shell, and this is what a pipeline expects to see.
pub const CLOSED_PIPE_EXIT: i32 = 141;

/// One line of text from a server, with every control character shown as an escape (`\x1b`,
/// `\x0a`, `\u{9b}`); tabs stay.
pub fn safe(text: &str) -> Cow<'_, str> {
    escape(text, Keep::Tabs)
}

/// Text of several lines from a server: as [`safe`], but newlines stay.
pub fn safe_block(text: &str) -> Cow<'_, str> {
    escape(text, Keep::TabsAndNewlines)
}

/// JSON text from a server, as one line denoting the same value: the control characters JSON
/// lets through raw (DEL and C1 in strings) become `\u00XX` escapes, and line breaks between
/// tokens become spaces. `json` must be valid JSON (inside its strings, raw C0 characters cannot
/// occur, and between tokens only whitespace).
pub fn safe_json(json: &str) -> Cow<'_, str> {
    if !json.chars().any(|c| is_control(c) && c != '\t') {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        match c {
            '\n' | '\r' => out.push(' '),
            c if c != '\t' && is_control(c) => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[derive(Clone, Copy, PartialEq)]
enum Keep {
    Tabs,
    TabsAndNewlines,
}

/// C0 controls, DEL and C1 controls: what terminals may act on instead of showing.
fn is_control(c: char) -> bool {
    matches!(u32::from(c), 0x00..=0x1f | 0x7f..=0x9f)
}

fn escape(text: &str, keep: Keep) -> Cow<'_, str> {
    let kept = |c: char| c == '\t' || (c == '\n' && keep == Keep::TabsAndNewlines);
    if !text.chars().any(|c| is_control(c) && !kept(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        let code = u32::from(c);
        match code {
            _ if kept(c) || !is_control(c) => out.push(c),
            0x00..=0x1f | 0x7f => out.push_str(&format!("\\x{code:02x}")),
            _ => out.push_str(&format!("\\u{{{code:x}}}")),
        }
    }
    Cow::Owned(out)
}

/// Writes `text` and a newline to standard output. When the reader has closed it (`flexrun runs
/// list | head`), the process ends at once with [`CLOSED_PIPE_EXIT`] and no message: there is
/// no one left to tell. Any other write error ends it with a message and exit code 2.
pub fn print_line(text: &str) {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(error) if error.kind() == ErrorKind::BrokenPipe => std::process::exit(CLOSED_PIPE_EXIT),
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "flexrun: cannot write to standard output: {error}");
            std::process::exit(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_shown_not_sent() {
        assert_eq!(safe("\u{1b}[2J\u{1b}[Hrun completed"), "\\x1b[2J\\x1b[Hrun completed");
        assert_eq!(safe("title\u{1b}]0;owned\u{7}"), "title\\x1b]0;owned\\x07");
        // C1 controls (CSI, OSC) and DEL act on terminals too.
        assert_eq!(safe("a\u{9b}31mred\u{9d}x\u{7f}"), "a\\u{9b}31mred\\u{9d}x\\x7f");
        // A carriage return would let the rest overwrite the start of the line.
        assert_eq!(safe("ok\rfail"), "ok\\x0dfail");
        assert_eq!(safe("\0"), "\\x00");
    }

    #[test]
    fn one_line_stays_one_line_and_blocks_keep_their_lines() {
        assert_eq!(safe("first\nsecond"), "first\\x0asecond");
        assert_eq!(safe_block("first\nsecond\u{1b}[1A"), "first\nsecond\\x1b[1A");
        assert_eq!(safe_block("a\r\nb"), "a\\x0d\nb");
    }

    #[test]
    fn ordinary_text_is_untouched_and_not_copied() {
        for text in ["plain", "tab\tseparated", "✓ plan v2: draft → polish", "Grüße, 日本語", ""] {
            assert!(matches!(safe(text), Cow::Borrowed(t) if t == text), "{text}");
            assert!(matches!(safe_block(text), Cow::Borrowed(t) if t == text), "{text}");
            assert!(matches!(safe_json(text), Cow::Borrowed(t) if t == text), "{text}");
        }
        // Backslashes are not control characters.
        assert_eq!(safe("C:\\x1b"), "C:\\x1b");
    }

    #[test]
    fn json_stays_the_same_value_on_one_line() {
        let value = serde_json::json!({"text": "a\u{1b}[2J\u{9b}b\u{7f}", "n": 1});
        // serde_json escapes C0 controls itself; DEL and C1 it writes raw.
        let raw = serde_json::to_string_pretty(&value).unwrap();
        assert!(raw.contains('\u{9b}') && raw.contains('\n'));
        let shown = safe_json(&raw);
        assert!(!shown.chars().any(|c| is_control(c) && c != '\t'), "{shown}");
        assert!(shown.contains("\\u009b") && shown.contains("\\u007f"), "{shown}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&shown).unwrap(), value);
    }
}
