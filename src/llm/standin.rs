//! A stand-in for an OpenAI-compatible model server, on loopback, answering from a script.
//!
//! It is *not* a model: `flexrun demo` uses it so the whole job runs without an API key, and the
//! integration tests use it to mock the model at its HTTP boundary (recording every request).
//! It serves `POST /v1/chat/completions` with the response shape real servers use.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpResponse, HttpServer, web};
use futures::future::BoxFuture;
use serde_json::{Value, json};

/// One chat completion request as the stand-in saw it.
#[derive(Debug, Clone)]
pub struct ChatCall {
    pub system: String,
    pub user: String,
    pub body: Value,
    /// The request's `traceparent` header, if it carried one.
    pub traceparent: Option<String>,
}

impl ChatCall {
    fn from_body(body: Value) -> Self {
        let text_of = |role: &str| {
            body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["role"] == role)
                .filter_map(|m| m["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        };
        Self { system: text_of("system"), user: text_of("user"), body, traceparent: None }
    }

    /// Whether this is a planner request (as opposed to an `ai` capability call).
    pub fn is_planner(&self) -> bool {
        self.system.starts_with("You are the flexrun planner")
    }

    /// The capability an `ai` capability call is for (`(ID: <id>)` in its system prompt).
    pub fn capability_id(&self) -> Option<&str> {
        let start = self.system.find("(ID: ")? + 5;
        let end = self.system[start..].find(')')? + start;
        Some(&self.system[start..end])
    }
}

/// What the stand-in answers, possibly after a delay.
#[derive(Debug, Clone)]
pub struct Reply {
    pub answer: Answer,
    pub delay: Duration,
    /// What a completion reports it used.
    pub usage: Reported,
    /// The model a completion names; the one asked for when not set.
    pub model: Option<String>,
}

/// The `usage` block of a completion.
#[derive(Debug, Clone)]
pub enum Reported {
    /// Counted as a rough tokenizer would: a token per four characters of the prompt (input) and
    /// of the answer (output), none cached, none for reasoning.
    Estimate,
    /// This block as it is.
    Block(Value),
    /// No `usage` at all, as some servers answer.
    Nothing,
}

#[derive(Debug, Clone)]
pub enum Answer {
    /// A completion whose assistant message content is this text.
    Content(String),
    /// An error response with this status and `{"error": {"message": …}}`, and a `Retry-After`
    /// header (seconds) when given.
    Error { status: u16, message: String, retry_after: Option<String> },
    /// Headers of a success, then the connection breaks off in the middle of the body.
    Reset,
}

impl Reply {
    /// A completion with this content.
    pub fn content(text: impl Into<String>) -> Self {
        Self::answering(Answer::Content(text.into()))
    }

    fn answering(answer: Answer) -> Self {
        Self { answer, delay: Duration::ZERO, usage: Reported::Estimate, model: None }
    }

    /// A completion whose content is `value` as JSON text.
    pub fn json(value: Value) -> Self {
        Self::content(value.to_string())
    }

    /// An HTTP error.
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Self::answering(Answer::Error { status, message: message.into(), retry_after: None })
    }

    /// An HTTP error asking the client to wait `seconds` (`Retry-After`).
    pub fn error_retry_after(status: u16, message: impl Into<String>, seconds: &str) -> Self {
        Self::answering(Answer::Error { status, message: message.into(), retry_after: Some(seconds.to_string()) })
    }

    /// A connection that breaks off after the response headers.
    pub fn reset() -> Self {
        Self::answering(Answer::Reset)
    }

    /// The same reply, sent after `delay`.
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The same reply reporting `usage` (a Chat Completions `usage` block) instead of the
    /// estimate.
    pub fn usage(mut self, usage: Value) -> Self {
        self.usage = Reported::Block(usage);
        self
    }

    /// The same reply with no `usage` block.
    pub fn without_usage(mut self) -> Self {
        self.usage = Reported::Nothing;
        self
    }

    /// The same reply naming `model` as the model that answered.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }
}

/// Decides the reply to each call.
pub type Script = Arc<dyn Fn(ChatCall) -> BoxFuture<'static, Reply> + Send + Sync>;

/// Wraps a synchronous answer function as a [`Script`].
pub fn script(answer: impl Fn(&ChatCall) -> Reply + Send + Sync + 'static) -> Script {
    Arc::new(move |call| {
        let reply = answer(&call);
        Box::pin(async move { reply })
    })
}

/// A running stand-in server.
pub struct StandIn {
    pub base_url: String,
    calls: Arc<Mutex<Vec<ChatCall>>>,
    handle: ServerHandle,
}

impl StandIn {
    /// Starts on `127.0.0.1` with an ephemeral port. Must be called inside a tokio runtime.
    pub fn start(script: Script) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let base_url = format!("http://{}/v1", listener.local_addr()?);
        let calls = Arc::new(Mutex::new(Vec::new()));
        let state = web::Data::new((script, calls.clone()));
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .app_data(web::JsonConfig::default().limit(16 * 1024 * 1024))
                .route("/v1/chat/completions", web::post().to(complete))
        })
        .workers(1)
        .tcp_nodelay(true)
        .disable_signals()
        .listen(listener)?
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Ok(Self { base_url, calls, handle })
    }

    /// Every call received so far, in order.
    pub fn calls(&self) -> Vec<ChatCall> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub async fn stop(&self) {
        self.handle.stop(false).await;
    }
}

type State = web::Data<(Script, Arc<Mutex<Vec<ChatCall>>>)>;

async fn complete(state: State, request: actix_web::HttpRequest, body: web::Json<Value>) -> HttpResponse {
    let mut call = ChatCall::from_body(body.into_inner());
    call.traceparent = request.headers().get("traceparent").and_then(|value| value.to_str().ok()).map(String::from);
    state.1.lock().unwrap_or_else(|p| p.into_inner()).push(call.clone());
    let prompt_chars = call.system.chars().count() + call.user.chars().count();
    let asked = call.body["model"].as_str().unwrap_or("flexrun-stand-in").to_string();
    let reply = (state.0)(call).await;
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    match reply.answer {
        Answer::Content(content) => {
            let mut completion = json!({
                "id": "chatcmpl-standin",
                "object": "chat.completion",
                "created": 0,
                "model": reply.model.unwrap_or(asked),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
            });
            let usage = match reply.usage {
                Reported::Estimate => Some(estimate(prompt_chars, content.chars().count())),
                Reported::Block(usage) => Some(usage),
                Reported::Nothing => None,
            };
            if let Some(usage) = usage {
                completion["usage"] = usage;
            }
            HttpResponse::Ok().json(completion)
        }
        Answer::Error { status, message, retry_after } => {
            let status = actix_web::http::StatusCode::from_u16(status)
                .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = HttpResponse::build(status);
            if let Some(seconds) = retry_after {
                response.insert_header((actix_web::http::header::RETRY_AFTER, seconds));
            }
            response.json(json!({"error": {"message": message, "type": "stand_in_error", "param": null, "code": null}}))
        }
        Answer::Reset => {
            let broken = futures::stream::iter([
                Ok(web::Bytes::from_static(b"{\"id\": \"chatcmpl-")),
                Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "stand-in breaks the connection")),
            ]);
            HttpResponse::Ok().content_type("application/json").streaming(broken)
        }
    }
}

/// A `usage` block for a prompt and an answer of these lengths: a token per four characters.
fn estimate(prompt_chars: usize, answer_chars: usize) -> Value {
    let (prompt, completion) = (prompt_chars.div_ceil(4), answer_chars.div_ceil(4));
    json!({
        "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_calls() {
        let call = ChatCall::from_body(json!({"messages": [
            {"role": "system", "content": "x\nYou are executing capability \"W\" (ID: copywriter.draft) as one step"},
            {"role": "user", "content": "hello"}
        ]}));
        assert_eq!(call.capability_id(), Some("copywriter.draft"));
        assert_eq!(call.user, "hello");
        assert!(!call.is_planner());
    }
}
