//! The one place errors become HTTP responses: `{"error": {"code", "message", "details"}}`.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde_json::{Value, json};

use crate::capability::RegistryError;
use crate::envelope::EnvelopeError;
use crate::excerpt;
use crate::run::decide::operator::Refusal;
use crate::run::{ControlError, StartError};
use crate::store::StoreError;
use crate::thread::ThreadError;
use crate::validation::FieldError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest { code: &'static str, message: String, details: Vec<FieldError> },
    #[error("missing credentials: send `Authorization: Bearer <key>`")]
    Unauthenticated,
    #[error("the API key is not valid")]
    InvalidKey,
    #[error("this action needs an operator key")]
    Forbidden,
    /// A browser session's request that changes something, from another site's page.
    #[error("this request did not come from flexrun's own pages")]
    CrossSite,
    #[error("{what} not found")]
    NotFound { code: &'static str, what: String },
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
    /// The resource is not in a state that allows the request.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// Well-formed, but it contradicts what the server already holds.
    #[error("{message}")]
    Unprocessable { code: &'static str, message: String },
    /// The database could not be reached in time (it restarts, say): nothing was done.
    #[error("the database cannot be reached right now; try again shortly")]
    Unavailable,
    #[error("internal error (reference {reference})")]
    Internal { reference: String },
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest { code, message: message.into(), details: Vec::new() }
    }

    /// 400 `invalid_envelope` for an envelope with these problems beyond its schema's.
    pub fn invalid_envelope(details: Vec<FieldError>) -> Self {
        Self::from(EnvelopeError::Invalid(details))
    }

    /// 400 `invalid_request` for a body with these field problems.
    pub fn invalid_request(details: Vec<FieldError>) -> Self {
        Self::BadRequest { code: "invalid_request", message: summary("invalid request body", &details), details }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::BadRequest { code, .. }
            | Self::NotFound { code, .. }
            | Self::Conflict { code, .. }
            | Self::Unprocessable { code, .. } => code,
            Self::Unauthenticated => "unauthenticated",
            Self::InvalidKey => "invalid_api_key",
            Self::Forbidden => "forbidden",
            Self::CrossSite => "cross_site_request",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::BodyTimeout { .. } => "body_timeout",
            Self::TooManyBodies => "too_many_uploads",
            Self::UnsupportedMediaType { .. } => "unsupported_media_type",
            Self::MisdirectedHost { .. } => "host_not_allowed",
            Self::Unavailable => "database_unavailable",
            Self::Internal { .. } => "internal_error",
        }
    }

    /// The first [`MAX_DETAILS`] problems, each bounded, then one saying how many more there
    /// are: a body of a million mistakes gets an answer of a few KiB.
    fn details(&self) -> Value {
        let Self::BadRequest { details, .. } = self else { return json!([]) };
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
    fn status_code(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthenticated | Self::InvalidKey => StatusCode::UNAUTHORIZED,
            Self::Forbidden | Self::CrossSite => StatusCode::FORBIDDEN,
            Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::MisdirectedHost { .. } => StatusCode::MISDIRECTED_REQUEST,
            Self::TooManyBodies | Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Conflict { .. } => StatusCode::CONFLICT,
            Self::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let message = excerpt::Excerpt(self, excerpt::MESSAGE).to_string();
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::TooManyBodies => response.insert_header((actix_web::http::header::RETRY_AFTER, "1")),
            Self::Unavailable => response.insert_header((actix_web::http::header::RETRY_AFTER, "5")),
            _ => &mut response,
        };
        // A body left unread: the connection is closed rather than kept to drain it.
        if matches!(self, Self::TooManyBodies | Self::BodyTimeout { .. } | Self::PayloadTooLarge { .. }) {
            response.force_close();
        }
        response.json(json!({
            "error": {"code": self.code(), "message": message, "details": self.details()}
        }))
    }
}

impl From<EnvelopeError> for ApiError {
    fn from(error: EnvelopeError) -> Self {
        match error {
            EnvelopeError::NotJson(message) => {
                Self::bad_request("invalid_json", format!("request body is not valid JSON: {message}"))
            }
            EnvelopeError::Invalid(details) => Self::BadRequest {
                code: "invalid_envelope",
                message: summary("invalid task envelope", &details),
                details,
            },
            EnvelopeError::InvalidConditionDsl(details) => Self::BadRequest {
                code: "invalid_condition_dsl",
                message: summary("invalid condition expression", &details),
                details,
            },
        }
    }
}

impl From<RegistryError> for ApiError {
    fn from(error: RegistryError) -> Self {
        match error {
            RegistryError::Invalid(details) => Self::BadRequest {
                code: "invalid_capability",
                message: summary("invalid capability registration", &details),
                details,
            },
            other => Self::internal(other),
        }
    }
}

impl From<StartError> for ApiError {
    fn from(error: StartError) -> Self {
        match error {
            StartError::KeyReused { .. } => {
                Self::Unprocessable { code: "idempotency_key_reused", message: error.to_string() }
            }
            StartError::Store(error) => error.into(),
        }
    }
}

impl From<ControlError> for ApiError {
    fn from(error: ControlError) -> Self {
        let refusal = match error {
            ControlError::Refused(refusal) => refusal,
            ControlError::Store(StoreError::Conflict(message)) => return Self::Conflict { code: "conflict", message },
            ControlError::Store(error @ StoreError::Fenced(_)) => {
                return Self::Conflict { code: "run_busy", message: error.to_string() };
            }
            ControlError::Store(error) => return error.into(),
            ControlError::Unreadable(error) => return Self::internal(error),
        };
        let message = refusal.to_string();
        match refusal {
            Refusal::NotFound(run_id) => Self::NotFound { code: "run_not_found", what: format!("run {run_id}") },
            Refusal::InvalidState { .. } => Self::Conflict { code: "invalid_run_state", message },
            Refusal::StalePlanVersion { .. } => Self::Conflict { code: "stale_plan_version", message },
            Refusal::StaleRequest { .. } => Self::Conflict { code: "stale_request", message },
            Refusal::PlanningInProgress => Self::Conflict { code: "replan_in_progress", message },
            Refusal::Mismatch { code, .. } => Self::bad_request(code, message),
            Refusal::ReplanLimit { .. } => Self::Unprocessable { code: "replan_limit", message },
            Refusal::NotWaiting { .. } => Self::Unprocessable { code: "invalid_run_state", message },
            Refusal::Busy(_) => Self::Conflict { code: "run_busy", message },
        }
    }
}

impl From<ThreadError> for ApiError {
    fn from(error: ThreadError) -> Self {
        match error {
            ThreadError::NotFound(id) => {
                Self::NotFound { code: "thread_not_found", what: format!("thread {}", excerpt::excerpt(&id, 80)) }
            }
            ThreadError::InUse(id) => Self::Conflict {
                code: "thread_exists",
                message: format!("thread {} already exists", excerpt::excerpt(&id, 80)),
            },
            ThreadError::Store(error) => error.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::ThreadBusy(id) => Self::Conflict {
                code: "thread_busy",
                message: format!(
                    "thread {} has a run in progress; wait for it, or join it (multitask_strategy: reject)",
                    excerpt::excerpt(&id, 80)
                ),
            },
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
pub(super) fn summary(what: &str, details: &[FieldError]) -> String {
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
