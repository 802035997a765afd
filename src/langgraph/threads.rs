//! `/info`, the one assistant, and threads: create, read, search, their state and history.

use actix_web::{HttpResponse, get, post, web};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::checkpoints;
use super::request::ASSISTANT;
use super::{bounded_metadata, chat_of, project, state_at, time, visible_thread};
use crate::error_code::ErrorCode;
use crate::http::paging::PageSize;
use crate::http::{ApiError, Body, Caller};
use crate::services::Services;
use crate::store::runs::RunRow;
use crate::store::threads::{self as thread_rows, ThreadRow};
use crate::thread::{self, ThreadError, ThreadId};

/// Threads a search returns at most.
const MAX_SEARCH: i64 = 100;

/// Thread ids a search may list at most: each is a variable bound to the query, which the
/// database limits (SQLite to 32,766); a client lists a page of threads it knows, far fewer.
const MAX_SEARCH_IDS: usize = 1_000;

/// The most threads a search skips (`offset`): each is read to be skipped, so an offset is a scan.
const MAX_SEARCH_OFFSET: u32 = 10_000;

/// `GET /info`: what this server is (clients use it as a health check).
#[get("/info")]
pub async fn info() -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "langgraph_py_version": null,
        "flags": {"assistants": true, "crons": false, "langsmith": false},
        "metadata": {"server": "flexrun"},
    }))
}

fn assistant() -> Value {
    let epoch = "2026-01-01T00:00:00+00:00";
    json!({
        "assistant_id": ASSISTANT, "graph_id": ASSISTANT, "name": ASSISTANT, "version": 1,
        "description": "Plans the objective into capability steps and replans until its goal conditions hold.",
        "config": {}, "context": {}, "metadata": {"created_by": "system"}, "created_at": epoch, "updated_at": epoch,
    })
}

/// `POST /assistants/search`: the one assistant.
#[post("/assistants/search")]
pub async fn search_assistants(_caller: Caller) -> HttpResponse {
    HttpResponse::Ok().json(json!([assistant()]))
}

/// `GET /assistants/{id}`.
#[get("/assistants/{id}")]
pub async fn get_assistant(_caller: Caller, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    if id.as_str() != ASSISTANT {
        return Err(ApiError::not_found(
            ErrorCode::AssistantNotFound,
            format!("assistant {}", crate::excerpt::excerpt(&id, 60)),
        ));
    }
    Ok(HttpResponse::Ok().json(assistant()))
}

/// A thread as LangGraph's `Thread`: its status and values are its newest run's.
pub async fn thread_json(services: &Services, thread: &ThreadRow, newest: Option<RunRow>) -> Result<Value, ApiError> {
    let metadata: Value = serde_json::from_str(&thread.metadata).unwrap_or_else(|_| json!({}));
    let (status, values, interrupts) = match newest {
        None => ("idle", json!({}), json!({})),
        Some(row) => {
            let chat = chat_of(&row);
            let objective = row.objective.clone();
            let state = state_at(services, row, None).await?;
            let interrupts = project::interrupts(&state);
            let by_run =
                if interrupts.is_empty() { json!({}) } else { json!({ state.run_id.to_string(): interrupts }) };
            (
                project::thread_status(Some(state.status)),
                project::values(&state, &objective, chat.as_deref(), &services.redaction),
                by_run,
            )
        }
    };
    Ok(services.redaction.value(json!({
        "thread_id": thread.thread_id, "created_at": time(thread.created_at), "updated_at": time(thread.updated_at),
        "metadata": metadata, "status": status, "values": values, "interrupts": interrupts,
    })))
}

/// Refuses keys it does not list (`supersteps`, `ttl`): they would change what the thread holds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateThread {
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    if_exists: Option<String>,
}

/// `POST /threads` `{thread_id?, metadata?, if_exists?: raise|do_nothing}`.
#[post("/threads")]
pub async fn create_thread(
    caller: Caller,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let body: CreateThread =
        if body.is_blank() { CreateThread { thread_id: None, metadata: None, if_exists: None } } else { body.json()? };
    let thread_id = body
        .thread_id
        .as_deref()
        .map(ThreadId::parse)
        .transpose()
        .map_err(|error| ApiError::new(ErrorCode::InvalidThreadId, format!("thread_id: {error}")))?;
    let keep_existing = match body.if_exists.as_deref() {
        None | Some("raise") => false,
        Some("do_nothing") => true,
        Some(_) => {
            return Err(ApiError::new(ErrorCode::InvalidRequest, "if_exists must be \"raise\" or \"do_nothing\""));
        }
    };
    bounded_metadata(body.metadata.as_ref())?;
    let metadata = body.metadata.unwrap_or_default();
    let (thread, newest) = match thread::create(&services.store, &caller, thread_id, metadata).await {
        // A thread this request made has no run yet: its answer needs no read.
        Ok(thread) => (thread, None),
        // `do_nothing` answers with the caller's own thread; anyone else's is in use, as with
        // `raise`, so an answer never tells whose a thread is.
        Err(ThreadError::InUse(id)) if keep_existing => {
            match thread::visible_with_newest(&services.store, &caller, &id).await {
                Err(ThreadError::NotFound(_)) => return Err(ThreadError::InUse(id).into()),
                found => found?,
            }
        }
        Err(error) => return Err(error.into()),
    };
    Ok(HttpResponse::Ok().json(thread_json(&services, &thread, newest).await?))
}

/// `GET /threads/{tid}`.
#[get("/threads/{tid}")]
pub async fn get_thread(
    caller: Caller,
    tid: web::Path<String>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let (thread, newest) = thread::visible_with_newest(&services.store, &caller, &tid).await?;
    Ok(HttpResponse::Ok().json(thread_json(&services, &thread, newest).await?))
}

/// Refuses keys it does not list (`values`, `select`, `extract`): flexrun cannot search or shape
/// threads by them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchThreads {
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    ids: Option<Vec<String>>,
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    offset: Option<u32>,
    #[serde(default)]
    sort_by: Option<String>,
    #[serde(default)]
    sort_order: Option<String>,
}

impl SearchThreads {
    /// Refuses (400) filters past their bounds ([`super::MAX_METADATA_KEYS`] keys of `metadata`,
    /// [`MAX_SEARCH_IDS`] `ids`) before any query is built: a query of such size would fail in the
    /// database, or overflow the stack as it is built. An `offset` beyond [`MAX_SEARCH_OFFSET`]
    /// is refused too: the threads it skips are read.
    fn bounded(&self) -> Result<(), ApiError> {
        bounded_metadata(self.metadata.as_ref())?;
        if let Some(ids) = self.ids.as_ref().map(Vec::len).filter(|&ids| ids > MAX_SEARCH_IDS) {
            let message = format!("`ids` lists at most {MAX_SEARCH_IDS} threads, not {ids}");
            return Err(ApiError::new(ErrorCode::InvalidRequest, message));
        }
        if let Some(offset) = self.offset.filter(|&offset| offset > MAX_SEARCH_OFFSET) {
            let message = format!("`offset` is at most {MAX_SEARCH_OFFSET}, not {offset}: narrow the search instead");
            return Err(ApiError::new(ErrorCode::InvalidRequest, message));
        }
        Ok(())
    }
}

/// Threads read from the database per query while a search filters them by status.
const SEARCH_BATCH: i64 = 200;

/// `POST /threads/search` `{metadata?, status?, ids?, limit?, offset?}`: the caller's threads,
/// most recently updated first. A metadata filter keeps threads whose metadata has each key with
/// that value (found by the `thread_metadata` index); a status filter reads the threads a batch
/// at a time until the page is full, so every match is found. Filters are bounded
/// ([`SearchThreads::bounded`]).
#[post("/threads/search")]
pub async fn search_threads(
    caller: Caller,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let query: SearchThreads = if body.is_blank() { SearchThreads::default() } else { body.json()? };
    query.bounded()?;
    let limit = PageSize { default: 10, max: MAX_SEARCH }.of_body(query.limit)?;
    if query.sort_by.as_deref().is_some_and(|s| s != "updated_at")
        || query.sort_order.as_deref().is_some_and(|s| s != "desc")
    {
        return Err(ApiError::new(ErrorCode::InvalidRequest, "threads are sorted by updated_at, desc, only"));
    }
    if let Some(status) = &query.status
        && !["idle", "busy", "interrupted", "error"].contains(&status.as_str())
    {
        return Err(ApiError::new(ErrorCode::InvalidRequest, "status must be idle, busy, interrupted or error"));
    }
    let wanted = usize::try_from(limit).unwrap_or_default();
    let mut skip = query.offset.unwrap_or(0);
    let owner = caller.owner_filter().map(String::from);
    let metadata: Vec<(String, String)> =
        query.metadata.iter().flatten().map(|(key, value)| thread_rows::metadata_entry(key, value)).collect();
    let (ids, status) = (query.ids, query.status);
    let found = services
        .store
        .read(move |conn| {
            let search = thread_rows::Search { owner: owner.as_deref(), ids: ids.as_deref(), metadata: &metadata };
            let mut found: Vec<(ThreadRow, Option<RunRow>)> = Vec::new();
            let mut after: Option<(chrono::NaiveDateTime, String)> = None;
            while found.len() < wanted {
                let batch = thread_rows::search(
                    conn,
                    &search,
                    after.as_ref().map(|(at, id)| (*at, id.as_str())),
                    SEARCH_BATCH,
                )?;
                let done = i64::try_from(batch.len()).unwrap_or_default() < SEARCH_BATCH;
                after = batch.last().map(|t| (t.updated_at, t.thread_id.clone()));
                for thread in batch {
                    // Without a status filter a thread skipped needs no more reading.
                    if status.is_none() && skip > 0 {
                        skip -= 1;
                        continue;
                    }
                    let newest = thread_rows::newest_run(conn, &thread.thread_id)?;
                    let status_now = project::thread_status(newest.as_ref().map(|r| r.status));
                    if status.as_deref().is_some_and(|wanted| wanted != status_now) {
                        continue;
                    }
                    if skip > 0 {
                        skip -= 1;
                    } else if found.len() < wanted {
                        found.push((thread, newest));
                    }
                }
                if done {
                    break;
                }
            }
            Ok(found)
        })
        .await?;
    let mut page = Vec::new();
    for (thread, newest) in found {
        page.push(thread_json(&services, &thread, newest).await?);
    }
    Ok(HttpResponse::Ok().json(page))
}

/// A run's state as LangGraph's `ThreadState`: values, the nodes it waits on, its open
/// interrupts, and a checkpoint naming the run and the frame it is as of.
async fn thread_state(services: &Services, thread_id: &str, row: Option<RunRow>) -> Result<Value, ApiError> {
    let Some(row) = row else {
        return Ok(json!({"values": {}, "next": [], "tasks": [], "interrupts": [], "metadata": {}, "created_at": null,
            "checkpoint": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": null, "checkpoint_map": null},
            "parent_checkpoint": null}));
    };
    let (chat, objective, updated_at) = (chat_of(&row), row.objective.clone(), row.updated_at);
    let state = state_at(services, row, None).await?;
    let checkpoint_id = format!("{}:{}", state.run_id, state.last_seq.get());
    let metadata = json!({"run_id": state.run_id, "step": state.last_seq.get(), "source": "loop", "graph_id": "flex"});
    let values = project::values(&state, &objective, chat.as_deref(), &services.redaction);
    let state = checkpoints::state_json(thread_id, &state, values, &checkpoint_id, None, metadata, &time(updated_at));
    Ok(services.redaction.value(state))
}

/// `GET /threads/{tid}/state`: the state of the thread's newest run.
#[get("/threads/{tid}/state")]
pub async fn thread_state_now(
    caller: Caller,
    tid: web::Path<String>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let (_, newest) = thread::visible_with_newest(&services.store, &caller, &tid).await?;
    Ok(HttpResponse::Ok().json(thread_state(&services, &tid, newest).await?))
}

/// `POST /threads/{tid}/history` `{limit?, before?, metadata?, checkpoint?}`: the thread's
/// checkpoints, newest first — after each plan version and each completed step of every run, and
/// at each run's last frame — with the values as of each (`checkpoints`).
#[post("/threads/{tid}/history")]
pub async fn thread_history(
    caller: Caller,
    tid: web::Path<String>,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let query: checkpoints::History = if body.is_blank() { checkpoints::History::default() } else { body.json()? };
    visible_thread(&services, &caller, &tid).await?;
    let limit = PageSize { default: 10, max: 100 }.of_body(query.limit)?;
    Ok(HttpResponse::Ok().json(checkpoints::history(&services, &tid, query, limit).await?))
}

/// `GET /threads/{tid}/history?limit=&before=`: the same list, as LangGraph's server also serves it.
#[get("/threads/{tid}/history")]
pub async fn thread_history_get(
    caller: Caller,
    tid: web::Path<String>,
    query: web::Query<HistoryQuery>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    visible_thread(&services, &caller, &tid).await?;
    let query = query.into_inner();
    let limit = PageSize { default: 10, max: 100 }.of_query(query.limit)?;
    let history =
        checkpoints::History { limit: query.limit, before: query.before.map(Value::String), ..Default::default() };
    Ok(HttpResponse::Ok().json(checkpoints::history(&services, &tid, history, limit).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    limit: Option<i64>,
    before: Option<String>,
}
