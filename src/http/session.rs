//! Browser sessions. A browser cannot send an `Authorization` header on a link or an
//! `EventSource`, so the console trades a key, once, at `/ui/login` for a session: an opaque
//! random token in a cookie (`HttpOnly`, `SameSite=Strict`, `Secure` over https, expiring). The
//! server keeps only the token's SHA-256 and the caller it stands for, in memory: a restart signs
//! every browser out. A request carrying the cookie is that caller; one that changes something
//! must also come from the server's own origin (`super::site::same_origin`).

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use actix_web::HttpRequest;
use actix_web::cookie::{Cookie, SameSite};
use sha2::{Digest, Sha256};

use crate::caller::Caller;
use crate::hash::HashMap;

/// The cookie's name.
pub const COOKIE: &str = "flexrun_session";

/// How long a session lasts from sign-in.
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Sessions held at most: beyond it, the one closest to expiring is dropped first.
const MAX_SESSIONS: usize = 10_000;

/// The sessions of this process.
#[derive(Default)]
pub struct Sessions {
    held: Mutex<HashMap<[u8; 32], Session>>,
}

struct Session {
    caller: Caller,
    expires: Instant,
}

impl Sessions {
    /// Opens a session for `caller`; returns its token (244 random bits, hex).
    pub fn open(&self, caller: Caller) -> String {
        let token = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        let now = Instant::now();
        let mut held = self.lock();
        held.retain(|_, session| session.expires > now);
        if held.len() >= MAX_SESSIONS
            && let Some(oldest) = held.iter().min_by_key(|(_, s)| s.expires).map(|(id, _)| *id)
        {
            held.remove(&oldest);
        }
        held.insert(digest(&token), Session { caller, expires: now + LIFETIME });
        token
    }

    /// The caller `token` stands for, while its session lasts.
    pub fn caller(&self, token: &str) -> Option<Caller> {
        let held = self.lock();
        held.get(&digest(token)).filter(|s| s.expires > Instant::now()).map(|s| s.caller.clone())
    }

    /// Ends the session of `token`.
    pub fn close(&self, token: &str) {
        self.lock().remove(&digest(token));
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 32], Session>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The session token a request carries, if any.
pub fn token(req: &HttpRequest) -> Option<String> {
    req.cookie(COOKIE).map(|c| c.value().to_string()).filter(|t| !t.is_empty())
}

/// The cookie that carries `token` (or, with `None`, the one that deletes it).
pub fn cookie(req: &HttpRequest, token: Option<&str>) -> Cookie<'static> {
    let secure = req.connection_info().scheme() == "https";
    let mut cookie = Cookie::build(COOKIE, token.unwrap_or_default().to_string())
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .finish();
    match token {
        Some(_) => cookie
            .set_max_age(actix_web::cookie::time::Duration::seconds(LIFETIME.as_secs().try_into().unwrap_or(i64::MAX))),
        None => cookie.make_removal(),
    }
    cookie
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Role;

    #[test]
    fn a_session_stands_for_its_caller_until_it_is_closed() {
        let sessions = Sessions::default();
        let caller = Caller { role: Role::Caller, principal: "alice".into() };
        let token = sessions.open(caller.clone());
        assert_eq!(token.len(), 64);
        assert_eq!(sessions.caller(&token), Some(caller));
        assert_eq!(sessions.caller("forged"), None);
        sessions.close(&token);
        assert_eq!(sessions.caller(&token), None);
    }
}
