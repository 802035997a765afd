//! `Idempotency-Key` on `run.stream`: a client that retries a request (say, after a dropped
//! connection) gets the run the first request created, not a second run.

use actix_web::HttpRequest;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::auth::Caller;
use super::error::ApiError;
use crate::error_code::ErrorCode;
use crate::run::Idempotency;

/// The longest accepted key.
const MAX_KEY_LEN: usize = 255;

/// The request's `Idempotency-Key`, scoped to `caller`, with the hash of `body` (JSON, hashed in
/// its canonical form, so a re-serialised body with the same content is the same request).
pub fn from_request(req: &HttpRequest, caller: &Caller, body: &[u8]) -> Result<Option<Idempotency>, ApiError> {
    let Some(value) = req.headers().get("idempotency-key") else { return Ok(None) };
    of_key(value.to_str().unwrap_or_default(), caller, body).map(Some)
}

/// An idempotency key given in a request's body (a fork's `idempotencyKey`), as
/// [`from_request`] reads the header.
pub fn of_key(key: &str, caller: &Caller, body: &[u8]) -> Result<Idempotency, ApiError> {
    let key = Some(key)
        .filter(|key| !key.is_empty() && key.len() <= MAX_KEY_LEN && key.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidIdempotencyKey,
                format!("Idempotency-Key must be 1 to {MAX_KEY_LEN} visible ASCII characters"),
            )
        })?;
    let canonical =
        serde_json::from_slice::<Value>(body).map_or_else(|_| body.to_vec(), |v| v.to_string().into_bytes());
    Ok(Idempotency {
        key: format!("{}/{key}", caller.principal),
        request_hash: format!("{:x}", Sha256::digest(&canonical)),
    })
}
