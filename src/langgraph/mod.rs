//! The LangGraph Agent Server API, the subset the official clients call (`langgraph-sdk`,
//! `useStream`, Agent Chat UI), as a second surface over flex runs: one assistant, `flex`; a
//! thread groups the runs started on it; a run is a flex run, streamed in LangGraph's modes with
//! `id: <seq>`; interrupts are the run's operator requests, answered by a new run with
//! `command.resume`. The mapping is written down in `docs/langgraph-api.md`.
//!
//! ```text
//! request, chat (pure: body → action) ──► runs / threads (handlers) ──► begin ──► run::start / run::apply
//!                                                   │
//!                     stream (Translator: frames → events) ◄── run::follow, RunState::apply
//!                                                   │
//!                                      project (pure: RunState → values, interrupts)
//! ```

mod begin;
mod chat;
mod checkpoints;
mod project;
pub mod request;
mod runs;
mod started;
mod stream;
mod threads;
mod values;

pub use chat::last_human_text;

use actix_web::http::Method;
use actix_web::web;
use chrono::NaiveDateTime;
use serde_json::{Map, Value};

use crate::error_code::ErrorCode;
use crate::events::Seq;
use crate::http::{ApiError, Caller};
use crate::run::RunId;
use crate::run::state::RunState;
use crate::run::view::{ViewError, state_of};
use crate::services::Services;
use crate::store::StoreError;
use crate::store::runs::RunRow;
use crate::store::threads::ThreadRow;

/// Registers the LangGraph routes at the root, beside `/api/v1/flex` and `/ui`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    crate::http::SurfaceRoutes::register(cfg, &ENDPOINTS);
    // The two requests of a run started on a new thread come first: actix tries routes in order,
    // and matches each route with a parameter by a regular expression.
    cfg.service(threads::create_thread)
        .service(runs::stream_on_thread)
        .service(threads::info)
        .service(threads::search_assistants)
        .service(threads::get_assistant)
        .service(threads::search_threads)
        .service(threads::get_thread)
        .service(threads::thread_state_now)
        .service(threads::thread_history)
        .service(threads::thread_history_get)
        .service(runs::stream_stateless)
        .service(runs::wait_on_thread)
        .service(runs::wait_stateless)
        .service(runs::create_on_thread)
        .service(runs::create_stateless)
        .service(runs::list_runs)
        .service(runs::get_run)
        .service(runs::join_stream)
        .service(runs::join)
        .service(runs::cancel);
}

/// Every route [`routes`] registers, by method and path: a request with another method on one of
/// these paths is answered 405 with `Allow` (as the API's are), not 404 — which the SDK reads as
/// "no such thread".
const ENDPOINTS: [(Method, &str); 20] = [
    (Method::POST, "/threads"),
    (Method::POST, "/threads/{tid}/runs/stream"),
    (Method::GET, "/info"),
    (Method::POST, "/assistants/search"),
    (Method::GET, "/assistants/{id}"),
    (Method::POST, "/threads/search"),
    (Method::GET, "/threads/{tid}"),
    (Method::GET, "/threads/{tid}/state"),
    (Method::POST, "/threads/{tid}/history"),
    (Method::GET, "/threads/{tid}/history"),
    (Method::POST, "/runs/stream"),
    (Method::POST, "/threads/{tid}/runs/wait"),
    (Method::POST, "/runs/wait"),
    (Method::POST, "/threads/{tid}/runs"),
    (Method::POST, "/runs"),
    (Method::GET, "/threads/{tid}/runs"),
    (Method::GET, "/threads/{tid}/runs/{rid}"),
    (Method::GET, "/threads/{tid}/runs/{rid}/stream"),
    (Method::GET, "/threads/{tid}/runs/{rid}/join"),
    (Method::POST, "/threads/{tid}/runs/{rid}/cancel"),
];

/// The most keys a thread's metadata, or a metadata filter (of a thread search or a history),
/// may have. A search's query holds a condition per key, nested: tens of thousands of them
/// overflowed the stack building it, and a thousand the database's limits; a thread's metadata is
/// indexed a row per key, written in the commit that makes the thread. Clients use a few keys:
/// the bound is far above.
pub const MAX_METADATA_KEYS: usize = 64;

/// Refuses (400) metadata of more than [`MAX_METADATA_KEYS`] keys, before anything is read or
/// written.
fn bounded_metadata(metadata: Option<&Map<String, Value>>) -> Result<(), ApiError> {
    match metadata.map(Map::len) {
        Some(keys) if keys > MAX_METADATA_KEYS => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("`metadata` has at most {MAX_METADATA_KEYS} keys, not {keys}"),
        )),
        _ => Ok(()),
    }
}

/// LangGraph's time format.
fn time(at: NaiveDateTime) -> String {
    crate::run::state::rfc3339(at.and_utc())
}

fn run_not_found(run_id: &str) -> ApiError {
    ApiError::not_found(ErrorCode::RunNotFound, format!("run {}", crate::excerpt::excerpt(run_id, 80)))
}

/// The thread, if `caller` may see it (404, as for one that does not exist, if not).
async fn visible_thread(services: &Services, caller: &Caller, thread_id: &str) -> Result<ThreadRow, ApiError> {
    Ok(crate::thread::visible(&services.store, caller, thread_id).await?)
}

/// Run `run_id` of thread `thread_id`, if `caller` may see the thread.
async fn run_of_thread(
    services: &Services,
    caller: &Caller,
    thread_id: &str,
    run_id: &str,
) -> Result<RunRow, ApiError> {
    visible_thread(services, caller, thread_id).await?;
    let id = RunId::parse(run_id).map_err(|_| run_not_found(run_id))?;
    let lookup = id.to_string();
    let row = services.store.read(move |conn| crate::store::runs::get(conn, &lookup)).await.map_err(|e| match e {
        StoreError::NotFound(_) => run_not_found(run_id),
        other => other.into(),
    })?;
    if row.thread_id.as_deref() != Some(thread_id) {
        return Err(run_not_found(run_id));
    }
    Ok(row)
}

/// The run's state after its frame `upto` (all of its log if `None`), as LangGraph readers keep
/// it (`project::lighten`).
async fn state_at(services: &Services, row: RunRow, upto: Option<Seq>) -> Result<RunState, ApiError> {
    let _reading = services.run_reads.acquire().await;
    let reader = project::Lightened(row.run_id.clone());
    let read = state_of(services, &row, upto, reader).await.map(|(state, _)| state);
    read.map_err(|error| match error {
        ViewError::Store(error) => error.into(),
        ViewError::Unreadable(error) => ApiError::internal(error),
    })
}

/// The chat messages a run was started with, if it was started from a chat input.
fn chat_of(row: &RunRow) -> Option<Vec<Value>> {
    serde_json::from_str::<Value>(&row.envelope).ok().and_then(|e| chat::stored_messages(&e))
}

#[cfg(test)]
mod tests {
    use actix_web::http::header;
    use actix_web::test::{TestRequest, call_service, init_service, read_body};
    use actix_web::{App, body::MessageBody};
    use serde_json::Value;

    use super::*;

    #[actix_web::test]
    async fn every_route_is_listed_and_other_methods_on_its_path_are_405() {
        // No app data: the handlers fail, but after routing, which is what this checks.
        let app = init_service(App::new().configure(crate::http::routes).configure(routes)).await;
        let call = |method: &Method, path: &str| {
            call_service(&app, TestRequest::default().method(method.clone()).uri(path).to_request())
        };
        let unrouted = |body: &[u8]| {
            let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            ["not_found", "method_not_allowed"].contains(&body["error"]["code"].as_str().unwrap_or_default())
        };
        for (method, pattern) in &ENDPOINTS {
            let path = pattern.replace("{tid}", "t-1").replace("{rid}", "r-1").replace("{id}", "flex");
            let routed = call(method, &path).await;
            assert!(!unrouted(&read_body(routed).await), "{method} {path} reaches no handler");
            let answer = call(&Method::DELETE, &path).await;
            let allow = answer.headers().get(header::ALLOW).and_then(|v| v.to_str().ok()).map(String::from);
            assert_eq!(answer.status().as_u16(), 405, "DELETE {path}");
            assert!(allow.is_some_and(|allow| allow.contains(method.as_str())), "DELETE {path}");
        }
        let answer = call(&Method::PATCH, "/threads/t-1").await;
        let allow = answer.headers().get(header::ALLOW).cloned();
        assert_eq!((answer.status().as_u16(), allow), (405, Some(header::HeaderValue::from_static("GET, HEAD"))));
        let missing = call(&Method::GET, "/threads/t-1/nope").await;
        assert_eq!(missing.status().as_u16(), 404);
        assert!(unrouted(&missing.into_body().try_into_bytes().unwrap_or_default()));
    }
}
