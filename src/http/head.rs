//! `HEAD` wherever `GET` is answered. HTTP says a server answering `GET` on a resource answers
//! `HEAD` there too, with the status and headers the `GET` would get and no body (RFC 9110,
//! section 9.3.2); actix routes by method, so without this every `GET` endpoint (the API's, the
//! console's, the LangGraph surface's) answered `HEAD` with 405.
//!
//! Done once, before routing, rather than per route: a `HEAD` request is routed as the `GET` it
//! asks about (marked [`AsHead`], so a 405 names the method the client sent). The server's codec
//! writes no body for a `HEAD` (for HTTP/1.1 and HTTP/2 alike) but keeps a sized body's
//! `Content-Length`, as the `GET` would have it. A streamed body (the SSE endpoints) is dropped
//! here instead: HTTP/1.1 would otherwise go on reading a stream that may never end (a run's
//! frames, the console's feed) while writing none of it, and hold the connection.

use actix_web::HttpMessage;
use actix_web::body::{BodySize, EitherBody, MessageBody, None as NoBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;

/// Marks a request that came as `HEAD` and is routed as `GET`.
#[derive(Debug, Clone, Copy)]
pub struct AsHead;

/// Routes a `HEAD` request as `GET`, and answers it without a streamed body.
pub async fn as_get<B: MessageBody>(
    mut request: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<EitherBody<B, NoBody>>, actix_web::Error> {
    let head = request.method() == Method::HEAD;
    if head {
        request.head_mut().method = Method::GET;
        request.extensions_mut().insert(AsHead);
    }
    let response = next.call(request).await?;
    Ok(response.map_body(|_, body| match body.size() {
        BodySize::Stream if head => EitherBody::right(NoBody::new()),
        _ => EitherBody::left(body),
    }))
}

/// The method the client sent: `HEAD` for a request routed as `GET` by [`as_get`].
pub fn sent_method(request: &actix_web::HttpRequest) -> Method {
    match request.extensions().get::<AsHead>() {
        Some(AsHead) => Method::HEAD,
        None => request.method().clone(),
    }
}
