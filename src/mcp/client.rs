//! One session with an MCP server over Streamable HTTP, through the official SDK (`rmcp`): open
//! it (the 2026-07-28 revision when the server speaks it, else 2025-11-25's `initialize`), list
//! the tools, call one. Every request has a deadline (the SDK sets none), every answer is read
//! within the response limit ([`super::http`]), and every error's text is bounded and cleared of
//! the registration's secrets before anyone sees it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, ElicitRequestParams,
    ElicitResult, Implementation, MetaObject, PaginatedRequestParams, ProtocolVersion, RequestMetaObject, ServerResult,
    SubscriptionFilter,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, PeerRequestOptions, RequestContext, RoleClient,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, service::RunningService};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use super::http::McpHttp;
use flexrun_core::excerpt;
use flexrun_core::mcp::McpServer;

/// How long opening a session may take (a server that never answers must not hold a refresh).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a session could not be opened or a request failed; its text holds no secret.
#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    #[error("environment variable {0} (bearerTokenEnv) is not set")]
    TokenMissing(String),
    #[error("header `{0}` cannot be sent: its name or value is not valid in HTTP")]
    BadHeader(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("could not reach the server: {0}")]
    Unreachable(String),
    #[error("the server refused the request: {0}")]
    Refused(String),
    /// The answer was larger than the response limit (bytes): it was not read beyond it. Not a
    /// transport failure: the server answered (a tool call did its work), and asking again would
    /// bring the same answer.
    #[error("the server's answer is larger than {0} bytes")]
    TooLarge(usize),
}

/// The `_meta` key of a 2026-07-28 request's client capabilities.
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// What answers the previous round of a call that asked for input (nothing on a first call).
#[derive(Debug, Clone, Default)]
pub struct Round {
    pub input_responses: Option<Map<String, Value>>,
    pub request_state: Option<String>,
}

/// What a `tools/call` came to: its result, or (2026-07-28) what the server needs first.
#[derive(Debug)]
pub enum Called {
    Result(Value),
    InputRequired(Value),
}

/// Hears the server say its tool list changed.
#[derive(Clone)]
struct Handler {
    changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    /// A 2025-11-25 server asking in the middle of a call (it should not: no elicitation is
    /// declared). The SDK's default would decline on the operator's behalf, and the tool would go
    /// on as if someone had said no; an error makes the tool fail, saying why.
    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        Err(rmcp::ErrorData::invalid_request(
            "flexrun cannot answer a question in the middle of a call: it asks operators only through the \
             2026-07-28 revision's input_required results",
            None,
        ))
    }

    fn get_info(&self) -> ClientConfig {
        // No sampling, roots or elicitation: flexrun answers no request of the server's.
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("flexrun", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

/// An open session.
pub struct Session {
    service: RunningService<RoleClient, Handler>,
    /// The registration's header values and token, cut out of every error text.
    secrets: Vec<String>,
    /// The largest answer read, bytes.
    max_response_bytes: usize,
}

impl Session {
    /// Opens a session with `server`; `changed` is notified whenever it says its tools changed.
    /// Within [`CONNECT_TIMEOUT`] in all, the subscription of a 2026-07-28 session included: a
    /// server that never acknowledges it would otherwise hold the opening — and whoever waits on
    /// it, a refresh or a call — for ever.
    pub async fn open(
        server: &McpServer,
        http: reqwest::Client,
        max_response_bytes: usize,
        changed: Arc<Notify>,
    ) -> Result<Self, McpError> {
        let opening = Self::connect(server, http, max_response_bytes, changed);
        tokio::time::timeout(CONNECT_TIMEOUT, opening).await.map_err(|_| McpError::Timeout(CONNECT_TIMEOUT))?
    }

    /// Opens the session and, on a 2026-07-28 one, its subscription, without a deadline.
    async fn connect(
        server: &McpServer,
        http: reqwest::Client,
        max_response_bytes: usize,
        changed: Arc<Notify>,
    ) -> Result<Self, McpError> {
        let (config, secrets) = transport_config(server, max_response_bytes)?;
        let transport = StreamableHttpClientTransport::with_client(McpHttp::new(http), config);
        let handler = Handler { changed: changed.clone() };
        let mode = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        let service = handler
            .serve_with_lifecycle(transport, mode)
            .await
            .map_err(|error| McpError::Unreachable(clean(&error.to_string(), &secrets)))?;
        let session = Self { service, secrets, max_response_bytes };
        session.listen_for_changes(changed).await;
        Ok(session)
    }

    /// On a 2026-07-28 session a server announces changes only to a subscription: hold one.
    async fn listen_for_changes(&self, changed: Arc<Notify>) {
        if !self.is_modern() {
            return;
        }
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        match self.service.listen(filter).await {
            Ok(mut subscription) => {
                tokio::spawn(async move {
                    while let Ok(Some(_)) = subscription.next().await {
                        changed.notify_one();
                    }
                });
            }
            Err(error) => {
                tracing::debug!(error = %excerpt::log(clean(&error.to_string(), &self.secrets)), "no tool list subscription")
            }
        }
    }

    /// The protocol revision the session speaks.
    pub fn protocol(&self) -> Option<String> {
        self.service.peer_info().map(|info| info.protocol_version.to_string())
    }

    /// One page of the server's tools, as JSON (the core reads them): the first, or the one
    /// `cursor` names; and the cursor of the next page, if there is one. One page at a time: what
    /// follows of a list is read only while its reader's bounds allow ([`super::listing`]).
    pub async fn tools_page(&self, cursor: Option<String>) -> Result<(Vec<Value>, Option<String>), McpError> {
        let params = cursor.map(|cursor| PaginatedRequestParams::default().with_cursor(Some(cursor)));
        let page = self.service.list_tools(params).await.map_err(|e| self.failed(e))?;
        let tools = page.tools.into_iter().filter_map(|tool| serde_json::to_value(tool).ok()).collect();
        Ok((tools, page.next_cursor))
    }

    /// Calls `tool` with `arguments`, `meta` as the request's `_meta`, and what answers an earlier
    /// round's `input_required` result; the result (or a new `input_required`) as JSON.
    ///
    /// On a 2026-07-28 session the call declares form elicitation: the server may then ask through
    /// an `input_required` result, which a run turns into an operator's question. A 2025-11-25
    /// session declares none: there a server would ask in the middle of the call, which cannot
    /// wait for an operator across restarts.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        meta: Map<String, Value>,
        round: Round,
        timeout: Duration,
    ) -> Result<Called, McpError> {
        let mut params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
        params.input_responses = round.input_responses.map(|responses| responses.into_iter().collect());
        params.request_state = round.request_state;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut options = PeerRequestOptions::with_timeout(timeout);
        if self.is_modern() {
            let capabilities =
                Map::from_iter([(CLIENT_CAPABILITIES.to_string(), json!({"elicitation": {"form": {}}}))]);
            options.meta = Some(RequestMetaObject(MetaObject(capabilities)));
        }
        let handle = self.service.send_request_with_option(request, options).await.map_err(|e| self.failed(e))?;
        let unreadable = |e: serde_json::Error| McpError::Refused(format!("unreadable result: {e}"));
        match handle.await_response().await.map_err(|e| self.failed(e))? {
            ServerResult::CallToolResult(result) => {
                let mut result = serde_json::to_value(result).map_err(unreadable)?;
                self.cut_from_error(&mut result);
                Ok(Called::Result(result))
            }
            ServerResult::InputRequiredResult(asked) if self.is_modern() => {
                let mut asked = serde_json::to_value(asked).map_err(unreadable)?;
                // The question becomes an operator request (frames, pages, the log), and its state
                // is stored with it: neither may show what flexrun sent the server.
                cut_everywhere(&mut asked, &self.secrets);
                Ok(Called::InputRequired(asked))
            }
            _ => Err(McpError::Refused("the answer to tools/call is not a tool result".into())),
        }
    }

    /// Cuts the registration's secrets out of an error result's texts, which become a
    /// `tool_error` message (frames, the log, the repair prompt): a server that quotes the
    /// request's headers back in its error must not show them. A result that is not an error is
    /// the tool's output, kept as it is.
    fn cut_from_error(&self, result: &mut Value) {
        if result.get("isError").and_then(Value::as_bool) != Some(true) {
            return;
        }
        let blocks = result.get_mut("content").and_then(Value::as_array_mut).into_iter().flatten();
        for text in blocks.filter_map(|block| block.get_mut("text")) {
            if let Value::String(text) = text {
                // Unbounded here: the message is bounded once, after the cut, so no secret is cut
                // in half by the bound and half shown.
                *text = flexrun_core::redact::cut_secrets(text, &self.secrets, usize::MAX);
            }
        }
    }

    fn is_modern(&self) -> bool {
        self.service.peer_info().is_some_and(|info| info.protocol_version == ProtocolVersion::V_2026_07_28)
    }

    fn failed(&self, error: rmcp::ServiceError) -> McpError {
        match error {
            rmcp::ServiceError::Timeout { timeout } => McpError::Timeout(timeout),
            rmcp::ServiceError::McpError(data) if super::too_large::is_answer(&data) => {
                McpError::TooLarge(self.max_response_bytes)
            }
            rmcp::ServiceError::McpError(data) => McpError::Refused(clean(&data.message, &self.secrets)),
            other => McpError::Unreachable(clean(&other.to_string(), &self.secrets)),
        }
    }

    /// Ends the session (an HTTP DELETE), without waiting long for a server that is gone.
    pub async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.service.cancel()).await;
    }
}

/// The transport's settings for `server`, and the secrets they hold — header values, the token,
/// what the URL carries beyond its path — to cut out of every error text.
fn transport_config(
    server: &McpServer,
    max_response_bytes: usize,
) -> Result<(StreamableHttpClientTransportConfig, Vec<String>), McpError> {
    let mut secrets: Vec<String> = server.headers().values().cloned().collect();
    // A query string or fragment may carry a credential (the listing's `url` hides them too).
    secrets.extend([server.url.query(), server.url.fragment()].into_iter().flatten().map(str::to_string));
    let mut headers = HashMap::new();
    for (name, value) in server.headers() {
        let header =
            http::HeaderName::try_from(name.as_str()).ok().zip(http::HeaderValue::try_from(value.as_str()).ok());
        let (name, value) = header.ok_or_else(|| McpError::BadHeader(name.clone()))?;
        headers.insert(name, value);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str())
        .custom_headers(headers)
        .max_json_response_size(max_response_bytes)
        .max_sse_event_size(max_response_bytes)
        .reinit_on_expired_session(true);
    if let Some(variable) = &server.bearer_token_env {
        let token = std::env::var(variable).map_err(|_| McpError::TokenMissing(variable.clone()))?;
        secrets.push(token.clone());
        config = config.auth_header(token);
    }
    Ok((config, secrets))
}

/// Every text in `value` with the registration's secrets cut out (not bounded: what bounds it is
/// the reader's).
fn cut_everywhere(value: &mut Value, secrets: &[String]) {
    match value {
        Value::String(text) => *text = flexrun_core::redact::cut_secrets(text, secrets, usize::MAX),
        Value::Array(items) => items.iter_mut().for_each(|item| cut_everywhere(item, secrets)),
        Value::Object(fields) => fields.values_mut().for_each(|field| cut_everywhere(field, secrets)),
        _ => {}
    }
}

/// `text` bounded, with every secret cut out.
fn clean(text: &str, secrets: &[String]) -> String {
    flexrun_core::redact::cut_secrets(text, secrets, excerpt::MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_texts_are_bounded_and_hold_no_secret() {
        let text = format!("401 for token sk-live-123 {}", "x".repeat(2000));
        let cleaned = clean(&text, &["sk-live-123".into(), "ab".into()]);
        assert!(!cleaned.contains("sk-live-123") && cleaned.contains(flexrun_core::redact::REDACTED));
        assert!(cleaned.chars().count() < 400, "{}", cleaned.len());
    }
}
