//! The model client: one Chat Completions call against any OpenAI-compatible endpoint, posted
//! with reqwest. Used by the planner and by `ai` capabilities.
//!
//! A call here is exactly one HTTP request: retry decisions belong to flexrun, which records them,
//! and hidden retries would multiply the attempts a caller configured. The request and response
//! bodies are flexrun's own small types ([`wire`]). The endpoint's URL and the `Authorization`
//! header are built once, not per call.
//!
//! [`standin`] is a scripted stand-in for such a server (the demo and the tests), not a model.

pub use flexrun_core::llm::{LlmError, prompt, route};
pub mod pool;
pub mod standin;
mod traced;
mod wire;

use wire::{Completion, counts};
pub use wire::{ResponseShape, SystemPrompt};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use flexrun_core::usage::{CallUsage, Counts, Metered, Prices};
use reqwest::header::{self, HeaderValue};
use serde_json::Value;
use tokio::sync::SemaphorePermit;

use crate::config::LlmSettings;
use crate::slots::Slots;
use traced::ChatSpan;

/// One system + user exchange.
#[derive(Debug, Clone)]
pub struct ChatRequest<'a> {
    pub purpose: Purpose,
    /// The model asked for (a route entry's).
    pub model: &'a str,
    pub system: SystemPrompt<'a>,
    pub user: &'a str,
    pub shape: ResponseShape<'a>,
    /// How long the call may take.
    pub timeout: Duration,
}

/// What a model call is for: the metrics count planner and capability calls apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Planner,
    Capability,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Planner => "planner",
            Self::Capability => "capability",
        }
    }
}

/// What a posted request came to, once the endpoint answered with a success.
enum Answered {
    Completion(Completion),
    /// A success whose body could not be read as a completion: the call was made (and likely
    /// paid for), its usage is unknown.
    Unreadable(LlmError),
}

/// Why a model client cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot set up an HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the base_url of model endpoint `{0}` is not a URL a path can be added to")]
    BaseUrl(String),
    #[error("the API key of model endpoint `{0}` holds characters an HTTP header cannot carry")]
    ApiKey(String),
}

/// What a client of one endpoint is made from.
pub struct ClientSettings<'a> {
    /// The endpoint's name (errors name it).
    pub name: &'a str,
    pub base_url: &'a str,
    pub api_key: &'a str,
    pub max_response_bytes: usize,
    pub max_concurrent_calls: usize,
}

/// A configured client of one model endpoint. Creating it makes no network call.
#[derive(Clone)]
pub struct LlmClient {
    /// The endpoint's name, as metrics label its calls.
    name: String,
    http: reqwest::Client,
    /// `<base URL>/chat/completions`.
    url: reqwest::Url,
    /// `Bearer <key>`, marked sensitive; none without a key (local servers need none).
    authorization: Option<HeaderValue>,
    /// What each model's tokens cost (`llm.prices`).
    prices: Arc<Prices>,
    /// The model names the configuration holds: the only ones metrics label a series with.
    configured: Arc<BTreeSet<String>>,
    /// The largest body read from the model endpoint.
    limit: usize,
    /// The API key, cut out of every error text the endpoint answers: a server may echo the
    /// credentials it was sent, and its message reaches frames, documents and logs.
    secrets: Vec<String>,
    /// One permit per call in flight (`llm.max_concurrent_calls`), shared by every run: each
    /// call holds a connection, so a node with thousands of open runs opens at most this many
    /// towards the model server instead of one per run.
    slots: Slots,
}

impl LlmClient {
    /// A client for an endpoint, its calls priced with `prices`; `configured` are the model
    /// names its metrics may carry.
    pub fn new(
        settings: &ClientSettings<'_>,
        prices: Arc<Prices>,
        configured: Arc<BTreeSet<String>>,
    ) -> Result<Self, ClientError> {
        let url = format!("{}/chat/completions", settings.base_url.trim_end_matches('/'));
        let url = reqwest::Url::parse(&url).map_err(|_| ClientError::BaseUrl(settings.name.to_string()))?;
        let key = settings.api_key;
        let authorization = if key.is_empty() {
            None
        } else {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| ClientError::ApiKey(settings.name.to_string()))?;
            value.set_sensitive(true);
            Some(value)
        };
        // Not even the protocol-level retries reqwest makes by default: every attempt is flexrun's.
        let http = reqwest::Client::builder().retry(reqwest::retry::never()).build()?;
        let slots = Slots::new(settings.max_concurrent_calls, crate::telemetry::model_call_waiting);
        let name = settings.name.to_string();
        let secrets = if key.is_empty() { Vec::new() } else { vec![key.to_string()] };
        let limit = settings.max_response_bytes;
        Ok(Self { name, http, url, authorization, prices, configured, limit, secrets, slots })
    }

    /// The `default` endpoint's settings (`[llm]`).
    pub fn default_settings(settings: &LlmSettings) -> ClientSettings<'_> {
        ClientSettings {
            name: "default",
            base_url: &settings.base_url,
            api_key: settings.api_key.expose(),
            max_response_bytes: settings.max_response_bytes,
            max_concurrent_calls: settings.max_concurrent_calls,
        }
    }

    /// Waits for a free slot for one call. Taken before the prompt is built, so the calls that
    /// wait (with thousands of open runs, most of them) hold no prompt; the wait is not part of
    /// the call's timeout, as it says nothing about the endpoint.
    pub async fn slot(&self) -> Slot<'_> {
        Slot { client: self, _permit: self.slots.take().await }
    }

    /// Sends one request and returns the assistant message content, with the call's usage.
    async fn complete(&self, request: ChatRequest<'_>) -> Metered<Result<String, LlmError>> {
        let (purpose, started, requested) = (request.purpose, std::time::Instant::now(), request.model);
        let mut span = ChatSpan::start(&request, &self.url);
        let called = self.call(request, span.as_mut()).await;
        if let Some(span) = span {
            span.end(&called);
        }
        let outcome = called.result.as_ref().map_or_else(LlmError::kind, |_| "ok");
        crate::telemetry::model_call(purpose.as_str(), &self.name, self.label(requested), outcome, started.elapsed());
        if let Some(usage) = &called.usage {
            crate::telemetry::model_usage(self.label(&usage.model), usage);
        }
        called
    }

    async fn call(&self, request: ChatRequest<'_>, span: Option<&mut ChatSpan>) -> Metered<Result<String, LlmError>> {
        let body = match wire::body(&request) {
            Ok(body) => body,
            Err(e) => return Metered::unmetered(Err(LlmError::Request(e.to_string()))),
        };
        let traceparent = span.as_deref().map(ChatSpan::traceparent);
        let answered = match tokio::time::timeout(request.timeout, self.post(body, traceparent)).await {
            Ok(Ok(answered)) => answered,
            Ok(Err(error)) => return Metered::unmetered(Err(in_time(error, request.timeout))),
            Err(_) => return Metered::unmetered(Err(LlmError::Timeout(request.timeout))),
        };
        let requested = request.model;
        let response = match answered {
            Answered::Completion(response) => response,
            Answered::Unreadable(error) => return self.metered(requested, None, Counts::default(), Err(error)),
        };
        let counts = counts(response.usage.as_deref());
        let reported = flexrun_core::usage::reported_model(response.model.as_deref());
        let choice = response.choices.into_iter().next();
        if let Some(span) = span {
            let content = choice.as_ref().and_then(|c| c.message.content.as_deref());
            let finish = choice.as_ref().and_then(|c| c.finish_reason.as_deref());
            let id = response.id.as_deref().and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
            span.answered(id.as_deref(), reported, finish, content);
        }
        let finish = choice.as_ref().and_then(|c| c.finish_reason.as_deref()).map(|r| format!(" (finish reason {r})"));
        let content = choice
            .and_then(|c| c.message.content)
            .filter(|content| !content.trim().is_empty())
            .ok_or_else(|| LlmError::Empty(finish.unwrap_or_default()));
        self.metered(requested, reported, counts, content)
    }

    /// A model's name as a metric label: a name the configuration holds, else `other`. Labels
    /// must come from a fixed set, and neither the name a response gives nor the one asked for
    /// is fixed: a caller may choose its run's models (`policies.models`) on an endpoint that
    /// lists none, which serves any name.
    fn label<'m>(&self, model: &'m str) -> &'m str {
        if self.configured.contains(model) { model } else { "other" }
    }

    /// `result` of a call the endpoint answered, with its usage priced.
    fn metered<T>(&self, requested: &str, reported: Option<&str>, counts: Counts, result: T) -> Metered<T> {
        let usage = CallUsage::priced(&self.prices, requested, reported, counts);
        Metered::answered(result, usage)
    }

    /// Posts `body` once and reads the completion, bounded; a non-success answer keeps its
    /// status, message and `Retry-After`.
    async fn post(&self, body: Vec<u8>, traceparent: Option<String>) -> Result<Answered, LlmError> {
        let mut post = self.http.post(self.url.clone()).header(header::CONTENT_TYPE, "application/json");
        if let Some(traceparent) = traceparent {
            post = post.header("traceparent", traceparent);
        }
        if let Some(authorization) = &self.authorization {
            post = post.header(header::AUTHORIZATION, authorization.clone());
        }
        let response = post.body(body).send().await.map_err(transport)?;
        let status = response.status();
        if status.is_success() {
            // serde's message quotes the value it could not read: cut as a failure's message is.
            let unreadable = |e: serde_json::Error| {
                LlmError::Protocol(flexrun_core::redact::cut_secrets(
                    &e.to_string(),
                    &self.secrets,
                    crate::excerpt::MESSAGE,
                ))
            };
            let completion = read_limited(response, self.limit)
                .await
                .and_then(|body| serde_json::from_slice(&body).map_err(unreadable));
            return Ok(completion.map_or_else(Answered::Unreadable, Answered::Completion));
        }
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(crate::retry::parse_retry_after);
        let body = read_limited(response, self.limit).await.unwrap_or_default();
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(String::from))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        let message = flexrun_core::redact::cut_secrets(&message, &self.secrets, crate::excerpt::MESSAGE);
        Err(LlmError::Status { status: status.as_u16(), message, retry_after })
    }
}

/// A model call's place among the `llm.max_concurrent_calls` in flight, held until the call ends.
pub struct Slot<'a> {
    client: &'a LlmClient,
    _permit: SemaphorePermit<'a>,
}

impl Slot<'_> {
    /// Sends one request and returns the assistant message content, with the call's usage when
    /// the endpoint answered. The call's state (request, connection, response) is boxed: it
    /// exists only while the call is in flight, not in the future of every node that waits for a
    /// slot.
    pub async fn complete(self, request: ChatRequest<'_>) -> Metered<Result<String, LlmError>> {
        Box::pin(self.client.complete(request)).await
    }
}

/// Reads a response body, refusing one longer than `limit` (whatever its length header claims).
async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<bytes::Bytes, LlmError> {
    if response.content_length().is_some_and(|len| usize::try_from(len).map_or(true, |len| len > limit)) {
        return Err(LlmError::TooLarge(limit));
    }
    let mut read = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if read.len() + chunk.len() > limit {
            return Err(LlmError::TooLarge(limit));
        }
        read.extend_from_slice(&chunk);
    }
    Ok(read.freeze())
}

/// A failure to send or to read: a timeout or a connection error.
fn transport(error: reqwest::Error) -> LlmError {
    if error.is_timeout() { LlmError::Timeout(Duration::ZERO) } else { LlmError::Connection(without_url(error)) }
}

/// A timeout of the transport reported as the call's own.
fn in_time(error: LlmError, timeout: Duration) -> LlmError {
    match error {
        LlmError::Timeout(_) => LlmError::Timeout(timeout),
        other => other,
    }
}

/// reqwest errors name the URL, which may carry credentials in a query string; keep the cause only.
fn without_url(error: reqwest::Error) -> String {
    use std::error::Error as _;
    let error = error.without_url();
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// Reads a JSON value from model output, tolerating a fenced ```json block around it.
pub fn parse_json_content(content: &str) -> Result<Value, String> {
    let trimmed = content.trim();
    let inner = trimmed
        .strip_prefix("```")
        .map(|rest| {
            let rest = rest.strip_prefix("json").or_else(|| rest.strip_prefix("JSON")).unwrap_or(rest);
            rest.trim_end().strip_suffix("```").unwrap_or(rest)
        })
        .unwrap_or(trimmed);
    serde_json::from_str(inner.trim()).map_err(|e| format!("not valid JSON ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_plain_and_fenced_json() {
        assert_eq!(parse_json_content(" {\"a\":1} ").unwrap(), json!({"a": 1}));
        assert_eq!(parse_json_content("```json\n{\"a\":1}\n```").unwrap(), json!({"a": 1}));
        assert_eq!(parse_json_content("```\n[1]\n```\n").unwrap(), json!([1]));
        assert!(parse_json_content("Sure! Here is the plan").unwrap_err().contains("not valid JSON"));
    }

    #[test]
    fn transient_classification() {
        let status = |status| LlmError::Status { status, message: String::new(), retry_after: None };
        assert!(status(429).is_transient());
        assert!(status(503).is_transient());
        assert!(!status(401).is_transient());
        assert!(!status(400).is_transient());
        assert!(LlmError::Timeout(Duration::ZERO).is_transient());
        assert!(!LlmError::Protocol("x".into()).is_transient());
    }
}
