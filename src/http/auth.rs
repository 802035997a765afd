//! Who is calling: API callers may start runs and see their own; operators may see and steer
//! every run and register capabilities. Keys come from `Authorization: Bearer <key>` (the scheme in
//! any case) or `X-Api-Key`, and are compared in constant time. Each key has a name (`name:key`
//! in the configuration): the principal runs, decisions and logs show. Without configured keys
//! every request is the anonymous operator, which the configuration only allows on a loopback
//! address.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::http::Method;
use actix_web::{FromRequest, HttpRequest, web};

use super::error::ApiError;
use super::session::{self, Sessions};
use super::site;
pub use crate::caller::{ANONYMOUS, Caller, Role};
use crate::config::{AuthSettings, NamedKey};
use crate::services::Services;

/// An authenticated request with the operator role.
#[derive(Debug, Clone)]
pub struct Operator(pub Caller);

fn presented_key(req: &HttpRequest) -> Option<&str> {
    let bearer = req.headers().get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| {
        let (scheme, key) = v.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then_some(key)
    });
    bearer.or_else(|| req.headers().get("x-api-key").and_then(|v| v.to_str().ok())).map(str::trim)
}

/// The key among `keys` that `presented` is, checking every key so timing does not reveal which
/// one (or how many) exist.
fn matching<'k>(keys: &'k [NamedKey], presented: &str) -> Option<&'k NamedKey> {
    keys.iter().fold(None, |found, key| {
        let equal = constant_time_eq::constant_time_eq(key.key.expose().as_bytes(), presented.as_bytes());
        if equal && found.is_none() { Some(key) } else { found }
    })
}

/// Decides who a request is.
pub fn authenticate(settings: &AuthSettings, presented: Option<&str>) -> Result<Caller, ApiError> {
    if !settings.enabled() {
        return Ok(Caller { role: Role::Operator, principal: ANONYMOUS.to_string() });
    }
    let presented = presented.ok_or(ApiError::Unauthenticated)?;
    let (callers, operators) = settings.named_keys();
    if let Some(key) = matching(&operators, presented) {
        return Ok(Caller { role: Role::Operator, principal: key.name.clone() });
    }
    match matching(&callers, presented) {
        Some(key) => Ok(Caller { role: Role::Caller, principal: key.name.clone() }),
        None => Err(ApiError::InvalidKey),
    }
}

/// Who a request is: by the key it presents, else by its browser session (`super::session`).
fn caller(req: &HttpRequest) -> Result<Caller, ApiError> {
    let services = req
        .app_data::<web::Data<Services>>()
        .ok_or_else(|| ApiError::internal("services are not registered with the app"))?;
    let settings = &services.settings.auth;
    let key = presented_key(req);
    let Some(token) = session::token(req).filter(|_| key.is_none() && settings.enabled()) else {
        return authenticate(settings, key);
    };
    let sessions = req.app_data::<web::Data<Sessions>>().ok_or(ApiError::Unauthenticated)?;
    let caller = sessions.caller(&token).ok_or(ApiError::Unauthenticated)?;
    let reads_only = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !reads_only && !site::same_origin(req) {
        return Err(ApiError::CrossSite);
    }
    Ok(caller)
}

/// Whether a request is authenticated by a browser session rather than by a key.
pub fn by_session(req: &HttpRequest) -> bool {
    presented_key(req).is_none() && session::token(req).is_some()
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
        ready(
            caller(req).and_then(|c| if c.role == Role::Operator { Ok(Operator(c)) } else { Err(ApiError::Forbidden) }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn settings(api: &[&str], operator: &[&str]) -> AuthSettings {
        AuthSettings {
            api_keys: api.iter().map(|k| Secret::new(*k)).collect(),
            operator_keys: operator.iter().map(|k| Secret::new(*k)).collect(),
            allow_anonymous: false,
        }
    }

    #[test]
    fn roles_and_names() {
        let s = settings(&["alice:caller-key", "plain-key"], &["ops:op-key"]);
        assert_eq!(authenticate(&s, Some("op-key")).unwrap(), Caller { role: Role::Operator, principal: "ops".into() });
        assert_eq!(authenticate(&s, Some("caller-key")).unwrap().principal, "alice");
        let unnamed = authenticate(&s, Some("plain-key")).unwrap();
        assert_eq!(unnamed.role, Role::Caller);
        assert!(unnamed.principal.starts_with("key-") && unnamed.principal.len() == 12, "{}", unnamed.principal);
        assert!(
            matches!(authenticate(&s, Some("alice:caller-key")), Err(ApiError::InvalidKey)),
            "the name is not the key"
        );
        assert!(matches!(authenticate(&s, Some("nope")), Err(ApiError::InvalidKey)));
        assert!(matches!(authenticate(&s, None), Err(ApiError::Unauthenticated)));
    }

    #[test]
    fn no_keys_means_the_anonymous_operator() {
        let caller = authenticate(&settings(&[], &[]), None).unwrap();
        assert_eq!(caller, Caller { role: Role::Operator, principal: ANONYMOUS.into() });
    }

    #[test]
    fn callers_see_their_own_runs_and_operators_every_run() {
        let alice = Caller { role: Role::Caller, principal: "alice".into() };
        assert!(alice.may_see(Some("alice")));
        assert!(!alice.may_see(Some("bob")));
        assert!(!alice.may_see(None));
        let ops = Caller { role: Role::Operator, principal: "ops".into() };
        assert!(ops.may_see(Some("bob")) && ops.may_see(None));
        assert_eq!((alice.owner_filter(), ops.owner_filter()), (Some("alice"), None));
    }
}
