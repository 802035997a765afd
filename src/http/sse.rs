//! Frames as Server-Sent Events: `id: <seq>`, `event: <type>`, `data: <frame JSON>`, with a
//! `: keep-alive` comment every 15 s of silence.

use std::time::Duration;

use actix_web_lab::sse::{self, Sse};
use futures::{Stream, StreamExt};

use crate::run::follow::FollowError;
use crate::store::events::LoggedFrame;

pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub fn frame_stream<S>(frames: S) -> impl actix_web::Responder
where
    S: Stream<Item = Result<LoggedFrame, FollowError>> + 'static,
{
    let events = frames.map(|frame| {
        frame.map(|f| sse::Event::Data(sse::Data::new(f.json.to_string()).id(f.seq.to_string()).event(f.event_type)))
    });
    Sse::from_stream(events).with_keep_alive(KEEP_ALIVE)
}
