//! A thread's checkpoints — LangGraph's history and time travel over flex runs. Each run of a
//! thread is checkpointed after every plan version it installed (`plan_generated`), every step it
//! completed (`node_complete`) and its last frame, as `<runId>:<seq>`: the run right after that
//! frame. `POST /threads/{tid}/history` lists them newest first, each with the run's values as of
//! it; a run request naming one forks that run from there (`run::fork`, `ForkPoint::as_of`),
//! reusing what it had done by then.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::request::{self, Checkpoint, FromCheckpoint, Input};
use super::started::{GRAPH_METADATA, Started};
use super::{bounded_metadata, chat_of, project, run_of_thread, state_at, time};
use crate::error_code::ErrorCode;
use crate::events::Seq;
use crate::http::{ApiError, Caller};
use crate::run::fork::{self, ForkError, ForkOrder};
use crate::run::state::RunState;
use crate::run::{Origin, RunId};
use crate::services::Services;
use crate::store::events;
use crate::store::runs::RunRow;
use crate::store::threads::{self as thread_rows, ThreadRow};
use crate::thread::{self, ThreadRule};
use crate::validation::FieldError;
use flexrun_core::run::fork::ForkPoint;

/// The most runs of a thread the history looks through.
const RUNS_SCANNED: i64 = 1_000;

/// `POST /threads/{tid}/history`: refuses keys it does not list (`select`); `checkpoint` may only
/// name the root namespace (flexrun has no subgraphs).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    #[serde(default)]
    pub limit: Option<i64>,
    /// Only checkpoints older than this one: its id, or a checkpoint object.
    #[serde(default)]
    pub before: Option<Value>,
    /// Only checkpoints whose metadata has each of these values.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub checkpoint: Option<Value>,
}

/// One checkpoint of a run: its frame, and the checkpoint before it.
struct Entry {
    seq: Seq,
    frame: String,
    parent: Option<String>,
    /// The run's first checkpoint: a fork's hangs off the checkpoint it was forked from.
    first: bool,
}

/// The thread's checkpoints, newest first, `limit` of them, as `ThreadState`s.
pub async fn history(services: &Services, thread_id: &str, query: History, limit: i64) -> Result<Vec<Value>, ApiError> {
    // Matched here, not in a query; bounded all the same, as a search's is.
    bounded_metadata(query.metadata.as_ref())?;
    if query.checkpoint.as_ref().is_some_and(|c| c.get("checkpoint_ns").is_some_and(|ns| !ns.is_null() && ns != "")) {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "`checkpoint.checkpoint_ns` must be empty: flexrun has no subgraphs",
        ));
    }
    let before = match &query.before {
        None | Some(Value::Null) => None,
        Some(value) => Some(named(value).ok_or_else(|| {
            ApiError::new(ErrorCode::InvalidRequest, "`before` is a checkpoint id (`<runId>:<seq>`) or a checkpoint")
        })?),
    };
    let id = thread_id.to_string();
    let runs = services.store.read(move |conn| thread_rows::runs(conn, &id, RUNS_SCANNED)).await?;
    // Newest first; a listing starts at `before`'s run, which must be one of this thread's.
    let start = match &before {
        None => 0,
        Some(before) => runs
            .iter()
            .position(|run| run.run_id == before.run_id)
            .ok_or_else(|| ApiError::new(ErrorCode::InvalidRequest, "`before` names no checkpoint of this thread"))?,
    };
    let wanted = usize::try_from(limit).unwrap_or_default();
    let mut states = Vec::new();
    // Each run's checkpoints are read once, when the listing reaches it (its older neighbour's
    // too: a run's first checkpoint follows the older run's last).
    let mut checkpoints = run_checkpoints(services, runs.get(start)).await?;
    for (index, run) in runs.iter().enumerate().skip(start) {
        let older = run_checkpoints(services, runs.get(index + 1)).await?;
        let previous =
            runs.get(index + 1).zip(older.last()).map(|(older_run, (seq, _))| id_of(&older_run.run_id, *seq));
        let mut entries = entries(run, &checkpoints, previous);
        if let Some(before) = before.as_ref().filter(|b| b.run_id == run.run_id) {
            let Some(at) = entries.iter().position(|e| e.seq.get() == before.seq) else {
                return Err(ApiError::new(ErrorCode::InvalidRequest, "`before` names no checkpoint of this thread"));
            };
            entries.truncate(at);
        }
        for entry in entries.into_iter().rev() {
            let filter = query.metadata.as_ref();
            // Most of a checkpoint's metadata is known before its run is folded: one that cannot
            // match costs no fold (a filter matching nothing would fold every checkpoint).
            if filter.is_some_and(|filter| !matches(filter, &known_metadata(thread_id, run, &entry), false)) {
                continue;
            }
            let state = checkpoint_state(services, thread_id, run, &entry).await?;
            if filter.is_none_or(|filter| matches(filter, &state["metadata"], true)) {
                states.push(state);
                if states.len() == wanted {
                    return Ok(states);
                }
            }
        }
        checkpoints = older;
    }
    Ok(states)
}

/// The checkpoints of `run` (none for no run).
async fn run_checkpoints(services: &Services, run: Option<&RunRow>) -> Result<Vec<(Seq, String)>, ApiError> {
    let Some(run) = run else { return Ok(Vec::new()) };
    let id = run.run_id.clone();
    Ok(services.store.read(move |conn| events::checkpoints(conn, &id)).await?)
}

/// A run's checkpoints, oldest first, each with the one before it: the previous checkpoint of
/// the run; for its first, the thread's previous run's last (a fork's is settled with its state).
fn entries(run: &RunRow, checkpoints: &[(Seq, String)], previous_run: Option<String>) -> Vec<Entry> {
    let mut parent = previous_run;
    checkpoints
        .iter()
        .enumerate()
        .map(|(i, (seq, frame))| {
            let entry = Entry { seq: *seq, frame: frame.clone(), parent: parent.take(), first: i == 0 };
            parent = Some(id_of(&run.run_id, *seq));
            entry
        })
        .collect()
}

/// The metadata of checkpoint `entry` of `run` that its state does not decide (the state adds
/// `planVersion`, `source` and, after a step, `nodeId`).
fn known_metadata(thread_id: &str, run: &RunRow, entry: &Entry) -> Value {
    json!({
        "run_id": run.run_id, "thread_id": thread_id, "graph_id": "flex", "assistant_id": "flex",
        "step": entry.seq.get(), "frame": entry.frame,
    })
}

/// Whether `metadata` has each value `wanted` names. With `whole` false, `metadata` is a part of
/// a checkpoint's: a key it lacks may still match.
fn matches(wanted: &Map<String, Value>, metadata: &Value, whole: bool) -> bool {
    wanted.iter().all(|(key, value)| match metadata.get(key) {
        Some(has) => has == value,
        None => !whole,
    })
}

fn id_of(run_id: &str, seq: Seq) -> String {
    format!("{run_id}:{}", seq.get())
}

/// The checkpoint a `before` or `checkpoint_id` names.
fn named(value: &Value) -> Option<Checkpoint> {
    let id = value.as_str().or_else(|| value.get("checkpoint_id").and_then(Value::as_str))?;
    Checkpoint::parse(id)
}

/// The `ThreadState` of a run as of checkpoint `entry`.
async fn checkpoint_state(
    services: &Services,
    thread_id: &str,
    run: &RunRow,
    entry: &Entry,
) -> Result<Value, ApiError> {
    let (chat, objective) = (chat_of(run), run.objective.clone());
    let state = state_at(services, run.clone(), Some(entry.seq)).await?;
    let mut metadata = known_metadata(thread_id, run, entry);
    metadata["planVersion"] = json!(state.plan_version());
    metadata["source"] = json!("loop");
    let parent = match &state.forked_from {
        // A fork's first checkpoint hangs off the one it was forked from.
        Some(from) if entry.first => {
            metadata["source"] = json!("fork");
            from.as_of.map(|seq| format!("{}:{seq}", from.run_id)).or_else(|| entry.parent.clone())
        }
        _ => entry.parent.clone(),
    };
    if entry.frame == "node_complete"
        && let Some(node) = state.completed().last()
    {
        metadata["nodeId"] = json!(node.node_id);
    }
    let id = id_of(&run.run_id, entry.seq);
    let at = state.last_at.map(crate::run::state::rfc3339).unwrap_or_else(|| time(run.updated_at));
    let values = project::values(&state, &objective, chat.as_deref(), &services.redaction);
    Ok(services.redaction.value(state_json(thread_id, &state, values, &id, parent.as_deref(), metadata, &at)))
}

/// LangGraph's `ThreadState` of `state`: its `values` ([`project::values`]), the nodes it waits
/// on, its open interrupts, its checkpoint and the one before it (also as the deprecated
/// top-level ids LangGraph's time-travel guide reads).
pub fn state_json(
    thread_id: &str,
    state: &RunState,
    values: Value,
    checkpoint_id: &str,
    parent: Option<&str>,
    metadata: Value,
    created_at: &str,
) -> Value {
    let interrupts = project::interrupts(state);
    let next = project::next(state);
    let tasks: Vec<Value> = next
        .iter()
        .map(|node| {
            let mine: Vec<&Value> =
                interrupts.iter().filter(|i| i["value"]["nodeId"].as_str().is_none_or(|n| n == node)).collect();
            json!({"id": node, "name": node, "error": null, "interrupts": mine, "checkpoint": null, "state": null, "result": null})
        })
        .collect();
    let checkpoint =
        |id: &str| json!({"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": id, "checkpoint_map": null});
    json!({
        "values": values,
        "next": next,
        "tasks": tasks,
        "interrupts": interrupts,
        "metadata": metadata,
        "created_at": created_at,
        "checkpoint": checkpoint(checkpoint_id),
        "parent_checkpoint": parent.map(checkpoint),
        "checkpoint_id": checkpoint_id,
        "parent_checkpoint_id": parent,
    })
}

/// 404 `checkpoint_not_found`: `checkpoint` is not one of the thread's.
pub fn not_found(checkpoint: &Checkpoint) -> ApiError {
    ApiError::not_found(
        ErrorCode::CheckpointNotFound,
        format!("checkpoint {} of this thread", crate::excerpt::excerpt(&checkpoint.id(), 120)),
    )
}

/// A run on `thread` from one of its checkpoints: a fork of the checkpoint's run, reusing what it
/// had done by then, under the thread's one-active-run rule.
pub async fn fork(
    services: &Arc<Services>,
    caller: &Caller,
    thread: &ThreadRow,
    from: &FromCheckpoint,
) -> Result<Started, ApiError> {
    let not_found = || not_found(&from.checkpoint);
    let row =
        run_of_thread(services, caller, &thread.thread_id, &from.checkpoint.run_id).await.map_err(|_| not_found())?;
    let lookup = row.run_id.clone();
    let checkpoints = services.store.read(move |conn| events::checkpoints(conn, &lookup)).await?;
    let seq =
        checkpoints.iter().map(|(seq, _)| *seq).find(|seq| seq.get() == from.checkpoint.seq).ok_or_else(not_found)?;
    let envelope = match &from.envelope {
        None => None,
        Some(input) => {
            let value = request::envelope(&Input::Envelope(input.clone()), &thread.thread_id, &[])
                .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.0))?;
            Some(crate::envelope::from_value(value, &services.registry.catalog())?)
        }
    };
    let (objective, chat) = match &envelope {
        Some(envelope) => (envelope.objective.clone(), None),
        None => (row.objective.clone(), chat_of(&row)),
    };
    let correlation_id = uuid::Uuid::now_v7().to_string();
    let order = ForkOrder {
        point: ForkPoint { as_of: Some(seq), ..ForkPoint::default() },
        envelope,
        outputs: from.outputs.clone().into_iter().collect(),
    };
    let run_id = RunId::parse(&row.run_id).map_err(|_| not_found())?;
    // The parent's log is folded under a permit of the whole-run reads (as a fork's).
    let reading = services.run_reads.acquire().await;
    let parent = fork::read_parent(services, &run_id).await.map_err(on_request)?;
    // The fork is on this thread (a given envelope's thread id is set to it, the parent's is it):
    // its first commit checks that the thread is still its owner's, as any LangGraph run's does.
    let prepared = fork::prepare(services, &parent, order).map_err(on_request)?;
    drop((parent, reading));
    let owner = thread::run_owner(thread.owner.as_deref(), caller);
    let origin = Origin {
        correlation_id: Some(correlation_id.clone()),
        idempotency: None,
        owner: &owner,
        thread_rule: ThreadRule::OneActiveRun { metadata: GRAPH_METADATA, owner: thread.owner.clone(), create: false },
        trace_parent: None,
    };
    let started = fork::start(services, prepared, origin).await.map_err(on_request)?;
    let state = RunState::new(&started.run_id, &correlation_id);
    Ok(Started { run_id: started.run_id, state, objective, chat, frames: started.frames })
}

/// A fork's refusal at the fields of the LangGraph request.
fn on_request(error: ForkError) -> ApiError {
    match error {
        ForkError::Refused(details) => {
            let moved = |path: String| match path.strip_prefix("/outputs") {
                Some(rest) => format!("/command/update/outputs{rest}"),
                None => "/checkpoint_id".to_string(),
            };
            ApiError::invalid_request(details.into_iter().map(|d| FieldError { path: moved(d.path), ..d }).collect())
        }
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_part_of_the_metadata_refuses_only_what_it_holds_otherwise() {
        let known = json!({"run_id": "r-1", "step": 4, "frame": "node_complete"});
        let whole = json!({"run_id": "r-1", "step": 4, "frame": "node_complete", "nodeId": "draft"});
        let by_node = filter(json!({"frame": "node_complete", "nodeId": "draft"}));
        assert!(matches(&by_node, &known, false), "nodeId is not known before the fold");
        assert!(matches(&by_node, &whole, true));
        assert!(!matches(&filter(json!({"nodeId": "other"})), &whole, true));
        assert!(!matches(&filter(json!({"nodeId": "draft"})), &known, true), "a whole metadata lacking a key");
        assert!(!matches(&filter(json!({"frame": "plan_generated", "nodeId": "draft"})), &known, false));
        assert!(!matches(&filter(json!({"step": "4"})), &known, false), "values compare as JSON");
    }
}
