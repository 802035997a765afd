//! The routes of runs on threads: start one — begun by [`begin`](super::begin), then streamed,
//! left in the background or waited for — read, list, join and cancel them.

use actix_web::{FromRequest, HttpRequest, HttpResponse, get, post, web};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::Deserialize;
use serde_json::{Value, json};

use super::begin::{begin, refused};
use super::request::{self, StreamMode};
use super::stream::{self, Translator};
use super::{chat_of, project, run_not_found, run_of_thread, state_at, time, visible_thread};
use crate::error_code::ErrorCode;
use crate::events::Seq;
use crate::http::{ApiError, Body, Caller, CallerSpan, Role};
use crate::run::follow::{FollowError, follow};
use crate::run::operator::{Actor, Command};
use crate::run::{self, RunId};
use crate::services::Services;
use crate::store::events::LoggedFrame;
use crate::store::runs::RunRow;
use crate::store::threads as thread_rows;

/// LangGraph's `Run`.
fn run_json(thread_id: &str, row: &RunRow) -> Value {
    let status = project::run_status(row.status);
    json!({
        "run_id": row.run_id, "thread_id": thread_id, "assistant_id": request::ASSISTANT,
        "created_at": time(row.created_at), "updated_at": time(row.updated_at), "status": status,
        "metadata": {}, "multitask_strategy": "reject", "kwargs": {},
    })
}

async fn stream_run(
    req: HttpRequest,
    services: web::Data<Services>,
    caller: Caller,
    thread_id: Option<&str>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let services = services.into_inner();
    let CallerSpan(span) = CallerSpan::extract(&req).await?;
    let (translator, thread_id, frames) =
        begin(&services, &caller, thread_id, &body, span).await?.translator(&services);
    Ok(stream::respond(&req, translator, frames, &thread_id, &services.backlogs))
}

/// `POST /threads/{tid}/runs/stream`: starts a run (or resumes) and streams it.
#[post("/threads/{tid}/runs/stream")]
pub async fn stream_on_thread(
    req: HttpRequest,
    caller: Caller,
    tid: web::Path<String>,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    stream_run(req, services, caller, Some(&tid), body).await
}

/// `POST /runs/stream`: a run on a thread of its own, streamed.
#[post("/runs/stream")]
pub async fn stream_stateless(
    req: HttpRequest,
    caller: Caller,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    stream_run(req, services, caller, None, body).await
}

async fn create_run(
    services: web::Data<Services>,
    (caller, CallerSpan(span)): (Caller, CallerSpan),
    thread_id: Option<&str>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let services = services.into_inner();
    let began = begin(&services, &caller, thread_id, &body, span).await?;
    let run = began.row(&services).await?;
    // The run goes on without a reader; its frames are in the log for anyone who joins.
    drop(began.started.frames);
    let location = format!("/threads/{}/runs/{}", began.thread_id, run.run_id);
    Ok(HttpResponse::Ok().insert_header(("content-location", location)).json(run_json(&began.thread_id, &run)))
}

/// `POST /threads/{tid}/runs`: starts a run in the background.
#[post("/threads/{tid}/runs")]
pub async fn create_on_thread(
    caller: Caller,
    span: CallerSpan,
    tid: web::Path<String>,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    create_run(services, (caller, span), Some(&tid), body).await
}

/// `POST /runs`: a background run on a thread of its own.
#[post("/runs")]
pub async fn create_stateless(
    caller: Caller,
    span: CallerSpan,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    create_run(services, (caller, span), None, body).await
}

/// Reads a run's frames to its end or pause, then answers with its values (with its open
/// interrupts, or its error).
async fn settled_values(
    services: &Services,
    thread_id: &str,
    row: RunRow,
    mut frames: BoxStream<'static, Result<LoggedFrame, FollowError>>,
) -> Result<HttpResponse, ApiError> {
    while let Some(frame) = frames.next().await {
        frame.map_err(ApiError::internal)?;
    }
    let (chat, objective) = (chat_of(&row), row.objective.clone());
    let state = state_at(services, row, None).await?;
    let location = format!("/threads/{thread_id}/runs/{}", state.run_id);
    let values = project::Values::of(&state, &objective, chat.as_deref(), &services.redaction)
        .with_interrupts(&state)
        .to_value();
    Ok(HttpResponse::Ok().insert_header(("content-location", location)).json(services.redaction.value(values)))
}

async fn wait_run(
    services: web::Data<Services>,
    (caller, CallerSpan(span)): (Caller, CallerSpan),
    thread_id: Option<&str>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let services = services.into_inner();
    let began = begin(&services, &caller, thread_id, &body, span).await?;
    let run = began.row(&services).await?;
    settled_values(&services, &began.thread_id, run, began.started.frames).await
}

/// `POST /threads/{tid}/runs/wait`: starts a run and answers with its values once it ends or
/// waits for an answer.
#[post("/threads/{tid}/runs/wait")]
pub async fn wait_on_thread(
    caller: Caller,
    span: CallerSpan,
    tid: web::Path<String>,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    wait_run(services, (caller, span), Some(&tid), body).await
}

/// `POST /runs/wait`.
#[post("/runs/wait")]
pub async fn wait_stateless(
    caller: Caller,
    span: CallerSpan,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    wait_run(services, (caller, span), None, body).await
}

/// `GET /threads/{tid}/runs`: the thread's runs, newest first.
#[get("/threads/{tid}/runs")]
pub async fn list_runs(
    caller: Caller,
    tid: web::Path<String>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    visible_thread(&services, &caller, &tid).await?;
    let id = tid.to_string();
    let rows = services.store.read(move |conn| thread_rows::runs(conn, &id, 100)).await?;
    Ok(HttpResponse::Ok().json(rows.iter().map(|row| run_json(&tid, row)).collect::<Vec<_>>()))
}

/// `GET /threads/{tid}/runs/{rid}`.
#[get("/threads/{tid}/runs/{rid}")]
pub async fn get_run(
    caller: Caller,
    path: web::Path<(String, String)>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let (tid, rid) = path.into_inner();
    let row = run_of_thread(&services, &caller, &tid, &rid).await?;
    Ok(HttpResponse::Ok().json(run_json(&tid, &row)))
}

/// The modes of a join: `stream_mode` query parameters (repeatable), else `values`.
fn join_modes(query: &str) -> Result<Vec<StreamMode>, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
        .map_err(|e| ApiError::new(ErrorCode::InvalidQuery, format!("invalid query string: {e}")))?;
    let mut modes: Vec<StreamMode> = pairs
        .iter()
        .filter(|(key, _)| key == "stream_mode")
        .map(|(_, value)| StreamMode::parse(value).map_err(refused))
        .collect::<Result<_, _>>()?;
    if modes.is_empty() {
        modes.push(StreamMode::Values);
    }
    modes.dedup();
    Ok(modes)
}

/// `GET /threads/{tid}/runs/{rid}/stream`: the run's events after `Last-Event-ID` (all of them
/// without one, or with `-1`), then live until it ends or pauses.
#[get("/threads/{tid}/runs/{rid}/stream")]
pub async fn join_stream(
    req: HttpRequest,
    caller: Caller,
    path: web::Path<(String, String)>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let (tid, rid) = path.into_inner();
    let modes = join_modes(req.query_string())?;
    let after = match req.headers().get("last-event-id").map(|v| v.to_str().map(str::trim)) {
        None | Some(Ok("" | "-1")) => Seq::ZERO,
        Some(value) => value.ok().and_then(|v| Seq::parse(v).ok()).ok_or_else(|| {
            ApiError::new(ErrorCode::InvalidLastEventId, "Last-Event-ID must be an event id this stream sent")
        })?,
    };
    let row = run_of_thread(&services, &caller, &tid, &rid).await?;
    let (chat, objective, run_id) = (chat_of(&row), row.objective.clone(), row.run_id.clone());
    // Subscribed before the state is read: a frame committed meanwhile is not missed.
    let frames = follow(&services, run_id, after).boxed();
    let state = state_at(&services, row, Some(after)).await?;
    let translator = Translator::new(state, modes, objective, chat, services.redaction.clone());
    Ok(stream::respond(&req, translator, frames, &tid, &services.backlogs))
}

/// `GET /threads/{tid}/runs/{rid}/join`: waits for the run to end or pause; its values.
#[get("/threads/{tid}/runs/{rid}/join")]
pub async fn join(
    caller: Caller,
    path: web::Path<(String, String)>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let (tid, rid) = path.into_inner();
    let row = run_of_thread(&services, &caller, &tid, &rid).await?;
    let frames = follow(&services, row.run_id.clone(), Seq::ZERO).boxed();
    settled_values(&services, &tid, row, frames).await
}

/// A cancel's query parameters, as the SDKs send them (`?wait=0&action=interrupt`); a key not
/// listed (the JS SDK's `reason`, say) is refused rather than ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelQuery {
    /// Whether the answer waits for the run to end: it always does (see [`cancel`]), so either
    /// boolean is taken, and nothing else.
    #[serde(default)]
    wait: Option<String>,
    /// `interrupt` (the default): the run ends as cancelled, what it did kept. `rollback`, which
    /// would delete the run, flexrun does not do.
    #[serde(default)]
    action: Option<String>,
}

impl CancelQuery {
    /// Refuses (400) a `wait` that is not a boolean and an `action` other than `interrupt`.
    fn check(&self) -> Result<(), ApiError> {
        let refused = |message: String| Err(ApiError::new(ErrorCode::InvalidQuery, message));
        if let Some(wait) = self.wait.as_deref()
            && !["0", "1", "true", "false"].contains(&wait)
        {
            return refused(format!(
                "`wait` is a boolean (1, 0, true or false), not {:?}",
                crate::excerpt::excerpt(wait, 40)
            ));
        }
        match self.action.as_deref() {
            None | Some("interrupt") => Ok(()),
            Some("rollback") => refused(
                "`action=rollback` is not supported: flexrun keeps a cancelled run and what it did; cancel with \
                 `action=interrupt` (the default)"
                    .into(),
            ),
            Some(other) => {
                refused(format!("`action` must be \"interrupt\", not {:?}", crate::excerpt::excerpt(other, 40)))
            }
        }
    }
}

/// A cancel's body: none, as the SDKs send, or an empty one (`{}`, `null`). Its options are query
/// parameters: one sent in a body would be ignored, so it is refused.
fn no_options_in(body: &Body) -> Result<(), ApiError> {
    if body.is_blank() {
        return Ok(());
    }
    match body.json::<Value>()? {
        Value::Null => Ok(()),
        Value::Object(fields) if fields.is_empty() => Ok(()),
        _ => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "a cancel takes `wait` and `action` as query parameters (`?action=interrupt&wait=1`), not in a body",
        )),
    }
}

/// `POST /threads/{tid}/runs/{rid}/cancel?wait=&action=`: cancels the run (an operator's action,
/// as in the flex API); 202 with no body, as the SDK expects. The answer comes once the
/// cancellation is committed — the run has ended, as `cancelled` — so `wait=1` waits for nothing
/// more. `action=rollback` is refused ([`CancelQuery`]).
#[post("/threads/{tid}/runs/{rid}/cancel")]
pub async fn cancel(
    caller: Caller,
    path: web::Path<(String, String)>,
    query: web::Query<CancelQuery>,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    query.check()?;
    no_options_in(&body)?;
    let (tid, rid) = path.into_inner();
    let row = run_of_thread(&services, &caller, &tid, &rid).await?;
    if caller.role != Role::Operator {
        return Err(ApiError::Forbidden);
    }
    let run_id = RunId::parse(&row.run_id).map_err(|_| run_not_found(&rid))?;
    let actor = Actor { principal: caller.principal.clone(), operator: None, note: None };
    run::apply(&services.into_inner(), &run_id, Command::Cancel { stopped: false, actor }).await?;
    Ok(HttpResponse::Accepted().finish())
}
