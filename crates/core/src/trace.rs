//! A run's place in a distributed trace (W3C Trace Context): the ids its `start` frame records,
//! so that whatever process carries the run on — after a restart, on another node, a day later —
//! puts its spans in the same trace, under the same root.
//!
//! Pure: parsing and formatting `traceparent`, and the ids as the frames carry them (lowercase
//! hex). Making spans and sending them is the server's (`flexrun::traces`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A trace's id: 16 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId([u8; 16]);

/// A span's id: 8 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId([u8; 8]);

impl TraceId {
    /// `None` for the all-zero id, which W3C Trace Context reserves for "no trace".
    pub fn from_bytes(bytes: [u8; 16]) -> Option<Self> {
        (bytes != [0; 16]).then_some(Self(bytes))
    }

    pub fn to_bytes(self) -> [u8; 16] {
        self.0
    }

    /// The id from 32 lowercase hex digits.
    pub fn parse(hex: &str) -> Option<Self> {
        Self::from_bytes(decode_hex(hex)?)
    }
}

impl SpanId {
    /// `None` for the all-zero id.
    pub fn from_bytes(bytes: [u8; 8]) -> Option<Self> {
        (bytes != [0; 8]).then_some(Self(bytes))
    }

    pub fn to_bytes(self) -> [u8; 8] {
        self.0
    }

    /// The id from 16 lowercase hex digits.
    pub fn parse(hex: &str) -> Option<Self> {
        Self::from_bytes(decode_hex(hex)?)
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

/// A caller's span, from its `traceparent` header: a run started under it is its child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// The caller's sampling decision (flag `01`), which a parent-based sampler follows.
    pub sampled: bool,
}

impl TraceParent {
    /// Parses a `traceparent` header (`00-<trace id>-<span id>-<flags>`). A header that is not
    /// one is ignored, as W3C Trace Context asks: `None`, and the run starts a trace of its own.
    /// A later version's header is read by its first four fields, as the standard allows.
    pub fn parse(header: &str) -> Option<Self> {
        let header = header.trim();
        let mut fields = header.split('-');
        let version = fields.next()?;
        let (trace_id, span_id, flags) = (fields.next()?, fields.next()?, fields.next()?);
        let extra = fields.next();
        let version: [u8; 1] = decode_hex(version)?;
        // Version ff is invalid; version 00 has exactly four fields.
        if version[0] == 0xff || (version[0] == 0 && extra.is_some()) {
            return None;
        }
        let flags: [u8; 1] = decode_hex(flags)?;
        Some(Self { trace_id: TraceId::parse(trace_id)?, span_id: SpanId::parse(span_id)?, sampled: flags[0] & 1 == 1 })
    }

    /// The `traceparent` header that makes a request a child of this span (version 00).
    pub fn header(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.span_id, u8::from(self.sampled))
    }
}

/// Where a run's spans go: its trace, its root span (`invoke_workflow`) and that root's parent, a
/// caller's span. Recorded in the run's `start` frame (`trace`) when the run is traced; a run
/// without it (tracing off, or not sampled, when it started) is never traced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunTrace {
    pub trace_id: TraceId,
    /// The root span's id: every span of the run is below it.
    pub span_id: SpanId,
    /// The caller's span the run was started under (`traceparent`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<SpanId>,
}

impl RunTrace {
    /// The root span as a parent, for the run's spans directly below it.
    pub fn root(&self) -> TraceParent {
        TraceParent { trace_id: self.trace_id, span_id: self.span_id, sampled: true }
    }
}

impl Serialize for TraceId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl Serialize for SpanId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TraceId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).ok_or_else(|| serde::de::Error::custom("a trace id is 32 lowercase hex digits, not all 0"))
    }
}

impl<'de> Deserialize<'de> for SpanId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).ok_or_else(|| serde::de::Error::custom("a span id is 16 lowercase hex digits, not all 0"))
    }
}

/// `N` bytes from exactly `2N` lowercase hex digits (W3C Trace Context allows no uppercase).
fn decode_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let mut bytes = [0u8; N];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(bytes)
}

fn nibble(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    bytes.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const HEADER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_reads_and_writes_back_the_same() {
        let parent = TraceParent::parse(HEADER).unwrap();
        assert_eq!(parent.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent.span_id.to_string(), "00f067aa0ba902b7");
        assert!(parent.sampled);
        assert_eq!(parent.header(), HEADER);
        let unsampled = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.sampled);
    }

    #[test]
    fn a_header_that_is_not_a_traceparent_is_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_by_its_first_fields() {
        let parent = TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes").unwrap();
        assert_eq!(parent.span_id.to_string(), "00f067aa0ba902b7");
    }

    #[test]
    fn a_run_trace_is_recorded_as_hex() {
        let parent = TraceParent::parse(HEADER).unwrap();
        let trace = RunTrace {
            trace_id: parent.trace_id,
            span_id: SpanId::parse("b7ad6b7169203331").unwrap(),
            parent_span_id: Some(parent.span_id),
        };
        let json = serde_json::to_value(trace).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
                "spanId": "b7ad6b7169203331",
                "parentSpanId": "00f067aa0ba902b7"
            })
        );
        assert_eq!(serde_json::from_value::<RunTrace>(json).unwrap(), trace);
        assert!(
            serde_json::from_value::<RunTrace>(serde_json::json!({"traceId": "zz", "spanId": "b7ad6b7169203331"}))
                .is_err()
        );
    }
}
