//! Frames as Server-Sent Events: `id: <seq>`, `event: <type>`, `data: <frame JSON>`, with a
//! `: keep-alive` comment every 15 s of silence.
//!
//! Every stream is written to its connection a slice at a time ([`Sliced`]): the HTTP server
//! takes what it is given into its write buffer whole, so a large event given at once would sit
//! there, out of reach, for as long as the client does not read. A slice at a time, the rest of
//! the event waits in a backlog (`run::backlog`) that the node counts and can drop.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::http::header::HeaderMap;
use actix_web::{HttpRequest, HttpResponse, Responder};
use actix_web_lab::sse::{self, Sse};
use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::redact::Redaction;
use crate::run::backlog::{Backlog, Backlogs};
use crate::run::follow::FollowError;
use crate::store::events::LoggedFrame;
use crate::telemetry;

pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The most of an event written to a connection at once.
const SLICE: usize = 16 * 1024;

/// A streamed body written a slice of at most [`SLICE`] bytes at a time, the rest of each event
/// held in a [`Backlog`] until the connection takes it. A stream whose backlog the node cut
/// off (its client read too slowly) ends with an error, which closes the connection.
pub struct Sliced<B> {
    inner: Pin<Box<B>>,
    rest: Backlog<Bytes>,
}

impl<B> Sliced<B> {
    pub fn new(inner: B, backlogs: &Arc<Backlogs>) -> Self {
        Self { inner: Box::pin(inner), rest: backlogs.backlog() }
    }

    /// The first slice of `bytes`; the rest is held for the next call.
    fn slice(&mut self, mut bytes: Bytes) -> Bytes {
        if bytes.len() <= SLICE {
            return bytes;
        }
        let first = bytes.split_to(SLICE);
        self.rest.hold([bytes]);
        first
    }
}

impl<B> MessageBody for Sliced<B>
where
    B: MessageBody,
    B::Error: Into<Box<dyn std::error::Error>>,
{
    type Error = Box<dyn std::error::Error>;

    fn size(&self) -> BodySize {
        BodySize::Stream
    }

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let this = self.get_mut();
        if this.rest.is_cut() {
            return Poll::Ready(Some(Err(FollowError::TooSlow.into())));
        }
        if let Some(rest) = this.rest.pop() {
            return Poll::Ready(Some(Ok(this.slice(rest))));
        }
        match ready!(this.inner.as_mut().poll_next(cx)) {
            Some(Ok(bytes)) => Poll::Ready(Some(Ok(this.slice(bytes)))),
            Some(Err(error)) => Poll::Ready(Some(Err(error.into()))),
            None => Poll::Ready(None),
        }
    }
}

/// `response` with its body written a slice at a time ([`Sliced`]) and its headers compacted
/// ([`compact`]).
pub fn sliced<B>(response: HttpResponse<B>, backlogs: &Arc<Backlogs>) -> HttpResponse
where
    B: MessageBody + 'static,
    B::Error: Into<Box<dyn std::error::Error>>,
{
    compact(response.map_body(|_, body| Sliced::new(body, backlogs)).map_into_boxed_body())
}

/// The frames as SSE events, each redacted (`crate::redact`): the log keeps every value, a stream
/// shows none of the secrets.
pub fn frame_stream<S>(frames: S, redaction: &Redaction, backlogs: &Arc<Backlogs>) -> FrameStream<S>
where
    S: Stream<Item = Result<LoggedFrame, FollowError>> + 'static,
{
    FrameStream { frames, redaction: redaction.clone(), backlogs: backlogs.clone() }
}

/// A run's frames, as a response ([`frame_stream`]).
pub struct FrameStream<S> {
    frames: S,
    redaction: Redaction,
    backlogs: Arc<Backlogs>,
}

impl<S> Responder for FrameStream<S>
where
    S: Stream<Item = Result<LoggedFrame, FollowError>> + 'static,
{
    type Body = BoxBody;

    fn respond_to(self, req: &HttpRequest) -> HttpResponse<BoxBody> {
        let events = events(self.frames, self.redaction);
        sliced(Sse::from_stream(events).with_keep_alive(KEEP_ALIVE).respond_to(req), &self.backlogs)
    }
}

fn events<S>(frames: S, redaction: Redaction) -> impl Stream<Item = Result<sse::Event, FollowError>>
where
    S: Stream<Item = Result<LoggedFrame, FollowError>>,
{
    let open = telemetry::open_stream();
    frames.map(move |frame| {
        // The closure owns the gauge's guard: the stream is counted open until it is dropped.
        let _open = &open;
        frame.map(|f| {
            let data = match f.live.as_ref().map(|live| live.secret_keys) {
                // Judged when it was encoded, with the same markers: no key to hide.
                Some(false) => f.json.to_string(),
                Some(true) | None => redaction.text(&f.json).into_owned(),
            };
            sse::Event::Data(sse::Data::new(data).id(f.seq.to_string()).event(f.event_type))
        })
    })
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
