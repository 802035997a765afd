//! What each HTTP request leaves behind: a span with bounded fields, one bounded log line when it
//! is refused or fails, and its count and latency by route and status.
//!
//! The stock span builder logs the `Debug` form of an error, which for a request with many
//! mistakes repeats all of them (and the values they quote): a log line that grows with the input.
//! Here an error is logged by its code and an excerpt of its message, nothing else.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::{Error, HttpMessage};
use tracing::Span;
use tracing_actix_web::RootSpanBuilder;

use crate::excerpt;

/// Characters of a request target (path and query) kept in the span.
const TARGET: usize = 200;

/// The route label of a request no route matched (a bounded set of labels, whatever is asked).
const UNMATCHED: &str = "unmatched";

/// When the request began and the route it matched, kept in its extensions for the metrics:
/// matching a path against the route patterns walks them (regular expressions for those with
/// parameters), so it is done once.
struct Started {
    at: Instant,
    route: String,
}

/// flexrun's [`RootSpanBuilder`].
pub struct AccessLog;

impl RootSpanBuilder for AccessLog {
    fn on_request_start(request: &ServiceRequest) -> Span {
        let route = request.match_pattern().unwrap_or_else(|| UNMATCHED.to_string());
        request.extensions_mut().insert(Started { at: Instant::now(), route: route.clone() });
        let target = request.uri().path_and_query().map_or("", |p| p.as_str());
        tracing::info_span!(
            "HTTP request",
            http.method = %request.method(),
            http.route = %excerpt::Excerpt(route, TARGET),
            http.target = %excerpt::Excerpt(target, TARGET),
            http.status_code = tracing::field::Empty,
            request_id = %uuid::Uuid::now_v7(),
        )
    }

    fn on_request_end<B: MessageBody>(span: Span, outcome: &Result<ServiceResponse<B>, Error>) {
        let (status, error, route, started) = match outcome {
            Ok(response) => {
                let (route, started) = match response.request().extensions_mut().remove::<Started>() {
                    Some(Started { at, route }) => (route, Some(at)),
                    None => (UNMATCHED.to_string(), None),
                };
                (response.status(), response.response().error(), route, started)
            }
            Err(error) => (error.as_response_error().status_code(), Some(error), UNMATCHED.to_string(), None),
        };
        span.record("http.status_code", status.as_u16());
        crate::telemetry::http_request(route, status.as_u16(), started.map(|at| at.elapsed()));
        let Some(error) = error else { return };
        let message = excerpt::log(error.as_response_error());
        span.in_scope(|| {
            if status.is_server_error() {
                tracing::warn!(status = status.as_u16(), %message, "request failed");
            } else {
                tracing::info!(status = status.as_u16(), %message, "request refused");
            }
        });
    }
}
