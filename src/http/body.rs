//! Request bodies, read whole and bounded three ways: in size (`limits.max_body_bytes`, else a JSON
//! 413), in time (`limits.body_read_timeout_secs`, else 408) and in how many are read at once
//! (`limits.max_concurrent_body_reads`, else 503 with `Retry-After`).
//!
//! Without the last two, a client that starts many uploads and stalls each of them keeps a
//! body buffer per upload alive for as long as it likes. With them, memory spent on bodies is at
//! most `max_concurrent_body_reads × max_body_bytes`, and a stalled upload is let go after the
//! deadline. Every endpoint that takes a body takes it through [`Body`] — but the console's
//! sign-in form, whose body is read before any key is checked: it takes [`SignInBody`], read
//! through a small pool of its own, so that stalled sign-ins from anyone cannot take the permits
//! callers' uploads need.
//!
//! A body is read as JSON only when it was sent as JSON (`Content-Type: application/json`, or a
//! `+json` type): a web page can post `text/plain` or a form to any address without asking, but
//! not JSON, so this keeps another site's page from starting runs in a user's browser even where
//! no key is needed (`super::site` refuses such requests by their `Origin` first).

use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, web};
use futures::StreamExt;
use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::error::ApiError;
use crate::config::Limits;
use crate::error_code::ErrorCode;
use crate::excerpt;
use crate::validation::{self, BodySchema};

/// Sign-in forms read at once; more wait for none of callers' permits but get 503.
const SIGN_IN_READS: usize = 8;
/// A sign-in form's largest body: a key and a console address fit in far less.
const SIGN_IN_BYTES: usize = 8 * 1024;
/// How long a sign-in form may take to arrive.
const SIGN_IN_DEADLINE: Duration = Duration::from_secs(10);

/// How bodies are read: the three bounds, shared by every worker of the server — for callers'
/// uploads, and tighter for sign-in forms.
#[derive(Clone)]
pub struct BodyReads {
    uploads: Reads,
    sign_ins: Reads,
}

impl BodyReads {
    pub fn new(limits: &Limits) -> Self {
        let deadline = Duration::from_secs(limits.body_read_timeout_secs);
        Self {
            uploads: Reads::new(limits.max_concurrent_body_reads, limits.max_body_bytes, deadline),
            sign_ins: Reads::new(
                SIGN_IN_READS,
                SIGN_IN_BYTES.min(limits.max_body_bytes),
                SIGN_IN_DEADLINE.min(deadline),
            ),
        }
    }
}

/// One pool of body reads: how many at once, how large, how long.
#[derive(Clone)]
struct Reads {
    permits: Arc<Semaphore>,
    limit: usize,
    deadline: Duration,
}

impl Reads {
    fn new(at_once: usize, limit: usize, deadline: Duration) -> Self {
        Self { permits: Arc::new(Semaphore::new(at_once)), limit, deadline }
    }

    /// Reads a body that announced `length` bytes (if it did).
    async fn read(&self, payload: Payload, length: Option<usize>) -> Result<web::Bytes, ApiError> {
        if length.is_some_and(|length| length > self.limit) {
            return Err(ApiError::PayloadTooLarge { limit: self.limit });
        }
        // Refused rather than queued: a queue of stalled uploads is what the bound is against.
        let Ok(_permit) = self.permits.try_acquire() else { return Err(ApiError::TooManyBodies) };
        let secs = self.deadline.as_secs();
        tokio::time::timeout(self.deadline, read_limited(payload, self.limit, length.unwrap_or(0)))
            .await
            .unwrap_or(Err(ApiError::BodyTimeout { secs }))
    }
}

/// Reads at most `limit` bytes; `expected` (what the client announced) sizes the buffer once,
/// rather than letting it double past the limit as chunks arrive.
async fn read_limited(mut payload: Payload, limit: usize, expected: usize) -> Result<web::Bytes, ApiError> {
    let mut body = web::BytesMut::with_capacity(expected);
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::new(ErrorCode::InvalidBody, format!("could not read the request body: {}", excerpt::log(e)))
        })?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// A request body read through the server's [`BodyReads`], with the media type it was sent as.
pub struct Body {
    bytes: web::Bytes,
    media: Media,
}

/// What `Content-Type` says a body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Media {
    Json,
    Form,
    /// Another type, or none.
    Other,
}

impl Media {
    fn of(request: &HttpRequest) -> Self {
        let Some(value) = request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
            return Self::Other;
        };
        let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        if essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json")) {
            Self::Json
        } else if essence == "application/x-www-form-urlencoded" {
            Self::Form
        } else {
            Self::Other
        }
    }
}

impl Body {
    /// The body's bytes, if it was sent as JSON (or is empty): 415 otherwise.
    pub fn json_bytes(&self) -> Result<&[u8], ApiError> {
        if self.media == Media::Json || self.is_blank() {
            Ok(&self.bytes)
        } else {
            Err(ApiError::UnsupportedMediaType { expected: "application/json" })
        }
    }

    /// The body as `T`: 415 if it was not sent as JSON, 400 `invalid_json` if it is not JSON,
    /// `invalid_request` if it is JSON of the wrong shape — with the pointer of the field at fault
    /// ([`validation::decode`]) — or holds U+0000 ([`validation::refuse_nul`]).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        let value: Value = serde_json::from_slice(self.json_bytes()?)
            .map_err(|e| ApiError::new(ErrorCode::InvalidJson, format!("request body is not valid JSON: {e}")))?;
        validation::refuse_nul(&value).map_err(|e| ApiError::invalid_request(vec![e]))?;
        serde_json::from_value(value).or_else(|_| {
            // Read again — it is JSON, read above — the way that names the field at fault (and takes
            // `2.0` for an integer, as the schemas do); a body that reads at once is read once.
            let value: Value = serde_json::from_slice(&self.bytes).unwrap_or_default();
            validation::decode(&value, "").map_err(|e| ApiError::invalid_request(vec![e]))
        })
    }

    /// The body as JSON its `schema` accepts (an empty body is `{}`), problems answered as
    /// [`Body::json`]'s and the schema's pointers; whole numbers written as `2.0` read as `2`, so
    /// a handler reading an integer the schema let through gets it ([`validation::integral_numbers`]).
    pub fn checked(&self, schema: &BodySchema) -> Result<Value, ApiError> {
        let value: Value = if self.is_blank() { Value::Object(Default::default()) } else { self.json()? };
        let details = schema.check(&value);
        if !details.is_empty() {
            return Err(ApiError::invalid_request(details));
        }
        Ok(validation::integral_numbers(value))
    }

    /// The fields of a form (`application/x-www-form-urlencoded`): 415 for another type.
    pub fn form(&self) -> Result<Vec<(String, String)>, ApiError> {
        if self.media != Media::Form {
            return Err(ApiError::UnsupportedMediaType { expected: "application/x-www-form-urlencoded" });
        }
        Ok(url::form_urlencoded::parse(&self.bytes).into_owned().collect())
    }

    /// Whether the body is empty or only white space.
    pub fn is_blank(&self) -> bool {
        self.bytes.iter().all(u8::is_ascii_whitespace)
    }
}

impl FromRequest for Body {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(request: &HttpRequest, payload: &mut Payload) -> Self::Future {
        read_body(request, payload, |reads| &reads.uploads)
    }
}

/// The body of the console's sign-in form, read through the sign-in pool (see the module docs).
pub struct SignInBody(pub Body);

impl FromRequest for SignInBody {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(request: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let body = read_body(request, payload, |reads| &reads.sign_ins);
        Box::pin(async move { body.await.map(SignInBody) })
    }
}

/// Reads the request's body through the pool `pool` picks of the server's [`BodyReads`].
fn read_body(
    request: &HttpRequest,
    payload: &mut Payload,
    pool: fn(&BodyReads) -> &Reads,
) -> LocalBoxFuture<'static, Result<Body, ApiError>> {
    let reads = request.app_data::<web::Data<BodyReads>>().map(|reads| pool(reads).clone());
    let length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let payload = payload.take();
    let media = Media::of(request);
    Box::pin(async move {
        let reads = reads.ok_or_else(|| ApiError::internal("the server has no body reader"))?;
        reads.read(payload, length).await.map(|bytes| Body { bytes, media })
    })
}
