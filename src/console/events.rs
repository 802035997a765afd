//! A run's frames as pages show them: the run page renders the tail of the log (the newest
//! [`TAIL`] frames, within `limits.stream_page_bytes` of frame text) and follows the rest live;
//! `/ui/runs/{id}/events?before=N` pages back through older ones, `?after=N` forward. Each frame
//! is one line (seq, type, node, time) that opens to its JSON, redacted like every read path.

use actix_web::{HttpResponse, get, web};
use askama::Template;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::page::{self, Chrome};
use super::shown;
use super::viewer::Viewer;
use crate::events::{FrameKind, Seq};
use crate::hash::HashMap;
use crate::redact::Redaction;
use crate::run::RunId;
use crate::services::Services;
use crate::store::StoreError;
use crate::store::events::{self as log, LogPage, LoggedFrame};

/// Frames a page shows at once.
pub const TAIL: i64 = 200;

/// The most frames of each kind [`facts`] reads (retries, node starts): far more than a run has.
/// Their text is bounded too, as a page's.
const FACTS_READ: i64 = 10_000;

/// One frame, as a line of the event list.
pub struct EventItem {
    pub seq: u64,
    pub kind: String,
    pub node_id: String,
    pub at: String,
    pub json: String,
}

impl EventItem {
    fn of(frame: &LoggedFrame, redaction: &Redaction) -> Self {
        let header: Value = serde_json::from_str(&frame.json).unwrap_or(Value::Null);
        let text = |key: &str| header.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        Self {
            seq: frame.seq.get(),
            kind: frame.event_type.clone(),
            node_id: text("nodeId"),
            at: text("timestamp"),
            json: shown::json_text(redaction, &frame.json),
        }
    }
}

/// Frames as a page lists them, and whether the log has more beyond them.
pub struct EventList {
    pub items: Vec<EventItem>,
    pub more: bool,
}

impl EventList {
    fn of(page: LogPage, redaction: &Redaction) -> Self {
        Self { items: page.frames.iter().map(|f| EventItem::of(f, redaction)).collect(), more: page.more }
    }

    /// The seq of the oldest frame listed, when older ones exist (of a list read backwards).
    pub fn earlier(&self) -> Option<u64> {
        self.items.first().map(|e| e.seq).filter(|_| self.more)
    }
}

/// A page of at most `frames` frames and `limits.stream_page_bytes` of their text.
fn page(services: &Services, frames: i64) -> log::Page {
    log::Page { frames, bytes: services.settings.limits.stream_page_bytes }
}

/// The newest frames before `before` (the log's tail when `before` is past its end), as many as
/// a page holds.
pub async fn page_before(services: &Services, run_id: &RunId, before: Seq) -> Result<EventList, StoreError> {
    let id = run_id.to_string();
    let page = page(services, TAIL);
    let frames = services.store.read(move |conn| log::page_before(conn, &id, before, None, page)).await?;
    Ok(EventList::of(frames, &services.redaction))
}

/// The frames after `after`, as many as a page holds (`more`: newer ones exist).
async fn page_after(services: &Services, run_id: &RunId, after: Seq) -> Result<EventList, StoreError> {
    let id = run_id.to_string();
    let page = page(services, TAIL);
    let frames = services.store.read(move |conn| log::page_after(conn, &id, after, page)).await?;
    Ok(EventList::of(frames, &services.redaction))
}

/// What a run's frames say that its view does not: how often each node's call was retried, and
/// what each step received (`node_start.inputs`), by plan version and node id.
#[derive(Default)]
pub struct FrameFacts {
    pub retries: HashMap<String, u32>,
    pub received: HashMap<(u32, String), Map<String, Value>>,
}

/// The [`FrameFacts`] of `run_id`.
pub async fn facts(services: &Services, run_id: &RunId) -> Result<FrameFacts, StoreError> {
    let id = run_id.to_string();
    let page = page(services, FACTS_READ);
    let of_kind = move |conn: &mut crate::store::DbConn, kind| log::page_before(conn, &id, Seq::MAX, Some(kind), page);
    let (retries, starts) = services
        .store
        .read(move |conn| Ok((of_kind(conn, "retry")?.frames, of_kind(conn, "node_start")?.frames)))
        .await?;
    let mut facts = FrameFacts::default();
    for frame in retries {
        let header: Value = serde_json::from_str(&frame.json).unwrap_or(Value::Null);
        if let Some(node) = header.get("nodeId").and_then(Value::as_str) {
            *facts.retries.entry(node.to_string()).or_insert(0) += 1;
        }
    }
    for frame in starts {
        let Ok(mut header) = serde_json::from_str::<Value>(&frame.json) else { continue };
        let version = header.get("planVersion").and_then(Value::as_u64).and_then(|v| u32::try_from(v).ok());
        let node = header.get("nodeId").and_then(Value::as_str).map(String::from);
        if let (Some(version), Some(node), Value::Object(inputs)) = (version, node, header["payload"]["inputs"].take())
        {
            facts.received.insert((version, node), inputs);
        }
    }
    Ok(facts)
}

/// The frame types, for the list's filter and the page's `EventSource`.
pub fn kinds() -> Vec<&'static str> {
    FrameKind::names().collect()
}

#[derive(Template)]
#[template(path = "console/events.html")]
struct EventsPage {
    chrome: Chrome,
    run_id: String,
    objective: String,
    events: Vec<EventItem>,
    kinds: Vec<&'static str>,
    /// The links to older frames (`before` the first listed) and to newer ones (`after` the last).
    earlier: Option<u64>,
    later: Option<u64>,
}

impl page::Page for EventsPage {
    fn chrome(&self) -> &Chrome {
        &self.chrome
    }
}

/// Where in the log a page of frames is: before seq N, or after it (the log's tail without
/// either; `before` when both are given). A value that is no seq is refused (400, as any query a
/// page cannot read).
#[derive(Debug, Deserialize)]
pub struct Position {
    before: Option<Seq>,
    after: Option<Seq>,
}

/// `GET /ui/runs/{id}/events?before=N` (`?after=N`): the frames before (after) seq N, as many as
/// a page holds.
#[get("/runs/{id}/events")]
pub async fn history(
    viewer: Viewer,
    id: web::Path<String>,
    query: web::Query<Position>,
    services: web::Data<Services>,
) -> HttpResponse {
    let not_found =
        || page::message(Some(&viewer), 404, "Run not found", "There is no run with this id that you may see.");
    let Ok(run_id) = RunId::parse(&id) else { return not_found() };
    let row = match viewer.run_row(&services, &run_id).await {
        Ok(Some(row)) => row,
        Ok(None) => return not_found(),
        Err(error) => return super::runs::unavailable(&viewer, &error),
    };
    let (before, after) = (query.before, query.after);
    let read = match (before, after) {
        (None, Some(after)) => page_after(&services, &run_id, after).await,
        (before, _) => page_before(&services, &run_id, before.unwrap_or(Seq::MAX)).await,
    };
    let list = match read {
        Ok(list) => list,
        Err(error) => return super::runs::unavailable(&viewer, &error),
    };
    let (first, last) = (list.items.first().map(|e| e.seq), list.items.last().map(|e| e.seq));
    let (earlier, later) = match (before, after) {
        // Read forwards: newer frames are the page's `more`; every seq before the first is older.
        (None, Some(_)) => (first.filter(|&seq| seq > 1), last.filter(|_| list.more)),
        // Read backwards: older frames are the page's `more`; newer ones those from `before`.
        (before, _) => (list.earlier(), last.filter(|_| before.is_some())),
    };
    page::html(&EventsPage {
        chrome: Chrome::new("runs", Some(&viewer)),
        run_id: run_id.to_string(),
        objective: crate::excerpt::excerpt(&row.objective, 200).into_owned(),
        earlier,
        later,
        events: list.items,
        kinds: kinds(),
    })
}
