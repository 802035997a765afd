//! Signals: a capability's answer that is not its output but a request to the coordinator. A
//! capability sends one when it cannot do its step as planned:
//!
//! - `{"signal":"CLARIFY","question":"…"}`: it needs an answer from a person. The run waits for an
//!   operator (`awaiting_hitl`), and the node runs again with the answer.
//! - `{"signal":"REPLAN","reason":"…"}`: the rest of the plan is wrong (the work already exists, a
//!   dependency appeared, a step cannot proceed). The coordinator plans again.
//!
//! The top-level key `signal` is reserved: an answer that has it is a signal, checked here, and
//! never an output, so a signal and an output are mutually exclusive.

use std::sync::LazyLock;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::llm::written::written;

/// The longest question or reason accepted (characters).
const MAX_TEXT: usize = 4000;

/// What a capability answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Its output (still to be checked against its contract).
    Output(Value),
    Signal(Signal),
}

/// A capability's request to the coordinator.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// The step needs a person's answer to `question` before it can be done.
    Clarify { question: String, context: Option<Value> },
    /// The remaining plan is invalid, for `reason`.
    Replan { reason: String, details: Option<Value> },
}

/// Why an answer that names a signal is not a valid one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid capability signal: {0}")]
pub struct InvalidSignal(pub String);

/// Reads a capability's answer: a signal when it is an object with a `signal` key.
pub fn read(answer: Value) -> Result<Reply, InvalidSignal> {
    match answer {
        Value::Object(fields) if fields.contains_key("signal") => parse(fields).map(Reply::Signal),
        other => Ok(Reply::Output(other)),
    }
}

fn parse(mut fields: Map<String, Value>) -> Result<Signal, InvalidSignal> {
    let name = fields.remove("signal").unwrap_or_default();
    let (text_key, extra_key) = match name.as_str() {
        Some("CLARIFY") => ("question", "context"),
        Some("REPLAN") => ("reason", "details"),
        _ => return Err(InvalidSignal(format!("`signal` must be \"CLARIFY\" or \"REPLAN\", not {name}"))),
    };
    let text = match fields.remove(text_key) {
        // NUL is refused as in every request body: PostgreSQL's `text` cannot hold it.
        Some(Value::String(text))
            if !text.trim().is_empty() && text.chars().count() <= MAX_TEXT && !text.contains('\0') =>
        {
            text
        }
        _ => {
            return Err(InvalidSignal(format!(
                "a {} signal needs `{text_key}`: a non-empty string of at most {MAX_TEXT} characters, without NUL",
                name.as_str().unwrap_or_default()
            )));
        }
    };
    let extra = fields.remove(extra_key);
    if let Some(key) = fields.keys().next() {
        return Err(InvalidSignal(format!(
            "unexpected key `{key}`: a signal carries only `signal`, `{text_key}` and `{extra_key}` (a signal and \
             an output are mutually exclusive)"
        )));
    }
    Ok(match name.as_str() {
        Some("CLARIFY") => Signal::Clarify { question: text, context: extra },
        _ => Signal::Replan { reason: text, details: extra },
    })
}

/// The JSON Schema of a signal, offered to `ai` capabilities next to their output schema: written
/// once, for every call of an `ai` capability that has an output schema.
pub static SCHEMA: LazyLock<Box<RawValue>> = LazyLock::new(|| {
    written(&json!({
        "type": "object",
        "required": ["signal"],
        "additionalProperties": false,
        "properties": {
            "signal": {"enum": ["CLARIFY", "REPLAN"]},
            "question": {"type": "string"},
            "context": {},
            "reason": {"type": "string"},
            "details": {}
        }
    }))
});

/// What an `ai` capability is told about signals (part of its system prompt).
pub const PROMPT: &str = "If you cannot do this step without an answer from a person, answer only \
{\"signal\":\"CLARIFY\",\"question\":\"<your question>\"}. If the remaining plan cannot work (the work \
already exists, a dependency is missing, the step cannot proceed), answer only \
{\"signal\":\"REPLAN\",\"reason\":\"<why>\"}. Otherwise never use the key \"signal\".";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_pass_through() {
        let output = json!({"text": "hi"});
        assert_eq!(read(output.clone()), Ok(Reply::Output(output)));
        assert_eq!(read(json!("plain text")), Ok(Reply::Output(json!("plain text"))));
    }

    #[test]
    fn reads_both_signals() {
        assert_eq!(
            read(json!({"signal": "CLARIFY", "question": "Which market?"})),
            Ok(Reply::Signal(Signal::Clarify { question: "Which market?".into(), context: None }))
        );
        assert_eq!(
            read(json!({"signal": "REPLAN", "reason": "already published", "details": {"url": "x"}})),
            Ok(Reply::Signal(Signal::Replan {
                reason: "already published".into(),
                details: Some(json!({"url": "x"}))
            }))
        );
    }

    #[test]
    fn rejects_malformed_signals() {
        let error = |answer: Value| read(answer).unwrap_err().0;
        assert!(error(json!({"signal": "STOP"})).contains("\"CLARIFY\" or \"REPLAN\""));
        assert!(error(json!({"signal": "CLARIFY"})).contains("needs `question`"));
        assert!(error(json!({"signal": "REPLAN", "reason": "  "})).contains("needs `reason`"));
        assert!(error(json!({"signal": "REPLAN", "reason": "x", "text": "output"})).contains("mutually exclusive"));
        assert!(error(json!({"signal": "CLARIFY", "question": "x".repeat(MAX_TEXT + 1)})).contains("at most"));
        assert!(error(json!({"signal": "CLARIFY", "question": "which\u{0}one"})).contains("without NUL"));
    }
}
