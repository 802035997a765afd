//! The caller's span, from its W3C `traceparent` header: a run it starts is traced as the
//! span's child (`crate::traces`). A header that is not a valid `traceparent` is ignored, as
//! W3C Trace Context asks — never a client error.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest};

use super::error::ApiError;
use flexrun_core::trace::TraceParent;

/// The request's `traceparent`, if it sent a valid one.
pub struct CallerSpan(pub Option<TraceParent>);

impl FromRequest for CallerSpan {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let header = req.headers().get("traceparent").and_then(|value| value.to_str().ok());
        ready(Ok(Self(header.and_then(TraceParent::parse))))
    }
}
