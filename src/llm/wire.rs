//! The Chat Completions wire as flexrun writes and reads it: the request body, whose fixed parts
//! (the planner's system prompt, response schemas) arrive as JSON written once and are copied in,
//! and the parts of a completion flexrun reads — leniently, so servers that leave out or add
//! fields still work.

use flexrun_core::llm::written::FixedText;
use flexrun_core::usage::Counts;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::ChatRequest;

/// The shape the answer must have.
#[derive(Debug, Clone, Copy)]
pub enum ResponseShape<'a> {
    /// Plain text.
    Text,
    /// Any JSON object (`response_format: json_object`).
    JsonObject,
    /// JSON matching `schema`, or also `or` when given (sent as `anyOf`)
    /// (`response_format: json_schema`, non-strict: flexrun validates). Both as JSON, written
    /// once where the schema is kept.
    JsonSchema { name: &'a str, schema: &'a RawValue, or: Option<&'a RawValue> },
}

/// A system prompt: written for this call, or the same for every call of its kind.
#[derive(Debug, Clone, Copy)]
pub enum SystemPrompt<'a> {
    Built(&'a str),
    Fixed(&'static FixedText),
}

impl SystemPrompt<'_> {
    pub fn text(&self) -> &str {
        match self {
            Self::Built(text) => text,
            Self::Fixed(fixed) => fixed.text(),
        }
    }
}

impl Serialize for SystemPrompt<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Built(text) => text.serialize(serializer),
            Self::Fixed(fixed) => fixed.json().serialize(serializer),
        }
    }
}

/// What a request body holds besides its two prompts, as first sized: the model, the roles, a
/// response schema, and the prompts' escapes.
const BODY_BEYOND_PROMPTS: usize = 4096;

/// The Chat Completions request body.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: (Message<SystemPrompt<'a>>, Message<&'a str>),
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<Format<'a>>,
}

#[derive(Serialize)]
struct Message<C> {
    role: &'static str,
    content: C,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Format<'a> {
    JsonObject,
    JsonSchema { json_schema: JsonSchema<'a> },
}

#[derive(Serialize)]
struct JsonSchema<'a> {
    name: &'a str,
    schema: Schema<'a>,
    strict: bool,
}

/// A schema, or `{"anyOf": [a, b]}` written without building it.
enum Schema<'a> {
    One(&'a RawValue),
    AnyOf([&'a RawValue; 2]),
}

impl Serialize for Schema<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Self::One(schema) => schema.serialize(serializer),
            Self::AnyOf(schemas) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("anyOf", schemas)?;
                map.end()
            }
        }
    }
}

/// The request body of `request`.
pub(super) fn body(request: &ChatRequest<'_>) -> Result<Vec<u8>, serde_json::Error> {
    let body = Body {
        model: request.model,
        messages: (
            Message { role: "system", content: request.system },
            Message { role: "user", content: request.user },
        ),
        response_format: request.shape.format(),
    };
    // Sized for the two prompts and what surrounds them, so the text is not moved as it grows.
    let mut bytes = Vec::with_capacity(request.system.text().len() + request.user.len() + BODY_BEYOND_PROMPTS);
    serde_json::to_writer(&mut bytes, &body)?;
    Ok(bytes)
}

impl<'a> ResponseShape<'a> {
    fn format(self) -> Option<Format<'a>> {
        match self {
            Self::Text => None,
            Self::JsonObject => Some(Format::JsonObject),
            Self::JsonSchema { name, schema, or } => {
                let schema = match or {
                    Some(other) => Schema::AnyOf([schema, other]),
                    None => Schema::One(schema),
                };
                Some(Format::JsonSchema { json_schema: JsonSchema { name, schema, strict: false } })
            }
        }
    }
}

/// The parts of a chat completion flexrun reads.
#[derive(Deserialize)]
pub(super) struct Completion {
    /// The response's id, read only for a trace (and never failing the answer if odd).
    #[serde(default)]
    pub(super) id: Option<Box<RawValue>>,
    pub(super) choices: Vec<Choice>,
    /// The model that answered, as the server names it.
    #[serde(default)]
    pub(super) model: Option<String>,
    /// Read leniently ([`counts`]): a server whose usage block is odd still answered.
    #[serde(default)]
    pub(super) usage: Option<Box<RawValue>>,
}

/// The counts of a Chat Completions `usage` block flexrun reads; a count that is missing or not
/// a number is unknown.
#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "count")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default, deserialize_with = "count")]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default, deserialize_with = "count")]
    reasoning_tokens: Option<u64>,
}

/// A count, or unknown for anything that is not a whole number (a number in JSON allocates
/// nothing).
fn count<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    Ok(Value::deserialize(deserializer)?.as_u64())
}

/// The token counts of a response's `usage` block; unknown where it does not say, or when the
/// block is not one flexrun can read (the response is still an answer).
pub(super) fn counts(usage: Option<&RawValue>) -> Counts {
    let Some(usage) = usage.and_then(|raw| serde_json::from_str::<WireUsage>(raw.get()).ok()) else {
        return Counts::default();
    };
    Counts {
        input_tokens: usage.prompt_tokens,
        output_tokens: usage.completion_tokens,
        cached_input_tokens: usage.prompt_tokens_details.and_then(|d| d.cached_tokens),
        reasoning_tokens: usage.completion_tokens_details.and_then(|d| d.reasoning_tokens),
    }
}

#[derive(Deserialize)]
pub(super) struct Choice {
    pub(super) message: AssistantMessage,
    #[serde(default)]
    pub(super) finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct AssistantMessage {
    #[serde(default)]
    pub(super) content: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexrun_core::llm::written::written;
    use serde_json::json;

    #[test]
    fn the_request_body_is_the_chat_completions_wire_format() {
        let (schema, other) = (json!({"type": "object"}), json!({"required": ["signal"]}));
        let (schema_json, other_json) = (written(&schema), written(&other));
        let body = |shape: ResponseShape<'_>| {
            serde_json::to_value(Body {
                model: "m",
                messages: (
                    Message { role: "system", content: SystemPrompt::Built("s") },
                    Message { role: "user", content: "u" },
                ),
                response_format: shape.format(),
            })
            .unwrap()
        };
        let messages = json!([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]);
        assert_eq!(body(ResponseShape::Text), json!({"model": "m", "messages": messages}));
        assert_eq!(body(ResponseShape::JsonObject)["response_format"], json!({"type": "json_object"}));
        assert_eq!(
            body(ResponseShape::JsonSchema { name: "n", schema: &schema_json, or: None })["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": false}})
        );
        assert_eq!(
            body(ResponseShape::JsonSchema { name: "n", schema: &schema_json, or: Some(&other_json) })["response_format"]
                ["json_schema"]["schema"],
            json!({"anyOf": [schema, other]})
        );
    }

    #[test]
    fn a_fixed_system_prompt_is_written_as_a_built_one() {
        static FIXED: std::sync::LazyLock<FixedText> =
            std::sync::LazyLock::new(|| FixedText::new("say \"hi\"\n".into()));
        let write = |system: SystemPrompt<'_>| {
            let body = Body {
                model: "m",
                messages: (Message { role: "system", content: system }, Message { role: "user", content: "u" }),
                response_format: None,
            };
            serde_json::to_string(&body).unwrap()
        };
        assert_eq!(write(SystemPrompt::Fixed(&FIXED)), write(SystemPrompt::Built(FIXED.text())));
    }

    #[test]
    fn a_completion_needs_only_its_choices() {
        let read = |value: Value| serde_json::from_str::<Completion>(&value.to_string());
        let minimal = read(json!({"choices": [{"message": {"content": "x"}}]})).unwrap();
        assert_eq!(minimal.choices[0].message.content.as_deref(), Some("x"));
        assert_eq!(counts(minimal.usage.as_deref()), Counts::default(), "no usage: every count unknown");
        let full = read(json!({
            "id": "c", "object": "chat.completion", "created": 0, "model": "m", "usage": {"total_tokens": 3},
            "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": null}}]
        }))
        .unwrap();
        assert_eq!(full.choices[0].finish_reason.as_deref(), Some("length"));
        assert!(full.choices[0].message.content.is_none());
        assert!(read(json!({"id": "c"})).is_err());
    }

    #[test]
    fn usage_is_read_leniently() {
        let read = |usage: Value| {
            let completion = serde_json::from_str::<Completion>(&json!({"choices": [], "usage": usage}).to_string());
            counts(completion.unwrap().usage.as_deref())
        };
        let full = read(json!({"prompt_tokens": 10, "completion_tokens": 2,
                               "prompt_tokens_details": {"cached_tokens": 4},
                               "completion_tokens_details": {"reasoning_tokens": 1, "audio_tokens": 0}}));
        let expected = Counts {
            input_tokens: Some(10),
            output_tokens: Some(2),
            cached_input_tokens: Some(4),
            reasoning_tokens: Some(1),
        };
        assert_eq!(full, expected);
        let odd = read(json!({"prompt_tokens": "ten", "completion_tokens": 2.5, "prompt_tokens_details": null}));
        assert_eq!(odd, Counts::default(), "what is not a whole number is unknown");
        assert_eq!(read(json!("lots")), Counts::default(), "a block that is no object: the answer still counts");
    }
}
