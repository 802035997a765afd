//! `/ui/feed` — what changes while a console page is open, pushed over SSE (never polled): the
//! number of pending decisions the viewer may see (every page's navigation shows it; sent whenever
//! which decisions are pending changes, so the inbox reads itself again), and, for the
//! run list (`?list=1` with its filters), each run that starts or changes, as the row the list
//! shows — or `gone` when it no longer passes the list's filters; and, for a run page (`?run=<id>`),
//! `changed` whenever that run commits anything, so a page that stopped following a paused run
//! follows it again once it is decided elsewhere. A caller hears only of its own runs: another
//! principal's run is never named, not even as `gone` (operators see every run).
//!
//! The feed has no replay: after a reconnect it starts with the pending count again, and a list
//! that may have missed changes (a reconnect, or a feed that fell behind) reads itself again.

use std::collections::VecDeque;
use std::sync::Arc;

use actix_web::{Responder, get, web};
use actix_web_lab::sse::{self, Sse};
use askama::Template;
use futures::Stream;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};

use super::runs::{BadFilter, Filters, Parsed, Row, RowHtml};
use crate::error_code::ErrorCode;
use crate::hash::HashSet;
use crate::http::{ApiError, Caller, Role};
use crate::run::inbox;
use crate::run::list::RunList;
use crate::services::Services;

#[derive(Debug, Deserialize)]
pub struct FeedQuery {
    /// Also send the run list's changes.
    #[serde(default)]
    list: Option<String>,
    /// Also say when this run changes (a run page).
    #[serde(default)]
    run: Option<String>,
    #[serde(flatten)]
    filters: Filters,
}

/// `GET /ui/feed?list=1&status=&q=&from=&to=`, or `GET /ui/feed?run=<id>`. A list's filter it
/// cannot read is refused (400 `invalid_query`) as the list page refuses it: the page never
/// links one.
#[get("/feed")]
pub async fn follow(
    caller: Caller,
    query: web::Query<FeedQuery>,
    services: web::Data<Services>,
) -> Result<impl Responder, ApiError> {
    let query = query.into_inner();
    let services = services.into_inner();
    let list = if query.list.is_some_and(|l| l == "1") {
        let refused =
            |BadFilter(reason)| ApiError::new(ErrorCode::InvalidQuery, format!("invalid query string: {reason}"));
        Some(query.filters.parse().map_err(refused)?)
    } else {
        None
    };
    // Only a run the viewer may see: the feed would otherwise tell whether a guessed id exists.
    let run = match query.run {
        Some(run) if may_see(&services, &caller, &run).await => Some(Arc::from(run)),
        _ => None,
    };
    let events = changes(services, caller, list, run);
    Ok(crate::http::Compact(Sse::from_stream(events).with_keep_alive(crate::http::KEEP_ALIVE)))
}

/// What a feed holds between events.
struct Feed {
    services: Arc<Services>,
    caller: Caller,
    list: Option<Parsed>,
    /// The run whose changes are sent as `changed`.
    run: Option<Arc<str>>,
    changed: broadcast::Receiver<Arc<str>>,
    /// The pending decisions last told of (`None` before the first).
    pending: Option<Vec<String>>,
    started: bool,
    queued: VecDeque<sse::Event>,
}

/// The feed's events: the pending count first, then what each committed change alters.
fn changes(
    services: Arc<Services>,
    caller: Caller,
    list: Option<Parsed>,
    run: Option<Arc<str>>,
) -> impl Stream<Item = Result<sse::Event, std::convert::Infallible>> {
    let changed = services.bus.changes();
    let feed = Feed { services, caller, list, run, changed, pending: None, started: false, queued: VecDeque::new() };
    futures::stream::unfold(feed, |mut feed| async move {
        loop {
            if let Some(event) = feed.queued.pop_front() {
                return Some((Ok(event), feed));
            }
            if feed.started {
                let first = match feed.changed.recv().await {
                    Ok(run_id) => Some(run_id),
                    Err(RecvError::Lagged(_)) => None,
                    Err(RecvError::Closed) => return None,
                };
                let (changed, behind) = burst(&mut feed.changed, first);
                if behind {
                    // Fell behind: the list reads itself again (a run page follows its run again).
                    feed.queued.push_back(sse::Data::new("{}").event("resync").into());
                    if let Some(run) = &feed.run {
                        feed.queued.push_back(run_changed(run));
                    }
                }
                for run_id in changed {
                    if feed.run.as_ref() == Some(&run_id) {
                        feed.queued.push_back(run_changed(&run_id));
                    }
                    if let Some(filters) = &feed.list {
                        let row = row_event(&feed.services, &feed.caller, filters, &run_id).await;
                        feed.queued.extend(row);
                    }
                }
            }
            feed.started = true;
            let pending = pending(&feed.services, &feed.caller).await;
            if pending.is_some() && pending != feed.pending {
                let count = pending.as_ref().map_or(0, Vec::len);
                feed.pending = pending;
                feed.queued.push_back(sse::Data::new(json!({"count": count}).to_string()).event("pending").into());
            }
        }
    })
}

/// The runs changed in a burst, `first` (`None`: the feed fell behind) and those already waiting
/// behind it, each once in the order they changed; and whether the feed fell behind meanwhile.
/// A commit of the writer often holds many runs' frames: taken together, they cost one look at
/// what is pending and one row per run, not one look per frame.
fn burst(changes: &mut broadcast::Receiver<Arc<str>>, first: Option<Arc<str>>) -> (Vec<Arc<str>>, bool) {
    let mut behind = first.is_none();
    let mut changed: Vec<Arc<str>> = first.into_iter().collect();
    let mut seen: HashSet<Arc<str>> = changed.iter().cloned().collect();
    loop {
        match changes.try_recv() {
            Ok(run_id) => {
                if seen.insert(run_id.clone()) {
                    changed.push(run_id);
                }
            }
            Err(TryRecvError::Lagged(_)) => behind = true,
            Err(TryRecvError::Empty | TryRecvError::Closed) => return (changed, behind),
        }
    }
}

/// `changed` for the run a run page follows: the page picks its stream up again.
fn run_changed(run_id: &str) -> sse::Event {
    sse::Data::new(json!({"runId": run_id}).to_string()).event("changed").into()
}

/// The changed run as the list shows it, or `gone` if the list's filters no longer keep it; nothing
/// for a run the viewer may not see.
async fn row_event(services: &Services, caller: &Caller, filters: &Parsed, run_id: &str) -> Option<sse::Event> {
    let query = filters.query(caller, Some(run_id.to_string()));
    let page = RunList::read(services, query, None, 1).await.ok()?;
    let Some(run) = page.runs.into_iter().next() else {
        return may_see(services, caller, run_id)
            .await
            .then(|| sse::Data::new(json!({"runId": run_id}).to_string()).event("gone").into());
    };
    let status = run.status;
    let html = RowHtml { run: Row::of(run, caller), operator: caller.role == Role::Operator }.render().ok()?;
    let data = json!({"runId": run_id, "status": status, "html": html}).to_string();
    Some(sse::Data::new(data).event("run").into())
}

/// Whether `caller` may see run `run_id`: asked with the list's own query, without its filters.
async fn may_see(services: &Services, caller: &Caller, run_id: &str) -> bool {
    if caller.role == Role::Operator {
        return true;
    }
    let query = Parsed::none().query(caller, Some(run_id.to_string()));
    RunList::read(services, query, None, 1).await.is_ok_and(|page| !page.runs.is_empty())
}

/// The requests of the decisions pending that `caller` may see (at most [`inbox::LIMIT`]). Their
/// number can stay the same while they change (one answered, another asked, between two looks).
async fn pending(services: &Services, caller: &Caller) -> Option<Vec<String>> {
    let pending = inbox::read(services, caller.owner_filter().map(String::from)).await.ok()?;
    Some(pending.into_iter().map(|pending| pending.request_id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_takes_every_change_waiting_each_run_once_in_order() {
        let (sender, mut changes) = broadcast::channel::<Arc<str>>(4);
        for run in ["b", "a", "b", "c"] {
            sender.send(Arc::from(run)).ok();
        }
        let first = changes.try_recv().ok();
        let (changed, behind) = burst(&mut changes, first);
        assert_eq!(changed.iter().map(|r| &**r).collect::<Vec<_>>(), ["b", "a", "c"]);
        assert!(!behind);
        assert_eq!(burst(&mut changes, None), (vec![], true), "a feed that fell behind says so");
        for run in ["a", "b", "c", "d", "e", "f"] {
            sender.send(Arc::from(run)).ok();
        }
        let (changed, behind) = burst(&mut changes, Some(Arc::from("z")));
        assert_eq!(changed.iter().map(|r| &**r).collect::<Vec<_>>(), ["z", "c", "d", "e", "f"]);
        assert!(behind, "two changes were lost to the channel's capacity");
    }
}
