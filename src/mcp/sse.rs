//! A server-sent event stream read within the response limit: the events of a `POST`'s answer,
//! each at most `limit` bytes as the parser keeps it. An event growing past the limit is not read
//! further — the parser never holds more than `limit` bytes of it — and, on the stream answering
//! a request, the request is answered with [`super::too_large::answer`] in its place; then the
//! stream ends.

use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use rmcp::model::RequestId;
use rmcp::transport::streamable_http_client::SseError;
use sse_stream::{Sse, SseStream};

/// Why the bytes of an event stream stopped.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error(transparent)]
    Read(#[from] reqwest::Error),
    #[error("a server-sent event is larger than {0} bytes")]
    EventTooLarge(usize),
}

/// The events of `body`, each within `limit` bytes; `request` is the id of the request the stream
/// answers (none on a stream that answers no request: there an event over the limit is an error
/// that ends it).
pub fn events<S>(body: S, limit: usize, request: Option<RequestId>) -> BoxStream<'static, Result<Sse, SseError>>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
{
    let parsed = SseStream::from_bytes_stream(limited(body, limit)).boxed();
    stream::unfold(Some((parsed, request)), move |state| async move {
        let (mut parsed, request) = state?;
        match parsed.next().await? {
            Err(SseError::Body(error))
                if matches!(error.downcast_ref::<BodyError>(), Some(BodyError::EventTooLarge(_))) =>
            {
                let answer = request.map(|id| super::too_large::answer(id, limit));
                let event = answer.and_then(|answer| serde_json::to_string(&answer).ok());
                let item = event.map_or(Err(SseError::Body(error)), |data| Ok(Sse::default().data(data)));
                Some((item, None))
            }
            item => Some((item, Some((parsed, request)))),
        }
    })
    .boxed()
}

/// `body`, up to the first byte that makes an event larger than `limit`: the bytes before it (the
/// events they end are still parsed), then [`BodyError::EventTooLarge`], then nothing.
fn limited<S>(body: S, limit: usize) -> impl Stream<Item = Result<Bytes, BodyError>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
{
    enum State<S> {
        Reading(std::pin::Pin<Box<S>>, EventSize),
        Over,
        Done,
    }
    stream::unfold(State::Reading(Box::pin(body), EventSize::new(limit)), move |state| async move {
        match state {
            State::Reading(mut body, mut size) => match body.next().await? {
                // Without the URL, which may carry a credential in its query string.
                Err(error) => Some((Err(BodyError::Read(error.without_url())), State::Done)),
                Ok(chunk) => match size.fits(&chunk) {
                    None => Some((Ok(chunk), State::Reading(body, size))),
                    Some(0) => Some((Err(BodyError::EventTooLarge(limit)), State::Done)),
                    Some(within) => Some((Ok(chunk.slice(..within)), State::Over)),
                },
            },
            State::Over => Some((Err(BodyError::EventTooLarge(limit)), State::Done)),
            State::Done => None,
        }
    })
}

/// The size of the event being received, as the SSE parser keeps it: the lines of its fields so
/// far (comments are dropped, data lines joined with a line break) and the line being received
/// (kept whole until it ends, comment or not). A blank line ends the event.
#[derive(Debug)]
struct EventSize {
    limit: usize,
    kept: usize,
    line: usize,
    comment: bool,
    after_cr: bool,
}

impl EventSize {
    fn new(limit: usize) -> Self {
        Self { limit, kept: 0, line: 0, comment: false, after_cr: false }
    }

    /// Counts `chunk` in: `None` when all of it fits, else how many of its bytes come before the
    /// first one over the limit.
    fn fits(&mut self, chunk: &[u8]) -> Option<usize> {
        for (at, &byte) in chunk.iter().enumerate() {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue; // the second half of a CRLF line end
            }
            match byte {
                b'\r' | b'\n' => {
                    self.end_line();
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    if self.line == 0 {
                        self.comment = byte == b':';
                    }
                    self.line = self.line.saturating_add(1);
                }
            }
            if self.kept.saturating_add(self.line) > self.limit {
                return Some(at);
            }
        }
        None
    }

    fn end_line(&mut self) {
        if self.line == 0 {
            self.kept = 0;
        } else if !self.comment {
            self.kept = self.kept.saturating_add(self.line).saturating_add(1);
        }
        self.line = 0;
        self.comment = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ServerJsonRpcMessage;

    fn chunks(parts: &[&'static str]) -> impl Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static {
        stream::iter(parts.iter().map(|part| Ok(Bytes::from_static(part.as_bytes()))).collect::<Vec<_>>())
    }

    #[test]
    fn an_event_is_counted_from_the_last_blank_line_without_comments() {
        let mut size = EventSize::new(10);
        assert_eq!(size.fits(b"data: 12\r\n\r\n: hi\r\n"), None);
        assert_eq!(size.fits(b"\r\ndata: 123456789"), Some(12), "the 11th byte of the event is over");
        let mut size = EventSize::new(10);
        assert_eq!(size.fits(b": a comment"), Some(10), "a line is counted while it is received, comment or not");
    }

    #[tokio::test]
    async fn events_within_the_limit_pass_and_one_over_it_answers_the_request() {
        let first = "event: message\ndata: {\"a\":1}\n\n";
        let body = chunks(&[first, "data: ", "0123456789", "0123456789", "0123456789\n\n", "data: 2\n\n"]);
        let events: Vec<_> = events(body, 30, Some(RequestId::Number(3))).collect().await;
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0].as_ref().unwrap().data.as_deref(), Some("{\"a\":1}"));
        let answer: ServerJsonRpcMessage =
            serde_json::from_str(events[1].as_ref().unwrap().data.as_ref().unwrap()).unwrap();
        let ServerJsonRpcMessage::Error(error) = answer else { panic!("an error: {answer:?}") };
        assert_eq!(error.id, Some(RequestId::Number(3)));
        assert!(super::super::too_large::is_answer(&error.error));
    }

    #[tokio::test]
    async fn an_event_ended_in_the_chunk_that_goes_over_is_still_parsed() {
        let body = chunks(&["data: 1\n\ndata: 0123456789012345678901234567890123456789"]);
        let events: Vec<_> = events(body, 20, None).collect().await;
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0].as_ref().unwrap().data.as_deref(), Some("1"));
        assert!(events[1].as_ref().is_err_and(|e| e.to_string().contains("larger than 20 bytes")), "{events:?}");
    }
}
