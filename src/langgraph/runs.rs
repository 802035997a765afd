//! Runs on threads: start one (streamed, in the background, or waited for), answer an interrupt
//! (`command.resume`), read, list, join and cancel them.

use std::sync::Arc;

use actix_web::{FromRequest, HttpRequest, HttpResponse, get, post, web};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::Deserialize;
use serde_json::{Value, json};

use super::chat;
use super::checkpoints;
use super::request::{self, Action, Input, RunRequest, StreamMode};
use super::started::{GRAPH_METADATA, Started};
use super::stream::{self, Translator};
use super::{chat_of, project, run_not_found, run_of_thread, state_at, time, visible_thread};
use crate::error_code::ErrorCode;
use crate::events::Seq;
use crate::http::{ApiError, Body, Caller, CallerSpan, Role};
use crate::run::follow::{FollowError, follow};
use crate::run::operator::{Actor, Command};
use crate::run::state::RunState;
use crate::run::{self, RunId};
use crate::services::Services;
use crate::store::events::LoggedFrame;
use crate::store::runs::RunRow;
use crate::store::threads::{self as thread_rows, ThreadRow};
use crate::thread::{self, ThreadError, ThreadId, ThreadRule};
use flexrun_core::trace::TraceParent;

/// A run begun by a request: its frames, and what a stream of them starts from.
struct Began {
    thread_id: String,
    run_id: RunId,
    modes: Vec<StreamMode>,
    started: Started,
}

impl Began {
    /// The stream's translator, from the state the frames follow.
    fn translator(
        self,
        services: &Services,
    ) -> (Translator, String, BoxStream<'static, Result<LoggedFrame, FollowError>>) {
        let Started { state, objective, chat, frames, .. } = self.started;
        (Translator::new(state, self.modes, objective, chat, services.redaction.clone()), self.thread_id, frames)
    }

    /// The run's row, read once the run began.
    async fn row(&self, services: &Services) -> Result<RunRow, ApiError> {
        let lookup = self.run_id.to_string();
        Ok(services.store.read(move |conn| crate::store::runs::get(conn, &lookup)).await?)
    }
}

fn refused(error: request::RequestError) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, error.0)
}

/// Reads the request and starts its run (or answers the thread's interrupt) on `thread_id`, or
/// on a new thread for a stateless run.
async fn begin(
    services: &Arc<Services>,
    caller: &Caller,
    thread_id: Option<&str>,
    body: &Body,
    trace_parent: Option<TraceParent>,
) -> Result<Began, ApiError> {
    let body: Value = body.json()?;
    if let Some(assistant) = request::unknown_assistant(&body) {
        return Err(ApiError::not_found(ErrorCode::AssistantNotFound, format!("assistant {assistant}")));
    }
    let request = RunRequest::parse(&body).map_err(refused)?;
    if thread_id.is_none() && matches!(request.action, Action::Fork(_)) {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "a checkpoint belongs to a thread: start a run from it with /threads/{thread_id}/runs…",
        ));
    }
    let (thread_id, started) = match (thread_id, &request.action) {
        (_, Action::Start(input @ Input::Envelope(_))) => {
            // A stateless run's thread is new: its first commit makes it, as one asked for by name.
            let (id, create) = match thread_id {
                Some(id) => (id.to_string(), request.create_thread),
                None => (ThreadId::generate().to_string(), true),
            };
            let started = start_unread(services, caller, &id, create, input, trace_parent).await?;
            (id, started)
        }
        _ => on_thread(services, caller, thread_id, &request, trace_parent).await?,
    };
    Ok(Began { thread_id, run_id: started.run_id.clone(), modes: request.modes, started })
}

/// A run on thread `id` — from an envelope, or a chat on a thread that does not exist yet (no
/// conversation to go on from) — started without reading the thread first: the caller is taken
/// for its owner, and the run's first commit checks that (`ThreadRule`), so a start costs no read.
/// With `create` the same commit makes the thread for the caller if there is none, so a start
/// refused makes none. An operator may start a run on anyone's thread, the run then the thread
/// owner's: if the commit finds the thread not the operator's own, it is read, and the run started
/// for its owner.
async fn start_unread(
    services: &Arc<Services>,
    caller: &Caller,
    id: &str,
    create: bool,
    input: &Input,
    trace_parent: Option<TraceParent>,
) -> Result<Started, ApiError> {
    match ThreadId::parse(id) {
        Ok(_) => {}
        Err(invalid) if create => return Err(ApiError::new(ErrorCode::InvalidThreadId, invalid.to_string())),
        // An id no thread can have is not found, as a read would have said.
        Err(_) => return Err(ThreadError::NotFound(id.to_string()).into()),
    }
    let taken = OnThread { id, owner: Some(caller.principal.clone()), create };
    match start(services, caller, taken, input, None, trace_parent).await {
        Err(ApiError::Refused { code: ErrorCode::ThreadNotFound, .. }) if caller.role == Role::Operator => {
            let thread = visible_thread(services, caller, id).await?;
            let found = OnThread { id, owner: thread.owner, create: false };
            start(services, caller, found, input, None, trace_parent).await
        }
        started => started,
    }
}

/// A thread as a request reads it: the row and its newest run (a chat goes on from its
/// conversation, a resume answers it).
type Found = (ThreadRow, Option<RunRow>);

/// Starts the request's run (a chat), answers the thread's interrupt, or forks it, on the thread
/// read first. Nothing is written before the run's first commit (or the answer's): a thread that
/// is not there is made by that commit, or not at all ([`without_thread`]).
async fn on_thread(
    services: &Arc<Services>,
    caller: &Caller,
    thread_id: Option<&str>,
    request: &RunRequest,
    trace_parent: Option<TraceParent>,
) -> Result<(String, Started), ApiError> {
    let found = match thread_id {
        Some(id) => read_thread(services, caller, id, request.create_thread).await?,
        None => None,
    };
    let Some((thread, newest)) = found else {
        return without_thread(services, caller, thread_id, &request.action, trace_parent).await;
    };
    let started = match &request.action {
        Action::Start(input) => {
            let on = OnThread { id: &thread.thread_id, owner: thread.owner.clone(), create: false };
            start(services, caller, on, input, newest.as_ref(), trace_parent).await?
        }
        // The resume and the fork boxed: their futures are twice a start's, which every start
        // would otherwise carry (copied whole as the request's handler is boxed).
        Action::Resume(value) => {
            let resumed = Box::pin(resume(services, caller, newest, value)).await?;
            // No run is created, so no first commit names the graph: a commit of its own does.
            let (id, owner) = (thread.thread_id.clone(), thread.owner.clone());
            services
                .store
                .write(move |conn| thread_rows::mark(conn, &id, owner.as_deref(), GRAPH_METADATA, crate::store::now()))
                .await?;
            resumed
        }
        Action::Fork(from) => Box::pin(checkpoints::fork(services, caller, &thread, from)).await?,
    };
    Ok((thread.thread_id, started))
}

/// The thread `id` and its newest run, if `caller` may use it, in one read. With `create` an id
/// no thread may have is refused, and a thread not found is `None`: the request makes it, or
/// needs none.
async fn read_thread(services: &Services, caller: &Caller, id: &str, create: bool) -> Result<Option<Found>, ApiError> {
    if create {
        ThreadId::parse(id).map_err(|e| ApiError::new(ErrorCode::InvalidThreadId, e.to_string()))?;
    }
    match thread::visible_with_newest(&services.store, caller, id).await {
        Ok(found) => Ok(Some(found)),
        Err(ThreadError::NotFound(_)) if create => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// A request on no thread — none named, or one `if_not_exists: create` names that is not there —
/// making none before its run's first commit: a chat's run makes its thread in that commit (a
/// new one, or the one named), as an envelope's does; a resume has nothing to answer, and a fork
/// no checkpoint, so neither needs a thread.
async fn without_thread(
    services: &Arc<Services>,
    caller: &Caller,
    thread_id: Option<&str>,
    action: &Action,
    trace_parent: Option<TraceParent>,
) -> Result<(String, Started), ApiError> {
    match action {
        Action::Start(input) => {
            let id = thread_id.map_or_else(|| ThreadId::generate().to_string(), String::from);
            let started = start_unread(services, caller, &id, true, input, trace_parent).await?;
            Ok((id, started))
        }
        Action::Resume(_) => {
            may_answer(caller)?;
            Err(no_interrupt())
        }
        Action::Fork(from) => Err(checkpoints::not_found(&from.checkpoint)),
    }
}

/// The thread a run starts on, as its start takes it: its id, whose it is — which the run's
/// first commit checks — and whether that commit makes it if it does not exist.
struct OnThread<'a> {
    id: &'a str,
    owner: Option<String>,
    create: bool,
}

/// A new flex run on the thread, from a TaskEnvelope or chat messages.
///
/// What its stream starts from is known here — the objective, the chat, the state before the
/// first frame (the run's id, correlation id and inputs) — so nothing is read back.
async fn start(
    services: &Arc<Services>,
    caller: &Caller,
    thread: OnThread<'_>,
    input: &Input,
    newest: Option<&RunRow>,
    trace_parent: Option<TraceParent>,
) -> Result<Started, ApiError> {
    // A chat continues the conversation of the thread's previous chat run, with its answer.
    let mut history = Vec::new();
    if let (Input::Chat(_), Some(row)) = (input, newest)
        && let Some(messages) = chat_of(row)
    {
        history = messages;
        history.extend(project::answer(&state_at(services, row.clone(), None).await?, &services.redaction));
    }
    let envelope = request::envelope(input, thread.id, &history).map_err(refused)?;
    let chat = chat::stored_messages(&envelope);
    let envelope = crate::envelope::from_value(envelope, &services.registry.catalog())?;
    let objective = envelope.objective.clone();
    // Chosen here as `run::start` would choose it, so the state below has it.
    let correlation_id = envelope.correlation_id.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let owner = thread::run_owner(thread.owner.as_deref(), caller);
    // One active run per thread: the run's first commit refuses it if the thread is busy
    // (`thread_busy`, 409), on this node or any other, or no longer the one taken here (404);
    // else it names the graph in the thread's metadata.
    let rule = ThreadRule::OneActiveRun { metadata: GRAPH_METADATA, owner: thread.owner, create: thread.create };
    let origin = run::Origin {
        correlation_id: Some(correlation_id.clone()),
        idempotency: None,
        owner: &owner,
        thread_rule: rule,
        trace_parent,
    };
    let started = run::start(services, envelope, origin).await?;
    // Before `start`: the stream's first frame brings the inputs and caps.
    let state = RunState::new(&started.run_id, &correlation_id);
    Ok(Started { run_id: started.run_id, state, objective, chat, frames: started.frames })
}

/// Answers the open request of the thread's newest run with `command.resume`; the run goes on.
async fn resume(
    services: &Arc<Services>,
    caller: &Caller,
    newest: Option<RunRow>,
    value: &Value,
) -> Result<Started, ApiError> {
    may_answer(caller)?;
    let row = newest.ok_or_else(no_interrupt)?;
    let (objective, chat) = (row.objective.clone(), chat_of(&row));
    let state = state_at(services, row, None).await?;
    let pending = state.pending_request().ok_or_else(no_interrupt)?;
    let answer =
        request::resume_answer(value, pending, |body| crate::http::resume_answer(body).ok()).map_err(refused)?;
    let actor = Actor { principal: caller.principal.clone(), operator: None, note: None };
    let run_id = state.run_id.clone();
    let command = Command::Resume { expected_plan_version: None, answer, actor };
    let applied = run::apply(services, &run_id, command).await?;
    Ok(Started { run_id, state, objective, chat, frames: applied.frames })
}

/// Answering an interrupt is an operator's action, as in the flex API: 403 for anyone else.
fn may_answer(caller: &Caller) -> Result<(), ApiError> {
    if caller.role == Role::Operator { Ok(()) } else { Err(ApiError::Forbidden) }
}

/// 409 `no_interrupt`: the thread's newest run (if it has one) waits for no answer.
fn no_interrupt() -> ApiError {
    ApiError::new(
        ErrorCode::NoInterrupt,
        "the thread has no interrupt to resume: its newest run does not wait for an answer",
    )
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_graph_metadata_names_the_one_assistant() {
        let flex = json!(request::ASSISTANT).to_string();
        assert_eq!(GRAPH_METADATA, [("graph_id", flex.as_str()), ("assistant_id", flex.as_str())]);
    }
}
