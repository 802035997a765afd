//! Who is calling: API callers may start and read runs; operators may also register
//! capabilities and (later) steer runs. Keys come from `Authorization: Bearer <key>` (or
//! `X-Api-Key`) and are compared in constant time. Without configured keys every request is an
//! anonymous operator, which the configuration only allows on a loopback address.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};

use sha2::{Digest, Sha256};

use super::error::ApiError;
use crate::config::{AuthSettings, Secret};
use crate::services::Services;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Caller,
    Operator,
}

/// An authenticated request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub role: Role,
    /// Who is calling, without revealing the key: `key:<first 16 hex digits of its SHA-256>`, or
    /// `anonymous` when no keys are configured. Scopes what callers name (idempotency keys).
    pub principal: String,
}

/// An authenticated request with the operator role.
#[derive(Debug, Clone, Copy)]
pub struct Operator;

fn presented_key(req: &HttpRequest) -> Option<&str> {
    let bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
    bearer.or_else(|| req.headers().get("x-api-key").and_then(|v| v.to_str().ok())).map(str::trim)
}

fn matches(keys: &[Secret], presented: &str) -> bool {
    // Check every key, so timing does not reveal which one (or how many) exist.
    keys.iter().filter(|k| !k.is_empty()).fold(false, |found, key| {
        found | constant_time_eq::constant_time_eq(key.expose().as_bytes(), presented.as_bytes())
    })
}

/// Decides the role of a request.
pub fn authenticate(settings: &AuthSettings, presented: Option<&str>) -> Result<Role, ApiError> {
    if !settings.enabled() {
        return Ok(Role::Operator);
    }
    let presented = presented.ok_or(ApiError::Unauthenticated)?;
    if matches(&settings.operator_keys, presented) {
        Ok(Role::Operator)
    } else if matches(&settings.api_keys, presented) {
        Ok(Role::Caller)
    } else {
        Err(ApiError::InvalidKey)
    }
}

fn caller(req: &HttpRequest) -> Result<Caller, ApiError> {
    let services = req
        .app_data::<web::Data<Services>>()
        .ok_or_else(|| ApiError::internal("services are not registered with the app"))?;
    let presented = presented_key(req);
    let role = authenticate(&services.settings.auth, presented)?;
    let principal = match presented.filter(|_| services.settings.auth.enabled()) {
        Some(key) => format!("key:{}", &format!("{:x}", Sha256::digest(key.as_bytes()))[..16]),
        None => "anonymous".to_string(),
    };
    Ok(Caller { role, principal })
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller(req))
    }
}

impl FromRequest for Operator {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller(req).and_then(|c| if c.role == Role::Operator { Ok(Operator) } else { Err(ApiError::Forbidden) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(api: &[&str], operator: &[&str]) -> AuthSettings {
        AuthSettings {
            api_keys: api.iter().map(|k| Secret::new(*k)).collect(),
            operator_keys: operator.iter().map(|k| Secret::new(*k)).collect(),
            allow_anonymous: false,
        }
    }

    #[test]
    fn roles() {
        let s = settings(&["caller-key"], &["op-key"]);
        assert_eq!(authenticate(&s, Some("op-key")).unwrap(), Role::Operator);
        assert_eq!(authenticate(&s, Some("caller-key")).unwrap(), Role::Caller);
        assert!(matches!(authenticate(&s, Some("nope")), Err(ApiError::InvalidKey)));
        assert!(matches!(authenticate(&s, None), Err(ApiError::Unauthenticated)));
    }

    #[test]
    fn no_keys_means_anonymous_operator() {
        assert_eq!(authenticate(&settings(&[], &[]), None).unwrap(), Role::Operator);
    }
}
