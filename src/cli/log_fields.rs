//! The fields of a text log line, with every control character escaped.
//!
//! A log line quotes text that came from outside: a capability's or a model's error message, a
//! request's target. Written as it is, a line feed in it starts a line that a reader of the log
//! takes for flexrun's own (a forged `INFO … run completed`), and an escape sequence acts on the
//! terminal that shows the log. Every field of every event and span of the text log is written
//! through [`EscapedFields`], so no call site has to remember it: control characters are shown
//! as the command line shows them ([`super::terminal::safe`]: `\x0a`, `\x1b`, `\u{9b}`; tabs
//! stay). The JSON log (`--log-json`) needs none of this: JSON strings escape them already.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

use super::terminal::safe;

/// The text log's fields: the message, then `name=value` pairs, as `tracing-subscriber` writes
/// them by default, each escaped.
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Fields { out: Escaping(writer), result: Ok(()), first: true };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Fields<'writer> {
    out: Escaping<Writer<'writer>>,
    result: fmt::Result,
    first: bool,
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // As the default writes them: the message as it is, another string quoted.
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        // A `log` record's metadata, which the line's prefix already shows.
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        let separator = if std::mem::take(&mut self.first) { "" } else { " " };
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.result = if name == "message" {
            write!(self.out, "{separator}{value:?}")
        } else {
            write!(self.out, "{separator}{name}={value:?}")
        };
    }
}

/// Writes what it is given with its control characters escaped.
struct Escaping<W>(W);

impl<W: Write> Write for Escaping<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.0.write_str(&safe(text))
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Collects what the subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn outside_text_stays_on_its_line_and_cannot_drive_the_terminal() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .fmt_fields(EscapedFields)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let target = "/x\r\n2030-01-01T00:00:00Z  INFO forged";
            let span = tracing::info_span!("HTTP request", http.target = %target, status = tracing::field::Empty);
            let _entered = span.enter();
            span.record("status", "4\n04");
            let message = "capability said:\nINFO flexrun: run completed\u{1b}[2J\u{9b}31m\tend";
            tracing::info!(error = %message, quoted = message, r#type = 1, "run ended\nINFO forged too");
        });
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(log.ends_with('\n'));
        for shown in [
            "http.target=/x\\x0d\\x0a2030-01-01T00:00:00Z  INFO forged",
            "status=\"4\\n04\"",
            "run ended\\x0aINFO forged too",
            "error=capability said:\\x0aINFO flexrun: run completed\\x1b[2J\\u{9b}31m\tend",
            "quoted=\"capability said:\\nINFO flexrun: run completed\\u{1b}[2J\\u{9b}31m\\tend\"",
            "type=1",
        ] {
            assert!(log.contains(shown), "{shown} in {log}");
        }
    }
}
