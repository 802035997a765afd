//! A run request begun: read, then carried out on its thread — a new run (from an envelope or a
//! chat), an answer to the thread's interrupt (`command.resume`), or a fork from one of its
//! checkpoints — without writing anything before the run's first commit, so a request refused
//! leaves nothing behind. The handlers of `runs` take it from here: they stream the run, wait
//! for it, or leave it in the background.

use std::sync::Arc;

use futures::stream::BoxStream;
use serde_json::Value;

use super::chat;
use super::checkpoints;
use super::request::{self, Action, Input, RunRequest, StreamMode};
use super::started::{GRAPH_METADATA, Started};
use super::stream::Translator;
use super::{chat_of, project, state_at, visible_thread};
use crate::error_code::ErrorCode;
use crate::http::{ApiError, Body, Caller, Role};
use crate::run::follow::FollowError;
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
pub(super) struct Began {
    pub(super) thread_id: String,
    run_id: RunId,
    modes: Vec<StreamMode>,
    pub(super) started: Started,
}

impl Began {
    /// The stream's translator, from the state the frames follow.
    pub(super) fn translator(
        self,
        services: &Services,
    ) -> (Translator, String, BoxStream<'static, Result<LoggedFrame, FollowError>>) {
        let Started { state, objective, chat, frames, .. } = self.started;
        (Translator::new(state, self.modes, objective, chat, services.redaction.clone()), self.thread_id, frames)
    }

    /// The run's row, read once the run began.
    pub(super) async fn row(&self, services: &Services) -> Result<RunRow, ApiError> {
        let lookup = self.run_id.to_string();
        Ok(services.store.read(move |conn| crate::store::runs::get(conn, &lookup)).await?)
    }
}

pub(super) fn refused(error: request::RequestError) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, error.0)
}

/// Reads the request and starts its run (or answers the thread's interrupt) on `thread_id`, or
/// on a new thread for a stateless run.
pub(super) async fn begin(
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
        history = chat::bounded_history(history, services.settings.limits.max_body_bytes);
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
