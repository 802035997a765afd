//! Timestamps as the writes on a run's path bind them.
//!
//! Diesel writes a `NaiveDateTime` for SQLite as the text `%F %T%.f`, formatting it through a
//! format string it parses again for every value: about 2,800 instructions a timestamp, and a run
//! of the repair benchmark binds some 38 (every frame, every node start and end, every run-row
//! change). [`Stamp`] writes the same text directly.

use chrono::{Datelike, NaiveDateTime, Timelike};
use diesel::expression::AsExpression;
use diesel::serialize::{self, IsNull, Output, ToSql};
use diesel::sql_types::Timestamp;
use diesel::sqlite::Sqlite;

/// A timestamp to bind in a write: the text SQLite keeps is the same as for a `NaiveDateTime`.
#[derive(Debug, Clone, Copy, PartialEq, AsExpression)]
#[diesel(sql_type = Timestamp)]
pub struct Stamp(pub NaiveDateTime);

impl Stamp {
    /// The current time as stored (UTC, no zone).
    pub fn now() -> Self {
        Self(super::now())
    }
}

impl ToSql<Timestamp, Sqlite> for Stamp {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
        out.set_value(text(self.0));
        Ok(IsNull::No)
    }
}

#[cfg(feature = "postgres")]
impl ToSql<Timestamp, diesel::pg::Pg> for Stamp {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, diesel::pg::Pg>) -> serialize::Result {
        ToSql::<Timestamp, diesel::pg::Pg>::to_sql(&self.0, out)
    }
}

/// Diesel's format for SQLite timestamps, which the stored rows have always had.
const FORMAT: &str = "%F %T%.f";

/// `at` as `%F %T%.f` (`2026-11-25 03:28:53.123`: the fraction as 3, 6 or 9 digits, whichever
/// shows it whole, and none when it is zero). Years outside 0–9999 and leap seconds, which
/// chrono writes its own way, are left to chrono.
fn text(at: NaiveDateTime) -> String {
    let (date, time) = (at.date(), at.time());
    let nanos = time.nanosecond();
    let Some(year) = u32::try_from(date.year()).ok().filter(|year| *year <= 9999 && nanos < 1_000_000_000) else {
        return at.format(FORMAT).to_string();
    };
    let mut text = Text { bytes: [0; 29], len: 0 };
    let fields = [(year, 4), (date.month(), 2), (date.day(), 2), (time.hour(), 2), (time.minute(), 2)];
    for ((value, width), then) in fields.into_iter().zip(*b"-- ::") {
        text.digits(value, width);
        text.push(then);
    }
    text.digits(time.second(), 2);
    if nanos != 0 {
        text.push(b'.');
        match (nanos % 1_000_000, nanos % 1_000) {
            (0, _) => text.digits(nanos / 1_000_000, 3),
            (_, 0) => text.digits(nanos / 1_000, 6),
            _ => text.digits(nanos, 9),
        }
    }
    String::from_utf8(text.bytes.get(..text.len).unwrap_or_default().to_vec())
        .unwrap_or_else(|_| at.format(FORMAT).to_string())
}

/// The longest text [`text`] writes, built in place.
struct Text {
    bytes: [u8; 29],
    len: usize,
}

impl Text {
    fn push(&mut self, byte: u8) {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = byte;
            self.len += 1;
        }
    }

    /// The last `width` decimal digits of `value`, zero-padded.
    fn digits(&mut self, value: u32, width: usize) {
        let end = (self.len + width).min(self.bytes.len());
        let mut rest = value;
        for slot in self.bytes.get_mut(self.len..end).unwrap_or_default().iter_mut().rev() {
            *slot = b'0' + u8::try_from(rest % 10).unwrap_or_default();
            rest /= 10;
        }
        self.len = end;
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, NaiveDate};
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn written_as_diesel_writes_it() {
        let day = NaiveDate::from_ymd_opt(2026, 11, 5).unwrap();
        for (nanos, expected) in [
            (0, "2026-11-05 03:04:09"),
            (120_000_000, "2026-11-05 03:04:09.120"),
            (120_500_000, "2026-11-05 03:04:09.120500"),
            (120_500_007, "2026-11-05 03:04:09.120500007"),
        ] {
            let at = day.and_hms_nano_opt(3, 4, 9, nanos).unwrap();
            assert_eq!(text(at), expected);
            assert_eq!(text(at), at.format(FORMAT).to_string());
        }
    }

    proptest! {
        #[test]
        fn any_time_reads_as_chrono_writes_it(
            secs in -70_000_000_000i64..300_000_000_000,
            nanos in prop_oneof![
                Just(0u32),
                (0u32..1000).prop_map(|ms| ms * 1_000_000),
                (0u32..1_000_000).prop_map(|us| us * 1_000),
                0u32..2_000_000_000,
            ],
        ) {
            if let Some(at) = DateTime::from_timestamp(secs, nanos).map(|at| at.naive_utc()) {
                prop_assert_eq!(text(at), at.format(FORMAT).to_string());
            }
        }
    }
}
