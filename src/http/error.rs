//! The one place errors become HTTP responses: `{"error": {"code", "message", "details"}}`.

use actix_web::http::{StatusCode, header};
use actix_web::{HttpResponse, ResponseError};
use serde_json::{Value, json};

use crate::capability::RegistryError;
use crate::envelope::EnvelopeError;
use crate::error_code::ErrorCode;
use crate::excerpt;
use crate::mcp::McpRegistryError;
use crate::run::fork::ForkError;
use crate::run::{ControlError, StartError};
use crate::store::StoreError;
use crate::thread::ThreadError;
use crate::validation::FieldError;

/// An error as a client is told it. Its [`ErrorCode`] decides the response's status; a variant
/// of its own is kept only where it carries something a coded message does not: a header, a
/// closed connection, a fixed message, a reference to the log.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A refusal whose message says, for this request, what `code` means; `details` list the
    /// problems of a body, each with its JSON Pointer, when there are several.
    #[error("{message}")]
    Refused { code: ErrorCode, message: String, details: Vec<FieldError> },
    #[error("missing credentials: send `Authorization: Bearer <key>`")]
    Unauthenticated,
    #[error("the API key is not valid")]
    InvalidKey,
    #[error("this action needs an operator key")]
    Forbidden,
    /// A browser session's request that changes something, from another site's page.
    #[error("this request did not come from flexrun's own pages")]
    CrossSite,
    /// A path some endpoint has, with a method none of them takes; `allow` lists those they do.
    #[error("this endpoint does not take {method}: use {allow}")]
    MethodNotAllowed { method: String, allow: String },
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("the request body did not arrive within {secs} s")]
    BodyTimeout { secs: u64 },
    #[error("too many request bodies are being uploaded at once; try again shortly")]
    TooManyBodies,
    #[error("send the request body as `Content-Type: {expected}`")]
    UnsupportedMediaType { expected: &'static str },
    /// The request names a host this server does not answer to (a DNS rebinding attempt, or a
    /// name missing from `http.allowed_hosts`).
    #[error("this server does not answer to the host {host:?}; list it in `http.allowed_hosts` to allow it")]
    MisdirectedHost { host: String },
    /// The database could not be reached in time (it restarts, say): nothing was done.
    #[error("the database cannot be reached right now; try again shortly")]
    Unavailable,
    #[error("internal error (reference {reference})")]
    Internal { reference: String },
}

impl ApiError {
    /// A refusal with `code`, told as `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::Refused { code, message: message.into(), details: Vec::new() }
    }

    /// "{what} not found", with `code` (a 404 one) saying what kind of thing is missing.
    pub fn not_found(code: ErrorCode, what: impl std::fmt::Display) -> Self {
        Self::new(code, format!("{what} not found"))
    }

    /// A refusal of `what` for these problems, the first of them in the message.
    fn listed(code: ErrorCode, what: &str, details: Vec<FieldError>) -> Self {
        Self::Refused { code, message: summary(what, &details), details }
    }

    /// 400 `invalid_envelope` for an envelope with these problems beyond its schema's.
    pub fn invalid_envelope(details: Vec<FieldError>) -> Self {
        Self::from(EnvelopeError::Invalid(details))
    }

    /// 400 `invalid_request` for a body with these field problems.
    pub fn invalid_request(details: Vec<FieldError>) -> Self {
        Self::listed(ErrorCode::InvalidRequest, "invalid request body", details)
    }

    fn code(&self) -> ErrorCode {
        match self {
            Self::Refused { code, .. } => *code,
            Self::Unauthenticated => ErrorCode::Unauthenticated,
            Self::InvalidKey => ErrorCode::InvalidApiKey,
            Self::Forbidden => ErrorCode::Forbidden,
            Self::CrossSite => ErrorCode::CrossSiteRequest,
            Self::MethodNotAllowed { .. } => ErrorCode::MethodNotAllowed,
            Self::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            Self::BodyTimeout { .. } => ErrorCode::BodyTimeout,
            Self::TooManyBodies => ErrorCode::TooManyUploads,
            Self::UnsupportedMediaType { .. } => ErrorCode::UnsupportedMediaType,
            Self::MisdirectedHost { .. } => ErrorCode::HostNotAllowed,
            Self::Unavailable => ErrorCode::DatabaseUnavailable,
            Self::Internal { .. } => ErrorCode::InternalError,
        }
    }

    /// The first [`MAX_DETAILS`] problems, each bounded, then one saying how many more there
    /// are: a body of a million mistakes gets an answer of a few KiB.
    fn details(&self) -> Value {
        let Self::Refused { details, .. } = self else { return json!([]) };
        let mut shown: Vec<Value> = details.iter().take(MAX_DETAILS).map(bounded_detail).collect();
        if details.len() > MAX_DETAILS {
            let more = details.len() - MAX_DETAILS;
            shown.push(json!({"path": "", "code": "more_errors", "message": format!("and {more} more problems")}));
        }
        Value::Array(shown)
    }

    /// Logs an unexpected error (bounded) and hides it behind a reference the operator can find
    /// in the log.
    pub fn internal(error: impl std::fmt::Display) -> Self {
        let reference = uuid::Uuid::now_v7().to_string();
        tracing::error!(%reference, error = %excerpt::log(error), "request failed");
        Self::Internal { reference }
    }
}

impl ResponseError for ApiError {
    /// The code's status ([`ErrorCode::status`]); every code has a valid one (a core test says
    /// so), so the fallback is never taken.
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code().status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let message = excerpt::Excerpt(self, excerpt::MESSAGE).to_string();
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::TooManyBodies => response.insert_header((header::RETRY_AFTER, "1")),
            Self::Unavailable => response.insert_header((header::RETRY_AFTER, "5")),
            Self::MethodNotAllowed { allow, .. } => response.insert_header((header::ALLOW, allow.as_str())),
            _ => &mut response,
        };
        // A body left unread: the connection is closed rather than kept to drain it.
        if matches!(self, Self::TooManyBodies | Self::BodyTimeout { .. } | Self::PayloadTooLarge { .. }) {
            response.force_close();
        }
        response.json(json!({
            "error": {"code": self.code().as_str(), "message": message, "details": self.details()}
        }))
    }
}

impl From<EnvelopeError> for ApiError {
    fn from(error: EnvelopeError) -> Self {
        match error {
            EnvelopeError::NotJson(message) => {
                Self::new(ErrorCode::InvalidJson, format!("request body is not valid JSON: {message}"))
            }
            EnvelopeError::Invalid(details) => {
                Self::listed(ErrorCode::InvalidEnvelope, "invalid task envelope", details)
            }
            EnvelopeError::InvalidConditionDsl(details) => {
                Self::listed(ErrorCode::InvalidConditionDsl, "invalid condition expression", details)
            }
        }
    }
}

impl From<RegistryError> for ApiError {
    fn from(error: RegistryError) -> Self {
        match error {
            RegistryError::Invalid(details) => {
                Self::listed(ErrorCode::InvalidCapability, "invalid capability registration", details)
            }
            RegistryError::NotRegistered(id) => Self::new(
                ErrorCode::CapabilityNotFound,
                format!("no capability {} is registered", excerpt::excerpt(&id, 200)),
            ),
            error @ RegistryError::OfMcpServer { .. } => Self::new(
                ErrorCode::CapabilityOfMcpServer,
                format!("{}: remove it from the server, or the server from flexrun", excerpt::log(&error)),
            ),
            other => Self::internal(other),
        }
    }
}

impl From<McpRegistryError> for ApiError {
    fn from(error: McpRegistryError) -> Self {
        match error {
            McpRegistryError::Invalid(details) => {
                Self::listed(ErrorCode::InvalidMcpServer, "invalid MCP server registration", details)
            }
            McpRegistryError::Store(error) => error.into(),
        }
    }
}

impl From<StartError> for ApiError {
    fn from(error: StartError) -> Self {
        match error {
            StartError::KeyReused { .. } => Self::new(ErrorCode::IdempotencyKeyReused, error.to_string()),
            StartError::Store(error) => error.into(),
            StartError::Envelope(error) => error.into(),
        }
    }
}

impl From<ForkError> for ApiError {
    fn from(error: ForkError) -> Self {
        match error {
            ForkError::Refused(details) => Self::invalid_request(details),
            ForkError::Start(error) => error.into(),
            ForkError::Unreadable(error) => Self::internal(error),
            ForkError::Store(error) => error.into(),
        }
    }
}

impl From<ControlError> for ApiError {
    fn from(error: ControlError) -> Self {
        match error {
            ControlError::Refused(refusal) => Self::new(refusal.code(), refusal.to_string()),
            ControlError::Store(StoreError::Conflict(message)) => Self::new(ErrorCode::Conflict, message),
            ControlError::Store(error @ StoreError::Fenced(_)) => Self::new(ErrorCode::RunBusy, error.to_string()),
            ControlError::Store(error) => error.into(),
            ControlError::Unreadable(error) => Self::internal(error),
        }
    }
}

impl From<ThreadError> for ApiError {
    fn from(error: ThreadError) -> Self {
        match error {
            ThreadError::NotFound(id) => {
                Self::not_found(ErrorCode::ThreadNotFound, format!("thread {}", excerpt::excerpt(&id, 80)))
            }
            ThreadError::InUse(id) => {
                Self::new(ErrorCode::ThreadExists, format!("thread {} already exists", excerpt::excerpt(&id, 80)))
            }
            ThreadError::Store(error) => error.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::ThreadBusy(id) => Self::new(
                ErrorCode::ThreadBusy,
                format!(
                    "thread {} has a run in progress; wait for it, or join it (multitask_strategy: reject)",
                    excerpt::excerpt(&id, 80)
                ),
            ),
            StoreError::ThreadNotFound(id) => ThreadError::NotFound(id).into(),
            StoreError::Connection(error) => {
                tracing::warn!(error = %excerpt::log(error), "request refused: the database cannot be reached");
                Self::Unavailable
            }
            error => Self::internal(error),
        }
    }
}

/// Problems listed in an error response; the rest are counted.
const MAX_DETAILS: usize = 20;

/// One problem as an error response shows it: its path and message bounded.
fn bounded_detail(detail: &FieldError) -> Value {
    let mut value = json!({
        "path": excerpt::excerpt(&detail.path, excerpt::MESSAGE),
        "code": excerpt::excerpt(&detail.code, 64),
        "message": excerpt::excerpt(&detail.message, excerpt::MESSAGE),
    });
    if let Some(range) = &detail.range {
        value["range"] = json!(range);
    }
    value
}

/// "invalid task envelope: /objective: `objective` is required (and 2 more)".
fn summary(what: &str, details: &[FieldError]) -> String {
    match details {
        [] => what.to_string(),
        [only] => format!("{what}: {}: {}", display_path(&only.path), only.message),
        [first, rest @ ..] => {
            format!("{what}: {}: {} (and {} more)", display_path(&first.path), first.message, rest.len())
        }
    }
}

fn display_path(path: &str) -> &str {
    if path.is_empty() { "(body)" } else { path }
}
