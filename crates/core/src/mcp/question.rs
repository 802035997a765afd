//! A tool that asks for input before it can finish. Under the 2026-07-28 revision a server answers
//! `tools/call` with an `input_required` result (a "multi round-trip request"): what it needs
//! (`inputRequests`, here a form elicitation: a message and the schema of the answer) and an opaque
//! `requestState`; the client calls the tool again with `inputResponses` and the state echoed.
//! That fits a durable run: the node pauses on an operator question (`hitl_request` kind
//! `clarify`) whose context keeps the key, the schema and the state, and when the operator answers
//! the node calls the tool again with the answer — on whichever node picks the run up, after any
//! restart. (Under 2025-11-25 a server asks in the middle of a call, which cannot outlive the
//! process; flexrun does not declare elicitation there — `docs/mcp.md`.)

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::contract::CompiledSchema;
use crate::excerpt;

/// The largest `requestState` kept with a question: it is stored in the run's log.
pub const MAX_REQUEST_STATE_BYTES: usize = 16 * 1024;

/// The largest requested schema kept with a question.
pub const MAX_REQUESTED_SCHEMA_BYTES: usize = 16 * 1024;

/// What a tool asks an operator, as a `hitl_request`'s context keeps it (`context.mcp`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolQuestion {
    /// The server's key for the request, echoed in `inputResponses`.
    pub input_key: String,
    pub message: String,
    /// The JSON Schema the answer must fit (an object of primitive properties).
    pub requested_schema: Value,
    /// The server's opaque state, echoed on the next call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
}

/// The answer a node's next call sends: `inputResponses {key: {action: "accept", content}}`
/// and the echoed state.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    pub input_key: String,
    pub content: Value,
    pub request_state: Option<String>,
}

/// What an `input_required` result asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum InputRequired {
    /// An operator must answer.
    Question(ToolQuestion),
    /// Nothing to answer: the call goes again at once with this state.
    StateOnly(String),
}

/// Why an `input_required` result cannot be answered by flexrun.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the tool asked for input flexrun cannot give: {0}")]
pub struct UnsupportedInput(pub String);

/// Reads an `input_required` result (JSON as the server sent it).
pub fn read(result: &Value) -> Result<InputRequired, UnsupportedInput> {
    let unsupported = |why: &str| UnsupportedInput(why.to_string());
    let state = match result.get("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(state)) if state.len() <= MAX_REQUEST_STATE_BYTES => Some(state.clone()),
        Some(Value::String(_)) => {
            return Err(UnsupportedInput(format!("its requestState is over {MAX_REQUEST_STATE_BYTES} bytes")));
        }
        Some(_) => return Err(unsupported("its requestState is not a string")),
    };
    let requests = result.get("inputRequests").and_then(Value::as_object).filter(|r| !r.is_empty());
    let Some(requests) = requests else {
        return state.map(InputRequired::StateOnly).ok_or_else(|| unsupported("it names no input and no state"));
    };
    if requests.len() > 1 {
        return Err(UnsupportedInput(format!(
            "{} inputs at once (flexrun asks one question at a time)",
            requests.len()
        )));
    }
    let Some((key, request)) = requests.iter().next() else { return Err(unsupported("it names no input")) };
    let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
    if method != "elicitation/create" {
        let method = excerpt::excerpt(method, 60);
        return Err(UnsupportedInput(format!("`{method}` (flexrun answers elicitation/create only)")));
    }
    let params = request.get("params").unwrap_or(&Value::Null);
    if params.get("mode").and_then(Value::as_str).is_some_and(|mode| mode != "form") {
        return Err(unsupported("an elicitation that is not a form (URL mode)"));
    }
    let message = params.get("message").and_then(Value::as_str).ok_or_else(|| unsupported("no message"))?;
    let schema = params.get("requestedSchema").filter(|s| s.is_object()).cloned().unwrap_or_else(|| json!({}));
    if schema.to_string().len() > MAX_REQUESTED_SCHEMA_BYTES {
        return Err(UnsupportedInput(format!("its requested schema is over {MAX_REQUESTED_SCHEMA_BYTES} bytes")));
    }
    CompiledSchema::compile(schema.clone()).map_err(|e| UnsupportedInput(format!("its requested schema: {e}")))?;
    Ok(InputRequired::Question(ToolQuestion {
        input_key: excerpt::excerpt(key, 200).into_owned(),
        message: excerpt::excerpt(message, excerpt::FRAME).into_owned(),
        requested_schema: schema,
        request_state: state,
    }))
}

impl ToolQuestion {
    /// The question kept in a `hitl_request`'s context.
    pub fn from_context(context: &Value) -> Option<Self> {
        serde_json::from_value(context.pointer("/context/mcp")?.clone()).ok()
    }

    /// The context a node's question carries (`context.mcp`).
    pub fn context(&self) -> Value {
        json!({"mcp": self})
    }

    /// An operator's text as the answer's content: a JSON object as written, else — when the
    /// schema asks for exactly one property — that property's value (a number or boolean read
    /// from the text when the property is one). The content must fit the requested schema; the
    /// error says where it does not.
    pub fn content(&self, text: &str) -> Result<Value, String> {
        let content = match serde_json::from_str::<Value>(text) {
            Ok(object @ Value::Object(_)) => object,
            _ => self.single_property(text).ok_or_else(|| {
                "the answer must be a JSON object fitting the question's schema (its properties: \
                 requestedSchema)"
                    .to_string()
            })?,
        };
        let schema = CompiledSchema::compile(self.requested_schema.clone()).map_err(|e| e.to_string())?;
        match schema.violations(&content).first() {
            None => Ok(content),
            Some(v) => {
                Err(format!("the answer does not fit the question's schema at `{}`: {}", v.instance_path, v.message))
            }
        }
    }

    fn single_property(&self, text: &str) -> Option<Value> {
        let properties = self.requested_schema.get("properties")?.as_object()?;
        let [(name, property)] = properties.iter().collect::<Vec<_>>()[..] else { return None };
        let text = text.trim();
        let value = match property.get("type").and_then(Value::as_str) {
            Some("number" | "integer" | "boolean") => serde_json::from_str(text).ok()?,
            _ => Value::String(text.to_string()),
        };
        Some(Value::Object(Map::from_iter([(name.clone(), value)])))
    }

    /// The answer to send, from the content an operator's answer was recorded as.
    pub fn answered(&self, recorded: &str) -> ToolAnswer {
        ToolAnswer {
            input_key: self.input_key.clone(),
            content: serde_json::from_str(recorded).unwrap_or(Value::Null),
            request_state: self.request_state.clone(),
        }
    }
}

impl ToolAnswer {
    /// `inputResponses` of the next call.
    pub fn input_responses(&self) -> Map<String, Value> {
        Map::from_iter([(self.input_key.clone(), json!({"action": "accept", "content": self.content}))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked() -> Value {
        json!({"resultType": "input_required", "requestState": "v1.abc",
               "inputRequests": {"main:ask": {"method": "elicitation/create", "params": {
                   "message": "Ship 3 x widget? Which warehouse?", "mode": "form",
                   "requestedSchema": {"type": "object", "properties": {"warehouse": {"type": "string"}},
                                       "required": ["warehouse"]}}}}})
    }

    fn question() -> ToolQuestion {
        let InputRequired::Question(question) = read(&asked()).unwrap() else { panic!() };
        question
    }

    #[test]
    fn a_form_elicitation_is_a_question_that_keeps_its_key_and_state() {
        let question = question();
        assert_eq!((question.input_key.as_str(), question.request_state.as_deref()), ("main:ask", Some("v1.abc")));
        assert_eq!(question.message, "Ship 3 x widget? Which warehouse?");
        assert_eq!(ToolQuestion::from_context(&json!({"context": question.context()})), Some(question));
        assert_eq!(read(&json!({"requestState": "s"})), Ok(InputRequired::StateOnly("s".into())));
    }

    #[test]
    fn inputs_flexrun_cannot_give_are_refused_with_the_reason() {
        let mut sampling = asked();
        sampling["inputRequests"]["main:ask"]["method"] = json!("sampling/createMessage");
        assert!(read(&sampling).unwrap_err().0.contains("sampling/createMessage"));
        let mut url = asked();
        url["inputRequests"]["main:ask"]["params"]["mode"] = json!("url");
        assert!(read(&url).unwrap_err().0.contains("URL mode"));
        let mut two = asked();
        two["inputRequests"]["other"] = two["inputRequests"]["main:ask"].clone();
        assert!(read(&two).unwrap_err().0.contains("2 inputs"));
        let mut huge = asked();
        huge["requestState"] = json!("x".repeat(MAX_REQUEST_STATE_BYTES + 1));
        assert!(read(&huge).unwrap_err().0.contains("requestState"));
        assert!(read(&json!({})).is_err());
    }

    #[test]
    fn an_answer_is_an_object_or_the_single_propertys_value_and_must_fit_the_schema() {
        let question = question();
        assert_eq!(question.content("north"), Ok(json!({"warehouse": "north"})));
        assert_eq!(question.content(r#"{"warehouse": "south"}"#), Ok(json!({"warehouse": "south"})));
        let error = question.content(r#"{"warehouse": 7}"#).unwrap_err();
        assert!(error.contains("/warehouse"), "{error}");
        let answer = question.answered(r#"{"warehouse":"north"}"#);
        assert_eq!(
            Value::Object(answer.input_responses()),
            json!({"main:ask": {"action": "accept", "content": {"warehouse": "north"}}})
        );
        assert_eq!(answer.request_state.as_deref(), Some("v1.abc"));

        let mut counted = question.clone();
        counted.requested_schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        assert_eq!(counted.content("3"), Ok(json!({"n": 3})));
        assert!(counted.content("three").is_err());
    }
}
