//! Which site a request comes from. Two attacks reach a server on a user's own machine through
//! the user's browser, keys or no keys:
//!
//! - **Cross-site requests.** Any page the user opens may post a form or a `text/plain` body to
//!   `http://127.0.0.1:8080/…` without asking (no CORS preflight); the browser sends it and only
//!   hides the answer. A request that changes something is refused (403 `cross_site_request`)
//!   when its `Origin` is not this server's, or, from a browser that sends no `Origin`, when
//!   `Sec-Fetch-Site` says it came from another site. Clients other than browsers send neither
//!   header and are not affected. JSON bodies must also be sent as JSON (`super::body`), which a
//!   page cannot do across sites without a preflight that flexrun never grants.
//! - **DNS rebinding.** A page at `http://evil.example:8080` can have its name resolve to
//!   127.0.0.1 and then read this server as its own origin. The browser still sends
//!   `Host: evil.example:8080`, so a request whose `Host` is a name other than a loopback one
//!   (`localhost`, `*.localhost`) or one listed in `http.allowed_hosts` is refused (421
//!   `host_not_allowed`). An address (`127.0.0.1:8080`, `[::1]`, a LAN address) is never a
//!   rebinding, since the page's origin would then be that address. The check applies whenever
//!   no keys are configured (anyone who reaches the server is its operator) and, with keys,
//!   once `http.allowed_hosts` lists any name.
//!
//! This is what other servers that run on developers' machines settled on after the same
//! reports: Jupyter's `local_hostnames`/`allow_remote_access`, Vite's and webpack-dev-server's
//! `allowedHosts`, Ollama's `OLLAMA_ORIGINS` and its Host check.

use std::net::IpAddr;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{Method, header};
use actix_web::middleware::Next;
use actix_web::{HttpRequest, web};

use super::error::ApiError;
use crate::services::Services;

/// Refuses requests from another site's page and requests for a host this server does not
/// answer to, before any handler runs (so nothing is created for them).
pub async fn guard(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    if let Some(services) = request.app_data::<web::Data<Services>>() {
        let settings = &services.settings;
        let allowed = &settings.http.allowed_hosts;
        if (!settings.auth.enabled() || !allowed.is_empty())
            && let Some(host) = host_name(request.request())
            && !host_allowed(&host, allowed)
        {
            return Err(ApiError::MisdirectedHost { host: crate::excerpt::excerpt(&host, 100).to_string() }.into());
        }
    }
    if changes_state(request.method()) && from_another_site(request.request()) {
        return Err(ApiError::CrossSite.into());
    }
    next.call(request).await
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The host a request names, without its port: the `Host` header (or HTTP/2's `:authority`).
/// Never a forwarding header: a page on a rebound name may set those as it likes.
fn host_name(request: &HttpRequest) -> Option<String> {
    let authority = match request.headers().get(header::HOST) {
        Some(value) => value.to_str().unwrap_or("\u{fffd}").to_string(),
        None => request.uri().authority()?.as_str().to_string(),
    };
    let host = match authority.strip_prefix('[') {
        // `[::1]:8080`: the address between the brackets.
        Some(rest) => rest.split(']').next().unwrap_or_default().to_string(),
        None => authority.rsplit_once(':').map_or(authority.as_str(), |(host, _port)| host).to_string(),
    };
    Some(host.trim_end_matches('.').to_ascii_lowercase())
}

/// Whether a request for `host` is one this server answers: an address, a loopback name, or a
/// name in `allowed` (an entry starting with `.` allows the name and every name under it).
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    if host.parse::<IpAddr>().is_ok() || host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    allowed.iter().any(|entry| {
        let entry = entry.trim_end_matches('.').to_ascii_lowercase();
        match entry.strip_prefix('.') {
            Some(domain) => host == domain || host.strip_suffix(&entry).is_some_and(|sub| !sub.is_empty()),
            None => host == entry || entry == "*",
        }
    })
}

/// Whether a browser says the request comes from a page of another origin.
fn from_another_site(request: &HttpRequest) -> bool {
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    match header("origin") {
        Some(origin) => !is_own_origin(request, origin),
        None => matches!(header("sec-fetch-site"), Some("cross-site" | "same-site")),
    }
}

/// Whether a browser says the request comes from this server's own pages: its `Origin` is this
/// server's, or (a browser that sends no `Origin`) `Sec-Fetch-Site` says `same-origin`. Requests
/// made with a browser session must say so (`super::auth`): a cookie is only ever sent by a
/// browser, which always says where a request comes from.
pub fn same_origin(request: &HttpRequest) -> bool {
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    match header("origin") {
        Some(origin) => is_own_origin(request, origin),
        None => header("sec-fetch-site") == Some("same-origin"),
    }
}

/// `origin` (`scheme://host[:port]`) is this server as the request addressed it.
fn is_own_origin(request: &HttpRequest, origin: &str) -> bool {
    let Some(authority) = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).map(String::from) else {
        return request.uri().authority().is_some_and(|a| origin.ends_with(&format!("://{a}")));
    };
    let scheme = request.connection_info().scheme().to_string();
    origin.eq_ignore_ascii_case(&format!("{scheme}://{authority}"))
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn addresses_and_loopback_names_are_always_answered() {
        for host in ["127.0.0.1", "10.1.2.3", "::1", "localhost", "app.localhost"] {
            assert!(host_allowed(host, &[]), "{host}");
        }
        for host in ["evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "localhostx"] {
            assert!(!host_allowed(host, &[]), "{host}");
        }
    }

    #[test]
    fn allowed_hosts_name_hosts_or_domains() {
        let allowed = ["flexrun.internal".to_string(), ".corp.example".to_string()];
        assert!(host_allowed("flexrun.internal", &allowed));
        assert!(host_allowed("corp.example", &allowed) && host_allowed("a.b.corp.example", &allowed));
        assert!(!host_allowed("xcorp.example", &allowed) && !host_allowed("flexrun.internal.evil", &allowed));
        assert!(host_allowed("anything", &["*".to_string()]));
    }

    #[test]
    fn the_host_is_read_from_the_host_header_without_its_port() {
        let named =
            |value: &str| host_name(&TestRequest::default().insert_header((header::HOST, value)).to_http_request());
        assert_eq!(named("Evil.Example:8080").as_deref(), Some("evil.example"));
        assert_eq!(named("[::1]:8080").as_deref(), Some("::1"));
        assert_eq!(named("localhost.").as_deref(), Some("localhost"));
        let forwarded = TestRequest::default()
            .insert_header((header::HOST, "evil.example"))
            .insert_header(("x-forwarded-host", "localhost"))
            .to_http_request();
        assert_eq!(host_name(&forwarded).as_deref(), Some("evil.example"), "forwarding headers are not trusted");
    }

    #[test]
    fn another_sites_page_is_told_apart_from_this_servers_own() {
        let request = |headers: &[(&str, &str)]| {
            let mut request = TestRequest::default().insert_header((header::HOST, "127.0.0.1:8080"));
            for (name, value) in headers {
                request = request.insert_header((*name, *value));
            }
            request.to_http_request()
        };
        assert!(!from_another_site(&request(&[])), "no browser headers: not a browser");
        assert!(!from_another_site(&request(&[("origin", "http://127.0.0.1:8080")])));
        assert!(from_another_site(&request(&[("origin", "http://127.0.0.1:3000")])));
        assert!(from_another_site(&request(&[("origin", "https://evil.example")])));
        assert!(from_another_site(&request(&[("origin", "null")])));
        assert!(from_another_site(&request(&[("sec-fetch-site", "cross-site")])));
        assert!(from_another_site(&request(&[("sec-fetch-site", "same-site")])));
        assert!(!from_another_site(&request(&[("sec-fetch-site", "same-origin")])));
        assert!(!from_another_site(&request(&[("sec-fetch-site", "none")])), "typed by the user");
        assert!(same_origin(&request(&[("sec-fetch-site", "same-origin")])));
        assert!(!same_origin(&request(&[])), "a session's browser must say where it comes from");
    }
}
