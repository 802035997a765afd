//! Rendering a page, and the pages a request gets instead when it goes wrong.

use actix_web::error::{InternalError, QueryPayloadError};
use actix_web::{HttpRequest, HttpResponse};
use askama::Template;

use super::viewer::Viewer;

/// The version pages put on their asset links.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the frame around every page shows: which section is open, and who is signed in.
#[derive(Clone)]
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

/// A console page: a template in the frame every page has, which [`html`] keeps for the error
/// page it shows instead when the template cannot be rendered.
pub trait Page: Template {
    fn chrome(&self) -> &Chrome;
}

/// A rendered page, or the error page if the template could not be rendered — in the page's own
/// frame, so it still says who is signed in.
pub fn html(page: &impl Page) -> HttpResponse {
    match page.render() {
        Ok(body) => HttpResponse::Ok().content_type("text/html; charset=utf-8").body(body),
        Err(error) => {
            tracing::error!(error = %crate::excerpt::log(&error), "console page failed to render");
            let text = "The page could not be shown; the server log says why.";
            framed(page.chrome().clone(), 500, "Something went wrong", text)
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

impl Page for Message<'_> {
    fn chrome(&self) -> &Chrome {
        &self.chrome
    }
}

/// `/ui/…` with no page: a console page saying so (and how to go on), not the API's JSON answer;
/// in the frame every page has, with who is signed in, when someone is. A visitor who is not is
/// told the same without it (not sent to sign in first: there is nothing here to come back to).
pub async fn not_found(viewer: Option<Viewer>) -> HttpResponse {
    message(viewer.as_ref(), 404, "Page not found", "There is no console page at this address.")
}

/// A console address whose query a page cannot read (`?version=two`): a page saying what is
/// wrong with it, not the API's JSON answer.
pub fn bad_query(error: QueryPayloadError, request: &HttpRequest) -> actix_web::Error {
    // The parser's message may quote the query: bounded, as every answer is.
    let reason = crate::excerpt::excerpt(&error.to_string(), 300).into_owned();
    let text = format!("This address asks for something the page cannot read: {reason}.");
    // Who is looking is read from the request alone (its key or session), as the page would have.
    let viewer = Viewer::of(request).ok();
    InternalError::from_response(error, message(viewer.as_ref(), 400, "Not a page address", &text)).into()
}

/// A page that only says what happened (a run not found, an error), in the frame every page has:
/// with who is signed in when `viewer` is known, as the page the viewer asked for would have had.
pub fn message(viewer: Option<&Viewer>, status: u16, title: &str, text: &str) -> HttpResponse {
    framed(Chrome::new("", viewer), status, title, text)
}

/// [`message`] in the frame `chrome`.
fn framed(chrome: Chrome, status: u16, title: &str, text: &str) -> HttpResponse {
    let page = Message { chrome, title, text };
    let body = page.render().unwrap_or_else(|_| text.to_string());
    let status =
        actix_web::http::StatusCode::from_u16(status).unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    HttpResponse::build(status).content_type("text/html; charset=utf-8").body(body)
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::*;
    use crate::http::{Caller, Role};

    /// A page whose template cannot be rendered: a value in it refuses to be shown.
    #[derive(Template)]
    #[template(source = "{{ value }}", ext = "html")]
    struct Broken {
        chrome: Chrome,
        value: Refuses,
    }

    struct Refuses;

    impl fmt::Display for Refuses {
        fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
            Err(fmt::Error)
        }
    }

    impl Page for Broken {
        fn chrome(&self) -> &Chrome {
            &self.chrome
        }
    }

    #[test]
    fn a_page_that_cannot_be_rendered_says_so_with_who_is_signed_in() {
        let viewer = Viewer { caller: Caller { role: Role::Operator, principal: "ops".into() }, signed_in: true };
        let response = html(&Broken { chrome: Chrome::new("runs", Some(&viewer)), value: Refuses });
        assert_eq!(response.status(), 500);
        let body = futures::executor::block_on(actix_web::body::to_bytes(response.into_body())).unwrap();
        let page = String::from_utf8(body.to_vec()).unwrap();
        assert!(page.contains("<h1>Something went wrong</h1>"), "{page}");
        assert!(page.contains(r#"Signed in as <strong data-testid="principal">ops</strong>"#), "{page}");
        assert!(page.contains(r#"<form class="sign-out""#), "{page}");
    }
}
