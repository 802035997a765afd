//! Run endpoints: start a run and stream it, read a run, page or follow its event log.

use std::sync::Arc;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, Responder, get, post, web};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::Caller;
use super::body::Body;
use super::error::ApiError;
use super::idempotency;
use super::paging::{self, PageSize};
use super::sse::frame_stream;
use super::traceparent::CallerSpan;
use crate::correlation::{self, InvalidCorrelationId};
use crate::envelope::{self, TaskEnvelope};
use crate::error_code::ErrorCode;
use crate::events::Seq;
use crate::run::follow::follow;
use crate::run::list::{RunList, RunQuery};
use crate::run::view::{RunView, ViewError};
use crate::run::{Origin, RunId, RunStatus, StartedRun};
use crate::services::Services;
use crate::store::runs::RunRow;
use crate::store::{StoreError, events as event_log, runs};
use crate::thread::ThreadRule;
use crate::thread::{self, ThreadId};
use crate::validation::FieldError;

/// `POST /api/v1/flex/run.stream`: validates the envelope, creates the run and streams its frames.
/// The run goes on if the client disconnects; `Location` says where to re-attach.
#[post("/run.stream")]
pub async fn run_stream(
    req: HttpRequest,
    caller: Caller,
    CallerSpan(trace_parent): CallerSpan,
    body: Body,
    services: web::Data<Services>,
) -> Result<impl Responder, ApiError> {
    let body = body.json_bytes()?;
    let envelope = envelope::parse(body, &services.registry.catalog())?;
    let correlation_id = correlation_id(&req)?;
    let idempotency = idempotency::from_request(&req, &caller, body)?;
    let owner = run_owner(&services, &caller, &envelope, "").await?;
    let services: Arc<Services> = services.into_inner();
    let origin = Origin { correlation_id, idempotency, owner: &owner, thread_rule: ThreadRule::Shared, trace_parent };
    let run = crate::run::start(&services, envelope, origin).await?;
    Ok(started(run, &services))
}

/// A run just started (or re-joined by its idempotency key), streamed: its frames, where to
/// re-attach, its id.
pub(super) fn started(run: StartedRun, services: &Services) -> impl Responder + use<> {
    let mut response = frame_stream(run.frames, &services.redaction, &services.backlogs).customize();
    if run.replayed {
        response = response.insert_header(("idempotent-replayed", "true"));
    }
    response
        .insert_header((header::LOCATION, format!("/api/v1/flex/runs/{}/stream", run.run_id)))
        .insert_header(("x-flexrun-run-id", run.run_id.to_string()))
}

/// Who owns the run `caller` starts with `envelope` — by `run.stream` or a fork, so that no API
/// puts a run on a thread the rule of `crate::thread` keeps from its caller: on the envelope's
/// `constraints.threadId`, the thread's owner, the thread taken by [`thread::enter`] (made for
/// `caller` if not in use; another caller's is 404 `thread_not_found`); on no thread, `caller`.
/// `at` is where the envelope is in the request body (`""` when it is the body).
pub(super) async fn run_owner(
    services: &Services,
    caller: &Caller,
    envelope: &TaskEnvelope,
    at: &str,
) -> Result<String, ApiError> {
    let Some(id) = &envelope.thread_id else { return Ok(caller.principal.clone()) };
    let thread = thread::enter(&services.store, caller, &thread_id(id, at)?).await?;
    Ok(thread::run_owner(thread.owner.as_deref(), caller))
}

/// The envelope's `constraints.threadId`, if clients can address it (`crate::thread::ThreadId`);
/// else 400 `invalid_envelope` at it, under `at`.
fn thread_id(id: &str, at: &str) -> Result<ThreadId, ApiError> {
    ThreadId::parse(id).map_err(|error| {
        ApiError::invalid_envelope(vec![FieldError::new(
            format!("{at}/constraints/threadId"),
            "invalid_thread_id",
            error.to_string(),
        )])
    })
}

/// An `X-Correlation-Id` header, if sent, held to the rule of `metadata.correlationId`
/// ([`crate::correlation`]).
pub(super) fn correlation_id(req: &HttpRequest) -> Result<Option<String>, ApiError> {
    let Some(value) = req.headers().get("x-correlation-id") else { return Ok(None) };
    let refused = |error: InvalidCorrelationId| {
        ApiError::new(ErrorCode::InvalidCorrelationId, format!("X-Correlation-Id: {error}"))
    };
    // A value that is not text at all (bytes above 0x7F) is refused as any other out of the rule.
    let id = value.to_str().map_err(|_| refused(InvalidCorrelationId))?;
    Ok(Some(correlation::check(id).map_err(refused)?.to_string()))
}

fn not_found(run_id: &RunId) -> ApiError {
    ApiError::not_found(ErrorCode::RunNotFound, format!("run {run_id}"))
}

/// The run's row, if `caller` may see the run; 404 (as for a run that does not exist) if not.
pub(super) async fn visible(services: &Services, caller: &Caller, run_id: &RunId) -> Result<RunRow, ApiError> {
    let lookup = run_id.clone();
    let row = services.store.read(move |conn| runs::get(conn, lookup.as_str())).await.map_err(run_error(run_id))?;
    if caller.may_see(row.owner.as_deref()) { Ok(row) } else { Err(not_found(run_id)) }
}

/// Maps a missing run to 404 and anything else to 500.
fn run_error(run_id: &RunId) -> impl Fn(StoreError) -> ApiError + '_ {
    move |error| match error {
        StoreError::NotFound(_) => not_found(run_id),
        other => other.into(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    /// The `nextCursor` of the previous page.
    cursor: Option<String>,
    limit: Option<i64>,
}

/// `GET /api/v1/flex/runs?status=&cursor=&limit=`: runs, newest first, a page at a time.
#[get("/runs")]
pub async fn list_runs(
    caller: Caller,
    query: web::Query<ListQuery>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let query = query.into_inner();
    let status = query
        .status
        .map(|s| s.parse::<RunStatus>())
        .transpose()
        .map_err(|e| ApiError::new(ErrorCode::InvalidQuery, format!("invalid query string: {e}")))?;
    let owner = caller.owner_filter().map(String::from);
    let runs = RunQuery { status, owner, ..RunQuery::default() };
    let limit = PageSize { default: 50, max: 500 }.of_query(query.limit)?;
    let cursor = paging::run_cursor(query.cursor.as_deref())?;
    let list = RunList::read(&services, runs, cursor, limit).await?;
    Ok(HttpResponse::Ok().json(list))
}

/// `GET /api/v1/flex/runs/{id}`: the run with its plan versions, nodes and goal evaluations.
#[get("/runs/{id}")]
pub async fn get_run(
    caller: Caller,
    id: web::Path<RunId>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let run_id = id.into_inner();
    let view = RunView::read(&services, &run_id, &caller).await.map_err(|error| match error {
        ViewError::Store(error) => run_error(&run_id)(error),
        ViewError::Unreadable(error) => ApiError::internal(error),
    })?;
    let href = |pointer: &str| format!("/api/v1/flex/runs/{run_id}/value?pointer={}", query_escape(pointer));
    let body = view.document(href).map_err(ApiError::internal)?;
    Ok(HttpResponse::Ok().json(services.redaction.value(body)))
}

/// A text as a query-string value.
pub fn query_escape(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueQuery {
    pointer: String,
}

/// `GET /api/v1/flex/runs/{id}/value?pointer=`: one value of the run document whole, where the
/// document left it out for its size (`{"$elided": {bytes, href}}` names this address).
#[get("/runs/{id}/value")]
pub async fn get_value(
    caller: Caller,
    id: web::Path<RunId>,
    query: web::Query<ValueQuery>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let run_id = id.into_inner();
    let view = RunView::read(&services, &run_id, &caller).await.map_err(|error| match error {
        ViewError::Store(error) => run_error(&run_id)(error),
        ViewError::Unreadable(error) => ApiError::internal(error),
    })?;
    let Some(value) = view.value(&query.pointer).map_err(ApiError::internal)? else {
        return Err(ApiError::not_found(
            ErrorCode::ValueNotFound,
            format!("a value at {:?} of run {run_id}", crate::excerpt::excerpt(&query.pointer, 100)),
        ));
    };
    Ok(HttpResponse::Ok()
        .json(services.redaction.value(json!({"runId": run_id, "pointer": query.pointer, "value": value}))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    after: Option<Seq>,
    limit: Option<i64>,
}

/// `GET /api/v1/flex/runs/{id}/events?after=N&limit=M`: a page of the event log.
#[get("/runs/{id}/events")]
pub async fn get_events(
    caller: Caller,
    id: web::Path<RunId>,
    query: web::Query<EventsQuery>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let run_id = id.into_inner();
    let after = query.after.unwrap_or(Seq::ZERO);
    let limit = PageSize { default: 100, max: 1000 }.of_query(query.limit)?;
    visible(&services, &caller, &run_id).await?;
    let lookup = run_id.clone();
    // At most `limit` frames, and no more bytes of them than a stream reads at once.
    let size = event_log::Page { frames: limit, bytes: services.settings.limits.stream_page_bytes };
    let page = services
        .store
        .read(move |conn| event_log::page_after(conn, lookup.as_str(), after, size))
        .await
        .map_err(run_error(&run_id))?;
    let frames: Vec<Value> = page
        .frames
        .iter()
        .map(|f| services.redaction.value(serde_json::from_str(&f.json).unwrap_or(Value::Null)))
        .collect();
    let next_after = page.frames.last().map_or(after, |f| f.seq);
    Ok(HttpResponse::Ok()
        .json(json!({"runId": run_id, "events": frames, "nextAfter": next_after, "hasMore": page.more})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    after: Option<Seq>,
}

/// `GET /api/v1/flex/runs/{id}/stream`: replays frames after `Last-Event-ID` (or `?after=`), then
/// follows the run live until it ends or pauses.
#[get("/runs/{id}/stream")]
pub async fn follow_run(
    req: HttpRequest,
    caller: Caller,
    id: web::Path<RunId>,
    query: web::Query<StreamQuery>,
    services: web::Data<Services>,
) -> Result<impl Responder, ApiError> {
    let run_id = id.into_inner();
    let after =
        match req.headers().get("last-event-id") {
            Some(value) => value.to_str().ok().and_then(|v| Seq::parse(v).ok()).ok_or_else(|| {
                ApiError::new(ErrorCode::InvalidLastEventId, "Last-Event-ID must be a frame seq number")
            })?,
            None => query.after.unwrap_or(Seq::ZERO),
        };
    visible(&services, &caller, &run_id).await?;
    let frames = follow(&services, run_id.to_string(), after);
    Ok(frame_stream(frames.boxed(), &services.redaction, &services.backlogs))
}
