//! `/ui/login` and `/ui/logout`: a key traded for a browser session, and the session ended
//! (`crate::http::session`). Sign-in attempts are limited per client address and per key
//! ([`Sessions::admit`]): past the limit the page answers 429 with `Retry-After`.

use actix_web::{HttpRequest, HttpResponse, get, http::header, post, web};
use askama::Template;
use serde::Deserialize;

use super::page::{self, Chrome};
use crate::http::session::{self, Sessions};
use crate::http::{ApiError, SignInBody, authenticate};
use crate::services::Services;

#[derive(Template)]
#[template(path = "console/login.html")]
struct LoginPage {
    chrome: Chrome,
    next: String,
    problem: Option<String>,
}

impl page::Page for LoginPage {
    fn chrome(&self) -> &Chrome {
        &self.chrome
    }
}

#[derive(Debug, Deserialize)]
pub struct NextQuery {
    #[serde(default)]
    next: String,
}

/// Where to go when `next` is not a console page.
const DEFAULT_PAGE: &str = "/ui/runs";

/// The longest `next` followed: a console URL is far shorter, and a longer one is not worth a
/// header of its size.
const MAX_NEXT: usize = 2_000;

/// Where to go after signing in: a console page of this server, nothing else — no other site
/// (`//evil`, `https://…`), no backslash (which browsers read as a slash), and nothing that is
/// not printable ASCII (a CR or LF cannot be put in the `Location` header; a console URL that
/// the browser sent is percent-encoded anyway).
fn destination(next: &str) -> &str {
    let local =
        next.len() <= MAX_NEXT && next.starts_with("/ui/") && next.bytes().all(|b| b.is_ascii_graphic() && b != b'\\');
    if local { next } else { DEFAULT_PAGE }
}

fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther().insert_header((header::LOCATION, location.to_string())).finish()
}

/// `GET /ui/login?next=`: the sign-in form (or, with no keys configured, straight on).
#[get("/login")]
pub async fn form(query: web::Query<NextQuery>, services: web::Data<Services>) -> HttpResponse {
    let next = destination(&query.next).to_string();
    if !services.settings.auth.enabled() {
        return see_other(&next);
    }
    page::html(&LoginPage { chrome: Chrome::new("", None), next, problem: None })
}

/// `POST /ui/login` (`key`, `next`, form-encoded): a valid key opens a session.
#[post("/login")]
pub async fn sign_in(
    req: HttpRequest,
    SignInBody(body): SignInBody,
    services: web::Data<Services>,
    sessions: web::Data<Sessions>,
) -> Result<HttpResponse, ApiError> {
    if !crate::http::site::same_origin(&req) {
        return Err(ApiError::CrossSite);
    }
    let fields = body.form()?;
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str());
    let next = destination(field("next")).to_string();
    let key = field("key").trim();
    if let Err(throttled) = sessions.admit(req.peer_addr().map(|a| a.ip()), key) {
        let wait = throttled.secs();
        let problem = Some(format!("Too many sign-in attempts. Try again in {wait} s."));
        let mut response = page::html(&LoginPage { chrome: Chrome::new("", None), next, problem });
        *response.status_mut() = actix_web::http::StatusCode::TOO_MANY_REQUESTS;
        response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(wait));
        return Ok(response);
    }
    match authenticate(&services.settings.auth, Some(key).filter(|k| !k.is_empty())) {
        Ok(caller) => {
            let token = sessions.open(caller);
            let mut response = see_other(&next);
            response.add_cookie(&session::cookie(&req, Some(&token))).map_err(ApiError::internal)?;
            Ok(response)
        }
        Err(_) => {
            let problem = Some("That key is not valid. Check it and try again.".to_string());
            let mut response = page::html(&LoginPage { chrome: Chrome::new("", None), next, problem });
            *response.status_mut() = actix_web::http::StatusCode::UNAUTHORIZED;
            Ok(response)
        }
    }
}

/// `POST /ui/logout`: ends the session and clears its cookie.
#[post("/logout")]
pub async fn sign_out(req: HttpRequest, sessions: web::Data<Sessions>) -> Result<HttpResponse, ApiError> {
    if !crate::http::site::same_origin(&req) {
        return Err(ApiError::CrossSite);
    }
    if let Some(token) = session::token(&req) {
        sessions.close(&token);
    }
    let mut response = see_other("/ui/login");
    response.add_cookie(&session::cookie(&req, None)).map_err(ApiError::internal)?;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_console_pages_of_this_server_are_followed() {
        for kept in ["/ui/runs", "/ui/runs/0190b2d4-0000-7000-8000-000000000000?version=2", "/ui/new?from=x%0Ay"] {
            assert_eq!(destination(kept), kept);
        }
        let long = format!("/ui/runs?q={}", "x".repeat(MAX_NEXT));
        for refused in [
            "",
            "/ui/runs\r\nSet-Cookie: x=1",
            "/ui/runs\n",
            "/ui/\u{85}",
            "/ui/ runs",
            "/ui/\\evil.example",
            "//evil.example/ui/",
            "https://evil.example/ui/",
            "/api/v1/flex/runs",
            "ui/runs",
            long.as_str(),
        ] {
            assert_eq!(destination(refused), DEFAULT_PAGE, "{refused:?}");
        }
    }
}
