//! One session with an MCP server over Streamable HTTP, through the official SDK (`rmcp`): open
//! it (the 2026-07-28 revision when the server speaks it, else 2025-11-25's `initialize`), list
//! the tools, call one. Every request has a deadline (the SDK sets none), and every error's text
//! is bounded and cleared of the registration's secrets before anyone sees it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, Implementation,
    MetaObject, ProtocolVersion, RequestMetaObject, ServerResult, SubscriptionFilter,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, PeerRequestOptions, RoleClient};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, service::RunningService};
use serde_json::{Map, Value};
use tokio::sync::Notify;

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
}

impl Session {
    /// Opens a session with `server`; `changed` is notified whenever it says its tools changed.
    pub async fn open(
        server: &McpServer,
        http: reqwest::Client,
        max_response_bytes: usize,
        changed: Arc<Notify>,
    ) -> Result<Self, McpError> {
        let mut secrets: Vec<String> = server.headers().values().cloned().collect();
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
        let transport = StreamableHttpClientTransport::with_client(http, config);
        let handler = Handler { changed: changed.clone() };
        let mode = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        let opened = tokio::time::timeout(CONNECT_TIMEOUT, handler.serve_with_lifecycle(transport, mode)).await;
        let service = match opened {
            Err(_) => return Err(McpError::Timeout(CONNECT_TIMEOUT)),
            Ok(Err(error)) => return Err(McpError::Unreachable(clean(&error.to_string(), &secrets))),
            Ok(Ok(service)) => service,
        };
        let session = Self { service, secrets };
        session.listen_for_changes(changed).await;
        Ok(session)
    }

    /// On a 2026-07-28 session a server announces changes only to a subscription: hold one.
    async fn listen_for_changes(&self, changed: Arc<Notify>) {
        let modern =
            self.service.peer_info().is_some_and(|info| info.protocol_version == ProtocolVersion::V_2026_07_28);
        if !modern {
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

    /// Every tool the server lists, as JSON (the core reads them).
    pub async fn tools(&self, timeout: Duration) -> Result<Vec<Value>, McpError> {
        let listed = tokio::time::timeout(timeout, self.service.list_all_tools()).await;
        let tools = listed.map_err(|_| McpError::Timeout(timeout))?.map_err(|e| self.failed(e))?;
        Ok(tools.into_iter().filter_map(|tool| serde_json::to_value(tool).ok()).collect())
    }

    /// Calls `tool` with `arguments`, `meta` as the request's `_meta`; the result as JSON.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        meta: Map<String, Value>,
        timeout: Duration,
    ) -> Result<Value, McpError> {
        let mut params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let options = PeerRequestOptions::with_timeout(timeout);
        let handle = self.service.send_request_with_option(request, options).await.map_err(|e| self.failed(e))?;
        match handle.await_response().await.map_err(|e| self.failed(e))? {
            ServerResult::CallToolResult(result) => {
                serde_json::to_value(result).map_err(|e| McpError::Refused(format!("unreadable result: {e}")))
            }
            _ => Err(McpError::Refused("the answer to tools/call is not a tool result".into())),
        }
    }

    fn failed(&self, error: rmcp::ServiceError) -> McpError {
        match error {
            rmcp::ServiceError::Timeout { timeout } => McpError::Timeout(timeout),
            rmcp::ServiceError::McpError(data) => McpError::Refused(clean(&data.message, &self.secrets)),
            other => McpError::Unreachable(clean(&other.to_string(), &self.secrets)),
        }
    }

    /// Ends the session (an HTTP DELETE), without waiting long for a server that is gone.
    pub async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.service.cancel()).await;
    }
}

/// `text` bounded, with every secret cut out.
fn clean(text: &str, secrets: &[String]) -> String {
    let mut text = excerpt::excerpt(text, excerpt::MESSAGE).into_owned();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        text = text.replace(secret.as_str(), flexrun_core::redact::REDACTED);
    }
    text
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
