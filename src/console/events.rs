//! A run's frames as pages show them: the run page renders the tail of the log (the newest
//! [`TAIL`] frames) and follows the rest live; `/ui/runs/{id}/events?before=N` pages back
//! through older ones. Each frame is one line (seq, type, node, time) that opens to its JSON,
//! redacted like every read path.

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
use crate::store::events::{self as log, LoggedFrame};

/// Frames a page shows at once.
pub const TAIL: i64 = 200;

/// The most frames of each kind [`facts`] reads (retries, node starts): far more than a run has.
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

/// The newest frames before `before` (all of the log's tail when `before` is past its end).
pub async fn page_before(services: &Services, run_id: &RunId, before: Seq) -> Result<Vec<EventItem>, StoreError> {
    let id = run_id.to_string();
    let frames = services.store.read(move |conn| log::before(conn, &id, before, TAIL)).await?;
    Ok(frames.iter().map(|f| EventItem::of(f, &services.redaction)).collect())
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
    let (retries, starts) = services
        .store
        .read(move |conn| {
            Ok((log::of_type(conn, &id, "retry", FACTS_READ)?, log::of_type(conn, &id, "node_start", FACTS_READ)?))
        })
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
    /// The link to older frames, and to newer ones.
    earlier: Option<u64>,
    later: Option<u64>,
}

impl page::Page for EventsPage {
    fn chrome(&self) -> &Chrome {
        &self.chrome
    }
}

#[derive(Debug, Deserialize)]
pub struct Before {
    before: Option<String>,
}

/// `GET /ui/runs/{id}/events?before=N`: the [`TAIL`] frames before seq N.
#[get("/runs/{id}/events")]
pub async fn history(
    viewer: Viewer,
    id: web::Path<String>,
    query: web::Query<Before>,
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
    let before = query.before.as_deref().and_then(|b| Seq::parse(b).ok()).unwrap_or(Seq::MAX);
    let events = match page_before(&services, &run_id, before).await {
        Ok(events) => events,
        Err(error) => return super::runs::unavailable(&viewer, &error),
    };
    let first = events.first().map(|e| e.seq);
    page::html(&EventsPage {
        chrome: Chrome::new("runs", Some(&viewer)),
        run_id: run_id.to_string(),
        objective: crate::excerpt::excerpt(&row.objective, 200).into_owned(),
        earlier: first.filter(|&seq| seq > 1),
        later: (before != Seq::MAX).then(|| before.get().saturating_add(TAIL.unsigned_abs())),
        events,
        kinds: kinds(),
    })
}
