//! Model calls as the core sees them: why one failed ([`LlmError`]), how a prompt is kept
//! within its budget ([`prompt`]), and what every call of a kind sends written once
//! ([`written`]). The server's client makes the calls.

pub mod prompt;
pub mod route;
pub mod written;

use std::time::Duration;

/// Why a model call failed. [`LlmError::is_transient`] separates failures worth retrying from
/// ones that will not change on a second try.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    #[error("model call timed out after {0:?}")]
    Timeout(Duration),
    #[error("could not reach the model endpoint: {0}")]
    Connection(String),
    #[error("model endpoint answered {status}: {message}")]
    Status { status: u16, message: String, retry_after: Option<Duration> },
    #[error("model endpoint sent a response that is not a chat completion: {0}")]
    Protocol(String),
    #[error("model returned no content{0}")]
    Empty(String),
    #[error("invalid model request: {0}")]
    Request(String),
    #[error("model response is larger than {0} bytes")]
    TooLarge(usize),
}

impl LlmError {
    /// How long the endpoint asked to wait before trying again (`Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// What kind of failure this is, as the metrics label it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Timeout(_) => "timeout",
            Self::Connection(_) => "connection",
            Self::Status { .. } => "status",
            Self::Protocol(_) => "protocol",
            Self::Empty(_) => "empty",
            Self::Request(_) => "request",
            Self::TooLarge(_) => "too_large",
        }
    }

    /// Timeouts, connection errors, 408, 429 and 5xx: the same call may succeed later.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Timeout(_) | Self::Connection(_) => true,
            Self::Status { status, .. } => matches!(status, 408 | 429) || *status >= 500,
            Self::Protocol(_) | Self::Empty(_) | Self::Request(_) | Self::TooLarge(_) => false,
        }
    }
}
