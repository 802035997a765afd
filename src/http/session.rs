//! Browser sessions. A browser cannot send an `Authorization` header on a link or an
//! `EventSource`, so the console trades a key, once, at `/ui/login` for a session: an opaque
//! random token in a cookie (`HttpOnly`, `SameSite=Strict`, `Secure` over https, expiring). The
//! server keeps only the token's SHA-256 and the caller it stands for, in memory: a restart signs
//! every browser out. A request carrying the cookie is that caller; one that changes something
//! must also come from the server's own origin (`super::site::same_origin`).
//!
//! Memory stays bounded without letting one principal push another out: each principal (a key's
//! name and role, both from the configuration) holds at most `sessions.max_per_principal`
//! sessions, its own oldest ending first. Sign-in attempts are limited per client address and per
//! key prefix ([`Sessions::admit`]), in tables of bounded size ([`super::throttle`]).

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use actix_web::HttpRequest;
use actix_web::cookie::{Cookie, SameSite};
use sha2::{Digest, Sha256};

use super::throttle::{Throttle, Throttled};
use crate::caller::Caller;
use crate::config::SessionSettings;
use crate::hash::HashMap;

/// The cookie's name.
pub const COOKIE: &str = "flexrun_session";

/// How long a session lasts from sign-in.
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Client addresses, and key prefixes, whose sign-in attempts are tracked at once (each table).
const TRACKED: usize = 10_000;

/// Characters of a presented key that name its sign-in bucket: enough to tell keys apart, and
/// what differs only after them (guesses at one key's end) shares the bucket.
const KEY_PREFIX_CHARS: usize = 12;

/// The sessions of this process, and the sign-in attempts that open them.
pub struct Sessions {
    held: Mutex<Held>,
    attempts: Mutex<Attempts>,
    per_principal: usize,
}

#[derive(Default)]
struct Held {
    by_token: HashMap<[u8; 32], Session>,
    /// Each principal's tokens, oldest first: every session lasts [`LIFETIME`], so this is also
    /// the order in which they expire.
    by_principal: HashMap<Caller, VecDeque<[u8; 32]>>,
}

struct Session {
    caller: Caller,
    expires: Instant,
}

/// Sign-in attempts, limited per client address and per key prefix: one address cannot try many
/// keys, and many addresses cannot sign in with one key over and over.
struct Attempts {
    by_address: Throttle<IpAddr>,
    /// By a digest of the key's first characters: the table holds no key material.
    by_key: Throttle<[u8; 16]>,
}

impl Sessions {
    pub fn new(settings: &SessionSettings) -> Self {
        let burst = settings.sign_in_attempts_per_minute;
        Self {
            held: Mutex::default(),
            attempts: Mutex::new(Attempts {
                by_address: Throttle::per_minute(burst, TRACKED),
                by_key: Throttle::per_minute(burst, TRACKED),
            }),
            per_principal: settings.max_per_principal.max(1),
        }
    }

    /// Counts a sign-in attempt from `address` with `key` (whether or not the key is valid), or
    /// refuses it when either has made too many lately. A refused attempt counts for neither.
    pub fn admit(&self, address: Option<IpAddr>, key: &str) -> Result<(), Throttled> {
        let now = Instant::now();
        let address = address.map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), client);
        let prefix: String = key.chars().take(KEY_PREFIX_CHARS).collect();
        let digest: [u8; 32] = Sha256::digest(prefix.as_bytes()).into();
        let prefix: [u8; 16] = digest.first_chunk().copied().unwrap_or_default();
        let mut attempts = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let by_address = attempts.by_address.check(&address, now)?;
        let by_key = attempts.by_key.check(&prefix, now)?;
        attempts.by_address.take(address, by_address);
        attempts.by_key.take(prefix, by_key);
        Ok(())
    }

    /// Opens a session for `caller`; returns its token (244 random bits, hex). A principal holds
    /// at most `sessions.max_per_principal`: beyond it, its own oldest session ends, never
    /// another principal's.
    pub fn open(&self, caller: Caller) -> String {
        let token = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        let now = Instant::now();
        let mut held = self.lock();
        let Held { by_token, by_principal } = &mut *held;
        let own = by_principal.entry(caller.clone()).or_default();
        while let Some(oldest) = own.front() {
            let live = by_token.get(oldest).is_some_and(|s| s.expires > now);
            if live && own.len() < self.per_principal {
                break;
            }
            by_token.remove(oldest);
            own.pop_front();
        }
        let id = digest(&token);
        own.push_back(id);
        by_token.insert(id, Session { caller, expires: now + LIFETIME });
        token
    }

    /// The caller `token` stands for, while its session lasts.
    pub fn caller(&self, token: &str) -> Option<Caller> {
        let held = self.lock();
        held.by_token.get(&digest(token)).filter(|s| s.expires > Instant::now()).map(|s| s.caller.clone())
    }

    /// Ends the session of `token`.
    pub fn close(&self, token: &str) {
        let id = digest(token);
        let mut held = self.lock();
        let Some(session) = held.by_token.remove(&id) else { return };
        if let Some(own) = held.by_principal.get_mut(&session.caller) {
            own.retain(|other| *other != id);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The client a sign-in attempt is counted against: its address, or for IPv6 its /64 (one host
/// commonly holds a whole /64 and can pick any address in it); an IPv4-mapped address is the
/// IPv4 address.
fn client(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u128::MAX >> 64))),
        },
        v4 @ IpAddr::V4(_) => v4,
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

    fn sessions(per_principal: usize, attempts: u32) -> Sessions {
        Sessions::new(&SessionSettings { max_per_principal: per_principal, sign_in_attempts_per_minute: attempts })
    }

    fn caller(name: &str, role: Role) -> Caller {
        Caller { role, principal: name.into() }
    }

    #[test]
    fn a_session_stands_for_its_caller_until_it_is_closed() {
        let sessions = sessions(4, 10);
        let caller = caller("alice", Role::Caller);
        let token = sessions.open(caller.clone());
        assert_eq!(token.len(), 64);
        assert_eq!(sessions.caller(&token), Some(caller));
        assert_eq!(sessions.caller("forged"), None);
        sessions.close(&token);
        assert_eq!(sessions.caller(&token), None);
    }

    #[test]
    fn a_principal_at_its_cap_loses_its_own_oldest_session_only() {
        let sessions = sessions(3, 10);
        let ops = sessions.open(caller("ops", Role::Operator));
        // The same name with another role is another principal.
        let alias = sessions.open(caller("ops", Role::Caller));
        let alice: Vec<String> = (0..1000).map(|_| sessions.open(caller("alice", Role::Caller))).collect();
        assert!(sessions.caller(&ops).is_some_and(|c| c.role == Role::Operator));
        assert!(sessions.caller(&alias).is_some());
        let live: Vec<&String> = alice.iter().filter(|t| sessions.caller(t).is_some()).collect();
        assert_eq!(live, alice.iter().skip(997).collect::<Vec<_>>(), "alice keeps her newest three");
        assert_eq!(sessions.lock().by_token.len(), 5, "memory: the cap per principal");
        // A closed session frees its place: the next one evicts nothing.
        sessions.close(&alice[999]);
        sessions.open(caller("alice", Role::Caller));
        assert!(sessions.caller(&alice[997]).is_some() && sessions.caller(&alice[998]).is_some());
    }

    #[test]
    fn sign_in_attempts_are_limited_per_address_and_per_key() {
        let sessions = sessions(3, 2);
        let home: IpAddr = "192.0.2.1".parse().unwrap();
        let away: IpAddr = "198.51.100.7".parse().unwrap();
        sessions.admit(Some(home), "first-guess").unwrap();
        sessions.admit(Some(home), "second-guess").unwrap();
        let refused = sessions.admit(Some(home), "third-guess").unwrap_err();
        assert_eq!(refused.secs(), 30, "one attempt a 30 s after a burst of two");
        // One key from many addresses: limited by the key.
        sessions.admit(Some(away), "shared-key-0001").unwrap();
        sessions.admit(Some("203.0.113.9".parse().unwrap()), "shared-key-0001").unwrap();
        assert!(sessions.admit(Some("203.0.113.10".parse().unwrap()), "shared-key-0001").is_err());
        assert!(
            sessions.admit(Some("203.0.113.11".parse().unwrap()), "shared-key-0001-and-more").is_err(),
            "what differs after the prefix shares the bucket"
        );
        assert!(sessions.admit(Some("203.0.113.12".parse().unwrap()), "other-key").is_ok());
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client(a), client(b));
        assert_ne!(client(a), client(other));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(client(mapped), "192.0.2.1".parse::<IpAddr>().unwrap());
    }
}
