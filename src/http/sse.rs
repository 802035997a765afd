//! Frames as Server-Sent Events: `id: <seq>`, `event: <type>`, `data: <frame JSON>`, with a
//! `: keep-alive` comment every 15 s of silence.

use std::time::Duration;

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
            let data = redaction.text(&f.json).into_owned();
            sse::Event::Data(sse::Data::new(data).id(f.seq.to_string()).event(f.event_type))
        })
    });
    Sse::from_stream(events).with_keep_alive(KEEP_ALIVE)
}
