//! Frames: the wire form of every event of a run (spec §4). A frame is encoded to JSON once; the
//! same text is stored in the event log, broadcast, and sent as the SSE `data:` line.

use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::payload::*;

/// The frame types flexrun emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    Start,
    PlanRequested,
    PlanRejected,
    PlanGenerated,
    PlanUpdated,
    NodeStart,
    NodeComplete,
    NodeError,
    ValidationError,
    GoalConditionFailed,
    PolicyTriggered,
    PolicyUpdate,
    HitlRequest,
    HitlResolved,
    Log,
    Retry,
    Complete,
}

impl FrameKind {
    /// The SSE `event:` name and the `type` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::PlanRequested => "plan_requested",
            Self::PlanRejected => "plan_rejected",
            Self::PlanGenerated => "plan_generated",
            Self::PlanUpdated => "plan_updated",
            Self::NodeStart => "node_start",
            Self::NodeComplete => "node_complete",
            Self::NodeError => "node_error",
            Self::ValidationError => "validation_error",
            Self::GoalConditionFailed => "goal_condition_failed",
            Self::PolicyTriggered => "policy_triggered",
            Self::PolicyUpdate => "policy_update",
            Self::HitlRequest => "hitl_request",
            Self::HitlResolved => "hitl_resolved",
            Self::Log => "log",
            Self::Retry => "retry",
            Self::Complete => "complete",
        }
    }
}

/// An event of a run, before it has a sequence number. Serialises as its payload.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Event {
    Start(Start),
    PlanRequested(PlanRequested),
    PlanRejected(PlanRejected),
    PlanGenerated(PlanGenerated),
    PlanUpdated(PlanUpdated),
    NodeStart(NodeStart),
    NodeComplete(NodeComplete),
    NodeError(NodeError),
    ValidationError(ValidationError),
    GoalConditionFailed(GoalConditionFailed),
    PolicyTriggered(PolicyTriggered),
    PolicyUpdate(PolicyUpdate),
    HitlRequest(HitlRequest),
    HitlResolved(HitlResolved),
    Log(Log),
    Retry(Retry),
    Complete(Complete),
}

impl Event {
    pub fn kind(&self) -> FrameKind {
        match self {
            Self::Start(_) => FrameKind::Start,
            Self::PlanRequested(_) => FrameKind::PlanRequested,
            Self::PlanRejected(_) => FrameKind::PlanRejected,
            Self::PlanGenerated(_) => FrameKind::PlanGenerated,
            Self::PlanUpdated(_) => FrameKind::PlanUpdated,
            Self::NodeStart(_) => FrameKind::NodeStart,
            Self::NodeComplete(_) => FrameKind::NodeComplete,
            Self::NodeError(_) => FrameKind::NodeError,
            Self::ValidationError(_) => FrameKind::ValidationError,
            Self::GoalConditionFailed(_) => FrameKind::GoalConditionFailed,
            Self::PolicyTriggered(_) => FrameKind::PolicyTriggered,
            Self::PolicyUpdate(_) => FrameKind::PolicyUpdate,
            Self::HitlRequest(_) => FrameKind::HitlRequest,
            Self::HitlResolved(_) => FrameKind::HitlResolved,
            Self::Log(_) => FrameKind::Log,
            Self::Retry(_) => FrameKind::Retry,
            Self::Complete(_) => FrameKind::Complete,
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

    /// A one-line summary, sent as the top-level `message` where the anchor has one.
    pub fn message(&self) -> Option<&str> {
        match self {
            Self::NodeError(e) => Some(&e.error.message),
            Self::Log(e) => Some(&e.message),
            _ => None,
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
    seq: u64,
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
    pub seq: u64,
    pub kind: FrameKind,
    pub timestamp: DateTime<Utc>,
    /// The frame's JSON text.
    pub json: Arc<str>,
}

impl Frame {
    pub fn encode(header: &FrameHeader, seq: u64, event: &Event) -> Self {
        let timestamp = Utc::now();
        let wire = Wire {
            kind: event.kind(),
            seq,
            run_id: &header.run_id,
            timestamp: timestamp.to_rfc3339_opts(SecondsFormat::Millis, true),
            correlation_id: &header.correlation_id,
            plan_version: header.plan_version,
            node_id: event.node_id(),
            message: event.message(),
            payload: event,
        };
        // Every map in a frame has string keys: the one way serde_json serialisation can fail.
        let json = serde_json::to_string(&wire).expect("frame keys are strings"); // ok: see above
        Self { seq, kind: event.kind(), timestamp, json: json.into() }
    }

    /// Whether a stream following the run ends after this frame.
    pub fn ends_stream(&self) -> bool {
        self.kind == FrameKind::Complete
    }
}

/// A frame as a client reads it back (CLI, tests).
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
        let frame = Frame::encode(&header, 7, &event);
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
