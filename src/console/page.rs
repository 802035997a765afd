//! Rendering a page, and the pages a request gets instead when it goes wrong.

use actix_web::error::{InternalError, QueryPayloadError};
use actix_web::{HttpRequest, HttpResponse};
use askama::Template;

use super::viewer::Viewer;

/// The version pages put on their asset links.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the frame around every page shows: which section is open, and who is signed in.
pub struct Chrome {
    pub version: &'static str,
    pub section: &'static str,
    pub signed_in: bool,
    pub principal: String,
    /// Whether the page follows `/ui/feed` (the pending count): only a page someone may see.
    pub feed: bool,
}

impl Chrome {
    pub fn new(section: &'static str, viewer: Option<&Viewer>) -> Self {
        let (signed_in, principal) =
            viewer.map_or((false, String::new()), |v| (v.signed_in, v.caller.principal.clone()));
        Self { version: VERSION, section, signed_in, principal, feed: viewer.is_some() }
    }
}

/// A rendered page, or the error page if the template could not be rendered.
pub fn html(page: &impl Template) -> HttpResponse {
    match page.render() {
        Ok(body) => HttpResponse::Ok().content_type("text/html; charset=utf-8").body(body),
        Err(error) => {
            tracing::error!(error = %crate::excerpt::log(&error), "console page failed to render");
            message(None, 500, "Something went wrong", "The page could not be shown; the server log says why.")
        }
    }
}

#[derive(Template)]
#[template(path = "console/message.html")]
struct Message<'a> {
    chrome: Chrome,
    title: &'a str,
    text: &'a str,
}

/// `/ui/…` with no page: a console page saying so (and how to go on), not the API's JSON answer;
/// in the frame every page has, with who is signed in, when someone is. A visitor who is not is
/// told the same without it (not sent to sign in first: there is nothing here to come back to).
pub async fn not_found(viewer: Option<Viewer>) -> HttpResponse {
    message(viewer.as_ref(), 404, "Page not found", "There is no console page at this address.")
}

/// A console address whose query a page cannot read (`?version=two`): a page saying what is
/// wrong with it, not the API's JSON answer.
pub fn bad_query(error: QueryPayloadError, _request: &HttpRequest) -> actix_web::Error {
    // The parser's message may quote the query: bounded, as every answer is.
    let reason = crate::excerpt::excerpt(&error.to_string(), 300).into_owned();
    let text = format!("This address asks for something the page cannot read: {reason}.");
    // An error handler cannot wait for the viewer to be read: the page has no signed-in header.
    InternalError::from_response(error, message(None, 400, "Not a page address", &text)).into()
}

/// A page that only says what happened (a run not found, an error), in the frame every page has:
/// with who is signed in when `viewer` is known, as the page the viewer asked for would have had.
pub fn message(viewer: Option<&Viewer>, status: u16, title: &str, text: &str) -> HttpResponse {
    let page = Message { chrome: Chrome::new("", viewer), title, text };
    let body = page.render().unwrap_or_else(|_| text.to_string());
    let status =
        actix_web::http::StatusCode::from_u16(status).unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    HttpResponse::build(status).content_type("text/html; charset=utf-8").body(body)
}
