//! What every console response tells the browser, beside its content: run only the console's own
//! script and stylesheet (no inline script, style or event handler runs, so markup that slipped
//! into a page could do nothing), talk only to this server, never be framed by another site
//! (clickjacking), take each file as the type the server says, send no full URL (run ids) to other
//! sites, and keep no copy of a page with run data.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::Next;

/// Only this server's own files; nothing inline, no frames, forms posted only back here.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// `same-origin`, not `no-referrer`: with `no-referrer` a browser sends `Origin: null` on the
/// pages' own POSTs, and the server refuses a change whose origin is not its own (`http::site`).
const REFERRER_POLICY: &str = "same-origin";

/// Adds the headers to every `/ui/` response; `Cache-Control: no-store` to each that does not say
/// how it may be cached (only the static assets do, `console::assets`).
pub async fn add(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let mut response = next.call(request).await?;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static(REFERRER_POLICY));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    Ok(response)
}
