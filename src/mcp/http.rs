//! The HTTP client under flexrun's MCP sessions (the SDK's Streamable HTTP transport is generic
//! over it): flexrun's own `reqwest` client, which reads every answer to a `POST` itself, within
//! the response limit (`limits.max_capability_response_bytes`, handed down by the transport as
//! [`StreamableHttpResponseLimits`]).
//!
//! Why not the SDK's client for `reqwest`: it stops at the limit too, but with an error the
//! caller cannot tell from a lost connection — of a streamed (SSE) answer the transport only logs
//! it and the request ends as "transport closed"; of a JSON body it is a failure to send. Either
//! reads as "could not reach the server": retried, and a tool with side effects runs again.
//! Here an answer over the limit to a request is answered in its place by
//! [`super::too_large::answer`], which the session reports as a response too large: the step
//! fails as an `http` capability's does, without a retry, and the session stays open (only the
//! connection that carried the answer is dropped). Nothing of the answer is kept beyond the
//! limit, nor quoted in an error.
//!
//! The rest mirrors the SDK's client for `reqwest` 3.11, which a `GET` stream (notifications, a
//! resumed answer) and a session's `DELETE` still go through: status codes, session expiry, the
//! fallback of a server that refuses `server/discover` to `initialize`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use http::header::{ACCEPT, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ErrorData, RequestId, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::{EVENT_STREAM_MIME_TYPE, HEADER_SESSION_ID, JSON_MIME_TYPE};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, SseError, StreamableHttpClient, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;

type Failed = StreamableHttpError<reqwest::Error>;

/// Headers the transport sets itself: a registration cannot send its own (as the SDK's client).
const RESERVED_HEADERS: [&str; 3] = ["accept", "mcp-session-id", "last-event-id"];

/// Longest `Retry-After` value kept (the SDK's bound).
const MAX_RETRY_AFTER_BYTES: usize = 128;

/// Streamable HTTP over flexrun's `reqwest` client, reading answers within the response limit.
#[derive(Clone)]
pub struct McpHttp {
    http: reqwest::Client,
}

impl McpHttp {
    pub fn new(http: reqwest::Client) -> Self {
        Self { http }
    }
}

impl StreamableHttpClient for McpHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits).await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits).await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        let mut request =
            self.http.post(uri.as_ref()).header(ACCEPT, format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"));
        if let Some(token) = auth_header {
            request = request.bearer_auth(token);
        }
        for (name, value) in custom_headers {
            if RESERVED_HEADERS.iter().any(|reserved| name.as_str().eq_ignore_ascii_case(reserved)) {
                return Err(StreamableHttpError::ReservedHeaderConflict(name.to_string()));
            }
            request = request.header(name, value);
        }
        let session_was_attached = session_id.is_some();
        if let Some(session_id) = session_id {
            request = request.header(HEADER_SESSION_ID, session_id.as_ref());
        }
        let response = request.json(&message).send().await.map_err(client_error)?;
        let answer = Answer { message: &message, session_was_attached, limits };
        answer.read(response).await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Failed> {
        self.http.delete_session(uri, session_id, auth_header, custom_headers).await.map_err(without_url)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failed> {
        self.http.get_stream(uri, session_id, last_event_id, auth_header, custom_headers).await.map_err(without_url)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failed> {
        let http = &self.http;
        http.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        )
        .await
        .map_err(without_url)
    }
}

/// The answer to one `POST` of `message`, read.
struct Answer<'a> {
    message: &'a ClientJsonRpcMessage,
    session_was_attached: bool,
    limits: StreamableHttpResponseLimits,
}

impl Answer<'_> {
    async fn read(&self, response: reqwest::Response) -> Result<StreamableHttpPostResponse, Failed> {
        let status = response.status();
        let headers = response.headers();
        if let Some(challenge) = headers.get(WWW_AUTHENTICATE).filter(|_| status == StatusCode::UNAUTHORIZED) {
            return Err(StreamableHttpError::AuthRequired(AuthRequiredError::new(challenge_text(challenge)?)));
        }
        if let Some(challenge) = headers.get(WWW_AUTHENTICATE).filter(|_| status == StatusCode::FORBIDDEN) {
            // flexrun asks for no scope: none is read out of the challenge.
            return Err(StreamableHttpError::InsufficientScope(InsufficientScopeError::new(
                challenge_text(challenge)?,
                None,
            )));
        }
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && self.session_was_attached {
            return Err(StreamableHttpError::SessionExpired);
        }
        let content_type =
            headers.get(CONTENT_TYPE).map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        let is = |mime: &str| content_type.as_deref().is_some_and(|value| media_type_is(value, mime));
        let (is_json, is_sse) = (is(JSON_MIME_TYPE), is(EVENT_STREAM_MIME_TYPE));
        // A rate limit, or a server failure that is not JSON, says all in its status; a JSON one
        // may hold a JSON-RPC error, read below.
        let status_error = status_error(status, headers);
        if let Some(error) = status_error.as_ref().filter(|_| !is_json || status == StatusCode::TOO_MANY_REQUESTS) {
            return Err(HttpStatusError::new(error.status, error.retry_after.clone()).into());
        }
        let session_id = headers.get(HEADER_SESSION_ID).and_then(|v| v.to_str().ok()).map(str::to_string);
        // Spec: 202 for a POST of notifications or responses; some servers answer an empty 200.
        if status.is_success() && response.content_length() == Some(0) && self.awaits_no_answer() {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if !status.is_success() {
            return self.refused(response, status, is_json, status_error, session_id).await;
        }
        if is_sse {
            let events = super::sse::events(response.bytes_stream(), self.limits.max_sse_event_size, self.request());
            return Ok(StreamableHttpPostResponse::Sse(events, session_id));
        }
        if is_json {
            let Some(body) = within(response, self.limits.max_json_response_size).await? else {
                return self.too_large(self.limits.max_json_response_size, session_id);
            };
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                Ok(parsed) => Ok(StreamableHttpPostResponse::Json(parsed, session_id)),
                Err(_) if self.awaits_no_answer() => Ok(StreamableHttpPostResponse::Accepted),
                Err(error) => Err(StreamableHttpError::UnexpectedServerResponse(
                    format!("the answer is not a JSON-RPC message: {error}").into(),
                )),
            };
        }
        if self.awaits_no_answer() {
            // Nothing in the body is needed: any 2xx will do, whatever its type.
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        Err(StreamableHttpError::UnexpectedContentType(content_type))
    }

    /// A status other than 2xx: the JSON-RPC error the body holds, or why the request failed.
    async fn refused(
        &self,
        response: reqwest::Response,
        status: StatusCode,
        is_json: bool,
        status_error: Option<HttpStatusError>,
        session_id: Option<String>,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        // A 401 or 403 without a challenge keeps its status, never passing as a JSON-RPC error.
        let auth_failure = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
        let diagnostic = if is_json && !auth_failure {
            match within(response, self.limits.max_json_response_size).await {
                Ok(Some(body)) => {
                    let text = String::from_utf8_lossy(&body);
                    if let Ok(error @ ServerJsonRpcMessage::Error(_)) = serde_json::from_str(&text) {
                        // The discover fallback first: it gives the error the request's id.
                        if let Some(answer) = self.refused_discover(status, &text) {
                            return Ok(answer);
                        }
                        return Ok(StreamableHttpPostResponse::Json(error, session_id));
                    }
                    prefix(&text, self.limits.max_error_response_size)
                }
                Ok(None) => match status_error {
                    Some(error) => return Err(error.into()),
                    None => return self.too_large(self.limits.max_json_response_size, session_id),
                },
                Err(_) => "<failed to read response body>".to_string(),
            }
        } else {
            let body = truncated(response, self.limits.max_error_response_size).await;
            body.map_or_else(|_| "<failed to read response body>".to_string(), |b| String::from_utf8_lossy(&b).into())
        };
        if let Some(answer) = self.refused_discover(status, &diagnostic) {
            return Ok(answer);
        }
        if let Some(error) = status_error {
            return Err(error.into());
        }
        Err(StreamableHttpError::UnexpectedServerResponse(format!("HTTP {status}: {diagnostic}").into()))
    }

    /// A 2025-11-25 server refusing `server/discover` (sent without a session) with a client
    /// error other than 401 and 403: its JSON-RPC error, else an `invalid_request` made of the
    /// status and body, answering the discover request's id — such servers cannot echo it — so
    /// that the SDK's lifecycle falls back to `initialize` (as the SDK's own client does).
    fn refused_discover(&self, status: StatusCode, body: &str) -> Option<StreamableHttpPostResponse> {
        let auth_failure = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
        if self.session_was_attached || !status.is_client_error() || auth_failure {
            return None;
        }
        let ClientJsonRpcMessage::Request(request) = self.message else { return None };
        if !matches!(request.request, ClientRequest::DiscoverRequest(_)) {
            return None;
        }
        let error = match serde_json::from_str::<ServerJsonRpcMessage>(body) {
            Ok(ServerJsonRpcMessage::Error(error)) => error.error,
            _ => ErrorData::invalid_request(format!("server/discover rejected with HTTP {status}: {body}"), None),
        };
        let answer = ServerJsonRpcMessage::error(error, Some(request.id.clone()));
        Some(StreamableHttpPostResponse::Json(answer, None))
    }

    /// A body longer than `limit`: the request it answers is answered with
    /// [`super::too_large::answer`]; a POST that awaits no answer fails as the SDK's would.
    fn too_large(&self, limit: usize, session_id: Option<String>) -> Result<StreamableHttpPostResponse, Failed> {
        match self.request() {
            Some(id) => Ok(StreamableHttpPostResponse::Json(super::too_large::answer(id, limit), session_id)),
            None => Err(StreamableHttpError::ResponseBodyTooLarge { max_size: limit }),
        }
    }

    /// The id of the request posted, when it is one.
    fn request(&self) -> Option<RequestId> {
        match self.message {
            ClientJsonRpcMessage::Request(request) => Some(request.id.clone()),
            _ => None,
        }
    }

    /// A POST of notifications, responses or errors: no request waits for its answer.
    fn awaits_no_answer(&self) -> bool {
        !matches!(self.message, ClientJsonRpcMessage::Request(_))
    }
}

/// A failure of the HTTP client, without the URL its text would name: a registration's URL may
/// carry a credential in its query string, and these texts reach callers (a server's state, a
/// step's error). The `http` capability's and the model client's errors leave it out too.
fn client_error(error: reqwest::Error) -> Failed {
    StreamableHttpError::Client(error.without_url())
}

/// A failure of the SDK's own requests (a `GET` stream, a `DELETE`), without the URL.
fn without_url(error: Failed) -> Failed {
    match error {
        StreamableHttpError::Client(error) => client_error(error),
        other => other,
    }
}

/// The body of `response`, or `None` when it is longer than `limit` bytes: then it is read no
/// further (not at all when its length says so).
async fn within(mut response: reqwest::Response, limit: usize) -> Result<Option<Vec<u8>>, Failed> {
    if response.content_length().is_some_and(|length| usize::try_from(length).map_or(true, |length| length > limit)) {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(client_error)? {
        if chunk.len() > limit.saturating_sub(body.len()) {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// At most the first `limit` bytes of the body of `response` (a diagnostic need not be whole).
async fn truncated(response: reqwest::Response, limit: usize) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while body.len() < limit {
        let Some(chunk) = chunks.next().await.transpose()? else { break };
        let room = limit.saturating_sub(body.len()).min(chunk.len());
        body.extend_from_slice(&chunk[..room]);
    }
    Ok(body)
}

/// At most the first `limit` bytes of `text`, cut at a character boundary.
fn prefix(text: &str, limit: usize) -> String {
    let mut end = limit.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// A rate limit (429) or a server failure (5xx), with its `Retry-After` when short enough.
fn status_error(status: StatusCode, headers: &HeaderMap) -> Option<HttpStatusError> {
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let retry_after = headers
        .get(RETRY_AFTER)
        .filter(|value| value.as_bytes().len() <= MAX_RETRY_AFTER_BYTES)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    Some(HttpStatusError::new(status.as_u16(), retry_after))
}

fn challenge_text(value: &HeaderValue) -> Result<String, Failed> {
    let text = value.to_str().map_err(|_| {
        StreamableHttpError::UnexpectedServerResponse(Cow::from("invalid www-authenticate header value"))
    })?;
    Ok(text.to_string())
}

/// Whether a `Content-Type` value names `mime`, whatever its case and parameters.
fn media_type_is(value: &str, mime: &str) -> bool {
    value.split(';').next().is_some_and(|essence| essence.trim().eq_ignore_ascii_case(mime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_are_compared_without_case_or_parameters() {
        assert!(media_type_is("Application/JSON; charset=utf-8", JSON_MIME_TYPE));
        assert!(!media_type_is("application/json-seq", JSON_MIME_TYPE));
    }

    #[test]
    fn a_prefix_is_cut_at_a_character_boundary() {
        assert_eq!(prefix("aé", 2), "a");
        assert_eq!(prefix("abc", 10), "abc");
    }
}
