//! Frames as Server-Sent Events: `id: <seq>`, `event: <type>`, `data: <frame JSON>`, with a
//! `: keep-alive` comment every 15 s of silence.

use std::time::Duration;

use actix_web::body::BoxBody;
use actix_web::http::header::HeaderMap;
use actix_web::{HttpRequest, HttpResponse, Responder};
use actix_web_lab::sse::{self, Sse};
use futures::{Stream, StreamExt};

use crate::redact::Redaction;
use crate::run::follow::FollowError;
use crate::store::events::LoggedFrame;
use crate::telemetry;

pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The frames as SSE events, each redacted (`crate::redact`): the log keeps every value, a stream
/// shows none of the secrets.
pub fn frame_stream<S>(frames: S, redaction: &Redaction) -> impl actix_web::Responder + use<S>
where
    S: Stream<Item = Result<LoggedFrame, FollowError>> + 'static,
{
    let redaction = redaction.clone();
    let open = telemetry::open_stream();
    let events = frames.map(move |frame| {
        // The closure owns the gauge's guard: the stream is counted open until it is dropped.
        let _open = &open;
        frame.map(|f| {
            let data = match f.secret_keys {
                // Judged when it was encoded, with the same markers: no key to hide.
                Some(false) => f.json.to_string(),
                Some(true) | None => redaction.text(&f.json).into_owned(),
            };
            sse::Event::Data(sse::Data::new(data).id(f.seq.to_string()).event(f.event_type))
        })
    });
    Compact(Sse::from_stream(events).with_keep_alive(KEEP_ALIVE))
}

/// A streamed response whose header map has room for the headers it has and a few more.
///
/// actix gives every response room for 12 headers (about 3 KiB), and an HTTP/2 stream keeps its
/// response head until the stream ends: with thousands of runs followed at once, that room is a
/// tenth of the memory they take.
pub struct Compact<R>(pub R);

/// Headers a handler or middleware may still add to a compacted response without it growing.
const HEADER_ROOM: usize = 4;

impl<R: Responder> Responder for Compact<R> {
    type Body = BoxBody;

    fn respond_to(self, req: &HttpRequest) -> HttpResponse<BoxBody> {
        compact(self.0.respond_to(req).map_into_boxed_body())
    }
}

/// `response` with its headers moved into a map of their size (see [`Compact`]).
pub fn compact(mut response: HttpResponse) -> HttpResponse {
    let headers = std::mem::take(response.headers_mut());
    let mut compacted = HeaderMap::with_capacity(headers.len_keys() + HEADER_ROOM);
    for (name, value) in headers {
        compacted.append(name, value);
    }
    *response.headers_mut() = compacted;
    response
}

#[cfg(test)]
mod tests {
    use actix_web::http::header;

    use super::*;

    #[test]
    fn compacting_keeps_every_header_in_a_smaller_map() {
        let response = HttpResponse::Ok()
            .insert_header((header::CONTENT_TYPE, "text/event-stream"))
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .append_header(("x-many", "1"))
            .append_header(("x-many", "2"))
            .finish();
        let before: Vec<_> = response.headers().iter().map(|(n, v)| (n.clone(), v.clone())).collect();
        let roomy = response.headers().capacity();
        let compacted = compact(response);
        let after: Vec<_> = compacted.headers().iter().map(|(n, v)| (n.clone(), v.clone())).collect();
        assert_eq!(before.len(), 4, "three names, one with two values");
        assert_eq!(after.len(), before.len());
        assert!(before.iter().all(|h| after.contains(h)), "{after:?}");
        assert!(compacted.headers().capacity() < roomy, "{} < {roomy}", compacted.headers().capacity());
    }
}
