//! Chat on a thread: the messages a chat client sends (LangChain message dicts, `[role,
//! content]` pairs, plain strings) read into message dicts, and the run they start — an envelope
//! whose objective is the last human message, whose `messages` input is the conversation so far,
//! with a freeform answer. Pure: parsing and mapping only.

use serde_json::{Value, json};

use crate::envelope::MAX_OBJECTIVE_CHARS;

/// A chat input flexrun cannot take, in words for the client.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ChatError(pub String);

/// Chat messages a thread keeps at most (older ones are dropped from new runs' history).
const MAX_MESSAGES: usize = 50;

/// Chat messages as LangChain message dicts (`{type, content, id, …}`), from the dicts, the
/// `[role, content]` pairs and the plain strings clients send.
pub fn messages(messages: &Value) -> Result<Vec<Value>, ChatError> {
    let items = match messages {
        Value::Array(items) => items.as_slice(),
        single => std::slice::from_ref(single),
    };
    items.iter().map(message).collect()
}

fn message(message: &Value) -> Result<Value, ChatError> {
    let (kind, content, id) = match message {
        Value::String(text) => ("human".to_string(), json!(text), None),
        Value::Array(pair) if pair.len() == 2 => (role(pair[0].as_str().unwrap_or_default()), pair[1].clone(), None),
        Value::Object(dict) => {
            let kind = dict.get("type").or_else(|| dict.get("role")).and_then(Value::as_str).unwrap_or("human");
            (role(kind), dict.get("content").cloned().unwrap_or(Value::Null), dict.get("id").cloned())
        }
        _ => return Err(ChatError("a chat message is a string, a [role, content] pair or a message object".into())),
    };
    let id = id.filter(|id| id.is_string()).unwrap_or_else(|| json!(uuid::Uuid::now_v7().to_string()));
    Ok(
        json!({"type": kind, "content": content, "id": id, "additional_kwargs": {}, "response_metadata": {}, "name": null}),
    )
}

fn role(name: &str) -> String {
    match name {
        "user" | "human" => "human",
        "assistant" | "ai" => "ai",
        "system" | "developer" => "system",
        "tool" => "tool",
        _ => "human",
    }
    .to_string()
}

/// The text of the last human message of `messages` (LangChain message dicts), if it has any.
pub fn last_human_text(messages: &[Value]) -> Option<String> {
    let last = messages.iter().rev().find(|m| m["type"] == "human")?;
    Some(text_of(&last["content"])).filter(|text| !text.trim().is_empty())
}

/// The text of a message's content: a string, or the text blocks of a list.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.as_str().or_else(|| b.get("text").and_then(Value::as_str)))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The envelope of a chat run on `thread_id`: `messages` after the thread's `history` (the last
/// [`MAX_MESSAGES`] of them), its objective the last human message's text (its first
/// [`MAX_OBJECTIVE_CHARS`] characters).
pub fn envelope(messages: &[Value], thread_id: &str, history: &[Value]) -> Result<Value, ChatError> {
    let objective =
        last_human_text(messages).ok_or_else(|| ChatError("the chat input has no human message with text".into()))?;
    // The whole message is in `messages`; the objective, which lists show, is its beginning.
    let objective: String = objective.chars().take(MAX_OBJECTIVE_CHARS).collect();
    let mut all: Vec<Value> = history.iter().chain(messages).cloned().collect();
    let dropped = all.len().saturating_sub(MAX_MESSAGES);
    all.drain(..dropped);
    // The conversation is the run's `messages` facet, for the capabilities that answer it.
    Ok(json!({
        "objective": objective,
        "inputs": {"messages": all},
        "outputContract": {"mode": "freeform", "instructions": "Answer the user's last message."},
        "constraints": {"threadId": thread_id},
        "metadata": {"chat": true},
    }))
}

/// The newest of a thread's `history` whose JSON together stays within `max_bytes` (a whole
/// message or none). A chat run's envelope carries the conversation so far, each answer included,
/// and so would grow with every turn — an answer may be as long as a model's response limit —
/// while an envelope's size is bounded when it is posted (`limits.max_body_bytes`): the history
/// is held to that bound, the request's own messages to the body's.
pub fn bounded_history(mut history: Vec<Value>, max_bytes: usize) -> Vec<Value> {
    let mut total = 0usize;
    let kept = history
        .iter()
        .rev()
        .take_while(|message| {
            total = total.saturating_add(serde_json::to_string(message).map_or(usize::MAX, |text| text.len()));
            total <= max_bytes
        })
        .count();
    history.drain(..history.len() - kept);
    history
}

/// The chat messages a run was started with (the `messages` input of a chat run's envelope).
pub fn stored_messages(envelope: &Value) -> Option<Vec<Value>> {
    if envelope.pointer("/metadata/chat") != Some(&Value::Bool(true)) {
        return None;
    }
    envelope.pointer("/inputs/messages").and_then(Value::as_array).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_keeps_its_newest_messages_within_its_bound() {
        let message = |n: usize| json!({"type": "human", "content": "x".repeat(n)});
        let history = vec![message(500), message(300), message(100)];
        let size = |m: &Value| m.to_string().len();
        let (newest, middle) = (size(&history[2]), size(&history[1]));
        assert_eq!(bounded_history(history.clone(), newest + middle), history[1..]);
        assert_eq!(bounded_history(history.clone(), newest + middle - 1), history[2..]);
        assert_eq!(bounded_history(history.clone(), usize::MAX), history);
        assert!(bounded_history(history, newest - 1).is_empty(), "a message is kept whole or not at all");
    }

    #[test]
    fn a_long_message_is_the_objective_as_far_as_an_objective_goes() {
        let text = "x".repeat(MAX_OBJECTIVE_CHARS + 10);
        let messages = messages(&json!([{"role": "user", "content": text}])).unwrap();
        let envelope = envelope(&messages, "t-1", &[]).unwrap();
        assert_eq!(envelope["objective"].as_str().map(str::len), Some(MAX_OBJECTIVE_CHARS));
        assert_eq!(envelope["inputs"]["messages"][0]["content"], json!(text), "the message is whole");
    }
}
