//! Frames: the wire form of every event of a run (`docs/api.md`, "Frames"). A frame is encoded to
//! JSON once; the same text is stored in the event log, broadcast, and sent as the SSE `data:` line.

use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Seq;
use super::payload::*;
use crate::redact::Redaction;
use crate::usage::Usage;

/// Declares the frame types once: from this one list come [`FrameKind`] (its names, `ALL`),
/// [`Event`] (a variant per type, carrying the payload of the same name) and the mapping between
/// them, so a new frame type is one line here and every `match` over either type that does not
/// handle it fails to compile.
macro_rules! frame_kinds {
    ($($kind:ident => $name:literal),+ $(,)?) => {
        /// The frame types flexrun emits.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum FrameKind {
            $(#[serde(rename = $name)] $kind),+
        }

        impl FrameKind {
            /// Every frame type, in declaration order (the console listens for each by name; the
            /// OpenAPI document lists them).
            pub const ALL: &'static [FrameKind] = &[$(Self::$kind),+];

            /// The names of every frame type, in declaration order.
            pub fn names() -> impl Iterator<Item = &'static str> {
                Self::ALL.iter().map(|kind| kind.as_str())
            }

            /// The SSE `event:` name and the `type` field.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$kind => $name),+
                }
            }
        }

        /// An event of a run, before it has a sequence number. Serialises as its payload; a
        /// stored or received frame decodes back into it ([`Frame::decode`]).
        #[derive(Debug, Clone, PartialEq, Serialize)]
        #[serde(untagged)]
        pub enum Event {
            $($kind($kind)),+
        }

        impl Event {
            pub fn kind(&self) -> FrameKind {
                match self {
                    $(Self::$kind(_) => FrameKind::$kind),+
                }
            }

            /// The event of a frame of type `kind`: its payload, then the frame's top-level
            /// `nodeId` where the payload leaves it to the frame ([`Event::set_node_id`]).
            pub fn decode(kind: FrameKind, payload: &str, node_id: Option<String>) -> Result<Self, serde_json::Error> {
                let mut event = match kind {
                    $(FrameKind::$kind => Self::$kind(serde_json::from_str(payload)?)),+
                };
                event.set_node_id(node_id);
                Ok(event)
            }
        }
    };
}

frame_kinds! {
    Start => "start",
    PlanRequested => "plan_requested",
    PlanRejected => "plan_rejected",
    PlanGenerated => "plan_generated",
    PlanUpdated => "plan_updated",
    NodeStart => "node_start",
    NodeComplete => "node_complete",
    NodeError => "node_error",
    ValidationError => "validation_error",
    GoalConditionFailed => "goal_condition_failed",
    PolicyTriggered => "policy_triggered",
    PolicyUpdate => "policy_update",
    HitlRequest => "hitl_request",
    HitlResolved => "hitl_resolved",
    Log => "log",
    Retry => "retry",
    BudgetExceeded => "budget_exceeded",
    Complete => "complete",
}

impl Event {
    /// The replan this event grants, if it grants one: the one rule the replan budget's counts
    /// and the metrics both follow. A failed goal evaluation, a runtime policy's or an
    /// operator's replan, and an operator's answer that asks for another plan grant one.
    pub fn granted_replan(&self) -> Option<ReplanReason> {
        match self {
            Self::GoalConditionFailed(_) => Some(ReplanReason::GoalConditionFailed),
            Self::PolicyTriggered(triggered) => Some(triggered.replan.reason),
            Self::HitlResolved(resolved) if resolved.decision.is_some() => {
                resolved.replan.as_ref().map(|replan| replan.reason)
            }
            _ => None,
        }
    }

    /// The model usage this frame records (`crate::run::usage`): its calls', or the run's total
    /// on `complete`.
    pub fn usage(&self) -> Option<&Usage> {
        match self {
            Self::PlanRejected(p) => p.usage.as_deref(),
            Self::PlanGenerated(p) => p.usage.as_deref(),
            Self::NodeComplete(n) => n.usage.as_deref(),
            Self::NodeError(n) => n.usage.as_deref(),
            Self::ValidationError(v) => v.usage.as_deref(),
            Self::HitlRequest(h) => h.usage.as_deref(),
            Self::PolicyTriggered(p) => p.usage.as_deref(),
            Self::BudgetExceeded(b) => b.usage.as_deref(),
            Self::Complete(c) => c.usage.as_deref(),
            Self::Start(_)
            | Self::PlanRequested(_)
            | Self::PlanUpdated(_)
            | Self::NodeStart(_)
            | Self::GoalConditionFailed(_)
            | Self::PolicyUpdate(_)
            | Self::HitlResolved(_)
            | Self::Log(_)
            | Self::Retry(_) => None,
        }
    }

    /// The node a frame is about, sent as the top-level `nodeId`.
    pub fn node_id(&self) -> Option<&str> {
        match self {
            Self::NodeStart(e) => Some(&e.node_id),
            Self::NodeComplete(e) => Some(&e.node_id),
            Self::NodeError(e) => Some(&e.node_id),
            Self::ValidationError(e) => e.node_id.as_deref(),
            Self::Retry(e) => e.node_id.as_deref(),
            Self::HitlRequest(e) => e.request.node_id.as_deref(),
            Self::PolicyUpdate(e) => e.policy.node_id.as_deref(),
            _ => None,
        }
    }

    /// A one-line summary, sent as the top-level `message`: a `node_error`'s error message, a
    /// `log` frame's text; other frames have none.
    pub fn message(&self) -> Option<&str> {
        match self {
            Self::NodeError(e) => Some(&e.error.message),
            Self::Log(e) => Some(&e.message),
            _ => None,
        }
    }

    /// Puts the frame's top-level `nodeId` into the payloads that leave it to the frame.
    fn set_node_id(&mut self, node_id: Option<String>) {
        match self {
            Self::NodeStart(NodeStart { node_id: id, .. })
            | Self::NodeComplete(NodeComplete { node_id: id, .. })
            | Self::NodeError(NodeError { node_id: id, .. }) => *id = node_id.unwrap_or_default(),
            Self::ValidationError(ValidationError { node_id: id, .. }) | Self::Retry(Retry { node_id: id, .. }) => {
                *id = node_id
            }
            Self::Start(_)
            | Self::PlanRequested(_)
            | Self::PlanRejected(_)
            | Self::PlanGenerated(_)
            | Self::PlanUpdated(_)
            | Self::GoalConditionFailed(_)
            | Self::PolicyTriggered(_)
            | Self::PolicyUpdate(_)
            | Self::HitlRequest(_)
            | Self::HitlResolved(_)
            | Self::Log(_)
            | Self::BudgetExceeded(_)
            | Self::Complete(_) => {}
        }
    }
}

/// The per-run values every frame carries.
#[derive(Debug, Clone)]
pub struct FrameHeader {
    pub run_id: Arc<str>,
    pub correlation_id: Arc<str>,
    pub plan_version: Option<u32>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    #[serde(rename = "type")]
    kind: FrameKind,
    seq: Seq,
    run_id: &'a str,
    timestamp: String,
    correlation_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan_version: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    payload: &'a Event,
}

/// An encoded frame: what is stored, broadcast and sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub seq: Seq,
    pub kind: FrameKind,
    pub timestamp: DateTime<Utc>,
    /// The frame's JSON text.
    pub json: Arc<str>,
    /// Whether an object key of the frame may name a secret (`crate::redact`), as judged when it
    /// was encoded: `false` only when none does, and a live stream then shows the text as it is.
    pub secret_keys: bool,
    /// The event the text encodes, for readers in this process that would otherwise decode the
    /// text again (a LangGraph stream folds every frame it sends into a run state).
    pub event: Arc<Event>,
}

impl Frame {
    /// Encodes `event` as frame `seq` of its run, stamped now.
    pub fn encode(header: &FrameHeader, seq: Seq, event: Event, redaction: &Redaction) -> Self {
        Self::encode_at(header, seq, Utc::now(), event, redaction)
    }

    /// Encodes `event` as frame `seq` of its run, stamped `timestamp`; `redaction` judges its keys.
    pub fn encode_at(
        header: &FrameHeader,
        seq: Seq,
        timestamp: DateTime<Utc>,
        event: Event,
        redaction: &Redaction,
    ) -> Self {
        let wire = Wire {
            kind: event.kind(),
            seq,
            run_id: &header.run_id,
            timestamp: timestamp.to_rfc3339_opts(SecondsFormat::Millis, true),
            correlation_id: &header.correlation_id,
            plan_version: header.plan_version,
            node_id: event.node_id(),
            message: event.message(),
            payload: &event,
        };
        let mut watch = redaction.watch();
        let mut json = Vec::with_capacity(256);
        #[expect(
            clippy::expect_used,
            reason = "every map in a frame has string keys: the one way serialising can fail"
        )]
        wire.serialize(&mut serde_json::Serializer::with_formatter(&mut json, &mut watch))
            .expect("frame keys are strings");
        #[expect(clippy::expect_used, reason = "serde_json writes UTF-8")]
        let json = String::from_utf8(json).expect("JSON text is UTF-8");
        let secret_keys = watch.found();
        Self { seq, kind: event.kind(), timestamp, json: json.into(), secret_keys, event: Arc::new(event) }
    }

    /// Whether a stream following the run ends after this frame.
    pub fn ends_stream(&self) -> bool {
        self.kind == FrameKind::Complete
    }

    /// Reads a frame's JSON text (as stored, broadcast or received) back into its typed event:
    /// the one place a frame is decoded.
    pub fn decode(json: &str) -> Result<DecodedFrame, DecodeError> {
        let wire: WireIn<'_> = serde_json::from_str(json).map_err(|e| DecodeError::new(json, e))?;
        let timestamp =
            DateTime::parse_from_rfc3339(&wire.timestamp).map_err(|e| DecodeError::new(json, e))?.with_timezone(&Utc);
        let event = Event::decode(wire.kind, wire.payload.get(), wire.node_id.clone())
            .map_err(|e| DecodeError::new(json, format!("{} payload: {e}", wire.kind.as_str())))?;
        Ok(DecodedFrame {
            seq: wire.seq,
            run_id: wire.run_id,
            timestamp,
            correlation_id: wire.correlation_id,
            plan_version: wire.plan_version,
            node_id: wire.node_id,
            event,
        })
    }
}

/// The wire form read back: the header, and the payload left as text until its type is known.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireIn<'a> {
    #[serde(rename = "type")]
    kind: FrameKind,
    seq: Seq,
    run_id: String,
    timestamp: String,
    correlation_id: String,
    #[serde(default)]
    plan_version: Option<u32>,
    #[serde(default)]
    node_id: Option<String>,
    #[serde(borrow)]
    payload: &'a serde_json::value::RawValue,
}

/// A frame read back into its typed event, with its header.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedFrame {
    pub seq: Seq,
    pub run_id: String,
    pub timestamp: DateTime<Utc>,
    pub correlation_id: String,
    pub plan_version: Option<u32>,
    pub node_id: Option<String>,
    pub event: Event,
}

impl DecodedFrame {
    pub fn kind(&self) -> FrameKind {
        self.event.kind()
    }
}

/// A frame that is not one flexrun writes (or that a newer flexrun wrote).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unreadable frame ({excerpt}): {reason}")]
pub struct DecodeError {
    /// The start of the frame's text.
    pub excerpt: String,
    pub reason: String,
}

impl DecodeError {
    /// Characters of a frame's text an error shows.
    const EXCERPT: usize = 80;

    fn new(json: &str, reason: impl std::fmt::Display) -> Self {
        let excerpt: String = json.chars().take(Self::EXCERPT).collect();
        Self { excerpt, reason: reason.to_string() }
    }
}

/// A frame as a client that does not need every payload typed reads it back (tests, tools).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceivedFrame {
    #[serde(rename = "type")]
    pub kind: String,
    pub seq: u64,
    pub run_id: String,
    pub timestamp: String,
    pub correlation_id: String,
    #[serde(default)]
    pub plan_version: Option<u32>,
    #[serde(default)]
    pub node_id: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    pub payload: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form() {
        let header = FrameHeader { run_id: "r1".into(), correlation_id: "c1".into(), plan_version: Some(2) };
        let event = Event::Log(Log { severity: "info".into(), message: "hello".into(), details: None });
        let frame = Frame::encode(&header, Seq::new(7).unwrap(), event, &Redaction::default());
        let back: ReceivedFrame = serde_json::from_str(&frame.json).unwrap();
        assert_eq!(back.kind, "log");
        assert_eq!(back.seq, 7);
        assert_eq!(back.run_id, "r1");
        assert_eq!(back.correlation_id, "c1");
        assert_eq!(back.plan_version, Some(2));
        assert_eq!(back.message.as_deref(), Some("hello"));
        assert_eq!(back.payload["severity"], "info");
        assert!(frame.json.starts_with(r#"{"type":"log","seq":7,"runId":"r1""#), "{}", frame.json);
    }

    #[test]
    fn kinds_serialise_as_their_names() {
        for kind in [FrameKind::GoalConditionFailed, FrameKind::PlanRequested, FrameKind::Complete] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
