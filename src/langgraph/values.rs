//! The `values` events of a LangGraph stream, written as text. A stream sends the run's whole
//! projection ([`project::Values`]) after every step, and most of it did not change since the
//! last one: the outputs of the nodes that completed before, the plan's edges, the goal
//! results, the usage. Each of those is kept as the JSON text it was written as, and written
//! again only when it changes; the rest (statuses, the plan's nodes) is small and written each
//! time, by hand around the kept texts. The text is what [`project::values`] writes (every
//! object's keys in order), so a stream's last `values` and the thread's state read the same.
//!
//! The run's id and its objective are written once, when the writer is made for the run's
//! stream; a plan's edges and each of its nodes' fixed fields (capability, id, label) once per
//! plan: only a node's status changes between events.
//!
//! Secrets: each kept text remembers whether a key in it may name one (judged as it is written),
//! the keys written by hand are judged once, and a node's id (a key of `outputs`) with its
//! output. If any may, [`ValuesWriter::write`] declines and the caller writes the values
//! through the redaction.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};

use super::project;
use crate::condition::GoalConditionResult;
use crate::elide;
use crate::events::Event;
use crate::hash::HashMap;
use crate::plan::{IndexedPlan, Plan, PlanNode};
use crate::redact::Redaction;
use crate::run::state::RunState;
use flexrun_core::usage::Usage;

/// Writes the `values` of one stream's run, keeping what it wrote between events.
pub struct ValuesWriter {
    /// Each completed node's latest output as written, by node id; dropped when the node
    /// completes again (the state holds the new output).
    outputs: HashMap<String, Piece>,
    goal_results: Memo<Vec<GoalConditionResult>>,
    usage: Memo<Usage>,
    /// The current plan's edges and node rows but for their statuses.
    plan: PlanText,
    /// The run's id and objective as JSON strings.
    run_id: String,
    objective: String,
    /// Whether one of the keys written by hand ([`Key`]) may name a secret.
    own_keys_secret: bool,
}

impl ValuesWriter {
    /// The writer of the stream of run `run_id`, whose objective is `objective`.
    pub fn new(redaction: &Redaction, run_id: &str, objective: &str) -> Self {
        Self {
            outputs: HashMap::default(),
            goal_results: Memo::default(),
            usage: Memo::default(),
            plan: PlanText::default(),
            run_id: json_string(run_id),
            objective: json_string(objective),
            own_keys_secret: Key::ALL.iter().any(|key| redaction.is_secret(key.as_str())),
        }
    }

    /// `event` was applied to the state: what it changed is written anew next time.
    pub fn saw(&mut self, event: &Event) {
        if let Event::NodeComplete(complete) = event {
            self.outputs.remove(complete.node_id.as_str());
        }
    }

    /// The run's `values` (with its open requests under `__interrupt__`) as JSON text, or `None`
    /// when a key in it may name a secret: then the caller writes them through the redaction.
    pub fn write(&mut self, state: &RunState, chat: Option<&[Value]>, redaction: &Redaction) -> Option<String> {
        if self.own_keys_secret {
            return None;
        }
        for work in state.completed() {
            if !self.outputs.contains_key(&work.node_id) {
                let mut piece = Piece::of(&work.output, redaction);
                piece.secret_keys |= redaction.is_secret(&work.node_id);
                self.outputs.insert(work.node_id.clone(), piece);
            }
        }
        let kept = Kept {
            goal_results: self.goal_results.of(super::project::goal_results(state), redaction),
            plan: state.plan().map(|indexed| {
                let plan: &Plan = indexed;
                (plan, self.plan.of(indexed, redaction))
            }),
            usage: self.usage.of(&state.usage.total, redaction),
            outputs: Outputs::of(state, &self.outputs),
            run_id: &self.run_id,
            objective: &self.objective,
        };
        let fresh = Fresh::of(state, chat, redaction);
        if kept.secret_keys() || fresh.secret_keys() {
            return None;
        }
        String::from_utf8(compose(state, &kept, &fresh)).ok()
    }
}

/// `text` as a JSON string.
fn json_string(text: &str) -> String {
    // A string into a string: cannot fail.
    serde_json::to_string(text).unwrap_or_default()
}

/// What a `values` event holds of what the writer keeps.
struct Kept<'a> {
    goal_results: &'a Piece,
    plan: Option<(&'a Plan, &'a PlanText)>,
    usage: &'a Piece,
    outputs: Outputs<'a>,
    run_id: &'a str,
    objective: &'a str,
}

impl Kept<'_> {
    fn secret_keys(&self) -> bool {
        let pieces = [Some(self.goal_results), self.plan.map(|(_, text)| &text.edges), Some(self.usage)];
        self.outputs.secret_keys || pieces.iter().flatten().any(|piece| piece.secret_keys)
    }
}

/// What a run has only at its end or while it waits, written as it comes.
struct Fresh {
    interrupts: Option<Piece>,
    error: Option<Piece>,
    output: Option<Piece>,
    messages: Option<Piece>,
}

impl Fresh {
    fn of(state: &RunState, chat: Option<&[Value]>, redaction: &Redaction) -> Self {
        let end = state.end.as_ref();
        let interrupts = project::interrupts(state);
        Self {
            interrupts: (!interrupts.is_empty()).then(|| Piece::of(&Value::Array(interrupts), redaction)),
            error: end.and_then(|end| end.error.as_ref()).map(|error| Piece::of(error, redaction)),
            output: end.map(|end| Piece::of(&end.output, redaction)),
            messages: chat.map(|chat| {
                let mut messages = chat.to_vec();
                messages.extend(project::answer(state, redaction));
                Piece::of(&Value::Array(messages), redaction)
            }),
        }
    }

    fn secret_keys(&self) -> bool {
        [&self.interrupts, &self.error, &self.output, &self.messages]
            .iter()
            .flat_map(|piece| piece.as_ref())
            .any(|piece| piece.secret_keys)
    }
}

/// The `values` document, its keys in order.
fn compose(state: &RunState, kept: &Kept<'_>, fresh: &Fresh) -> Vec<u8> {
    let mut text = Vec::with_capacity(2048);
    let mut doc = Object::open(&mut text);
    if let Some(interrupts) = &fresh.interrupts {
        doc.raw(Key::Interrupt, &interrupts.text);
    }
    if let Some(error) = &fresh.error {
        doc.raw(Key::Error, &error.text);
    }
    doc.raw(Key::GoalConditionResults, &kept.goal_results.text);
    if let Some(messages) = &fresh.messages {
        doc.raw(Key::Messages, &messages.text);
    }
    doc.raw(Key::Objective, kept.objective);
    if let Some(output) = &fresh.output {
        doc.raw(Key::Output, &output.text);
    }
    doc.key(Key::Outputs);
    kept.outputs.write(doc.out);
    doc.key(Key::Plan);
    match kept.plan {
        Some((plan, text)) => write_plan(doc.out, state, plan, text),
        None => doc.out.extend_from_slice(b"null"),
    }
    doc.value(Key::PlanVersion, &state.plan_version());
    doc.raw(Key::RunId, kept.run_id);
    doc.value(Key::Status, &state.status);
    doc.raw(Key::Usage, &kept.usage.text);
    doc.close();
    text
}

/// The current plan as `project::values` shows it: its nodes with their statuses now.
fn write_plan(out: &mut Vec<u8>, state: &RunState, plan: &Plan, text: &PlanText) {
    let mut doc = Object::open(out);
    doc.raw(Key::Edges, &text.edges.text);
    doc.key(Key::Nodes);
    doc.out.push(b'[');
    for (i, (node, row)) in plan.nodes.iter().zip(&text.rows).enumerate() {
        if i > 0 {
            doc.out.push(b',');
        }
        let status = state.nodes.get(&node.id).copied().unwrap_or(node.status);
        doc.out.extend_from_slice(row.as_bytes());
        // A status into a vector: cannot fail.
        let _ = serde_json::to_writer(&mut *doc.out, status.as_str());
        doc.out.push(b'}');
    }
    doc.out.push(b']');
    doc.value(Key::Version, &plan.version);
    doc.close();
}

/// What of the current plan's text stays while the plan does: its edges, and each node's row in
/// `plan.nodes` as it begins — its fixed fields, up to the value of `status` (the last key, the
/// one that changes). Written again when the plan changes.
#[derive(Default)]
struct PlanText {
    /// The plan the rows are of, compared by identity: the state replaces its plan rather than
    /// changing it, and the `Arc` held here keeps the old plan's allocation from being reused by
    /// a new one while the rows stand.
    plan: Option<Arc<IndexedPlan>>,
    edges: Piece,
    rows: Vec<String>,
}

impl PlanText {
    fn of(&mut self, plan: &Arc<IndexedPlan>, redaction: &Redaction) -> &Self {
        if !self.plan.as_ref().is_some_and(|kept| Arc::ptr_eq(kept, plan)) {
            self.edges = Piece::of(&json!(plan.edges), redaction);
            self.rows = plan.nodes.iter().map(row_start).collect();
            self.plan = Some(plan.clone());
        }
        self
    }
}

/// `{"capabilityId":…,"id":…,"label":…,"status":` of `node`.
fn row_start(node: &PlanNode) -> String {
    let mut text = Vec::with_capacity(128);
    let mut row = Object::open(&mut text);
    row.value(Key::CapabilityId, node.capability_id.as_str());
    row.value(Key::Id, node.id.as_str());
    row.value(Key::Label, node.label.as_str());
    row.key(Key::Status);
    String::from_utf8(text).unwrap_or_default()
}

/// Declares [`Key`], its texts and the list of them in one place, so none escapes the judgement.
macro_rules! keys {
    ($($key:ident => $text:literal,)*) => {
        /// The keys the writer writes itself (every other key is in a kept text).
        #[derive(Debug, Clone, Copy)]
        enum Key {
            $($key,)*
        }

        impl Key {
            const ALL: &[Key] = &[$(Key::$key,)*];

            fn as_str(self) -> &'static str {
                match self {
                    $(Key::$key => $text,)*
                }
            }
        }
    };
}

keys! {
    Interrupt => "__interrupt__",
    Error => "error",
    GoalConditionResults => "goalConditionResults",
    Messages => "messages",
    Objective => "objective",
    Output => "output",
    Outputs => "outputs",
    Plan => "plan",
    PlanVersion => "planVersion",
    RunId => "runId",
    Status => "status",
    Usage => "usage",
    Edges => "edges",
    Nodes => "nodes",
    Version => "version",
    CapabilityId => "capabilityId",
    Id => "id",
    Label => "label",
}

/// A JSON object written by hand, its keys in the order they are given (the caller gives them
/// sorted, as a `serde_json::Value` writes them).
struct Object<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl<'o> Object<'o> {
    fn open(out: &'o mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, first: true }
    }

    fn key(&mut self, key: Key) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        // Every key is a plain word: nothing to escape.
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_str().as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// `key` and a JSON text kept from before.
    fn raw(&mut self, key: Key, text: &str) {
        self.key(key);
        self.out.extend_from_slice(text.as_bytes());
    }

    /// `key` and a value without keys of its own (a string, a number, a status).
    fn value(&mut self, key: Key, value: &(impl Serialize + ?Sized)) {
        self.key(key);
        // Writing a string or a number into a vector cannot fail.
        let _ = serde_json::to_writer(&mut *self.out, value);
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// A value's JSON text (keys in order), and whether a key in it may name a secret.
struct Piece {
    text: String,
    secret_keys: bool,
}

impl Piece {
    fn of(value: &Value, redaction: &Redaction) -> Self {
        let mut watch = redaction.watch();
        let mut text = Vec::with_capacity(256);
        let written = value.serialize(&mut serde_json::Serializer::with_formatter(&mut text, &mut watch));
        match written.ok().and_then(|()| String::from_utf8(text).ok()) {
            Some(text) => Self { text, secret_keys: watch.found() },
            None => Self::default(),
        }
    }
}

/// `null`, taken for a secret: a piece not written yet, or one that could not be (never: a
/// `Value` always writes), sends the caller the redaction's way.
impl Default for Piece {
    fn default() -> Self {
        Self { text: "null".into(), secret_keys: true }
    }
}

/// A piece written from `key` (as its JSON value, keys in order), written again when `key` changes.
#[derive(Default)]
struct Memo<K> {
    key: Option<K>,
    piece: Piece,
}

impl<K: Clone + PartialEq + Serialize> Memo<K> {
    fn of(&mut self, key: &K, redaction: &Redaction) -> &Piece {
        if self.key.as_ref() != Some(key) {
            self.piece = Piece::of(&json!(key), redaction);
            self.key = Some(key.clone());
        }
        &self.piece
    }
}

/// The outputs of the run's completed nodes, by node id; the largest are left out beyond
/// `project::VALUES_OUTPUT_BYTES` together, as [`project::values`] leaves them out.
struct Outputs<'a> {
    written: BTreeMap<&'a str, Output<'a>>,
    secret_keys: bool,
}

enum Output<'a> {
    Whole(&'a str),
    LeftOut(Value),
}

impl<'a> Outputs<'a> {
    fn of(state: &'a RunState, pieces: &'a HashMap<String, Piece>) -> Self {
        let latest: BTreeMap<&str, &Piece> = state
            .completed()
            .iter()
            .filter_map(|work| Some((work.node_id.as_str(), pieces.get(&work.node_id)?)))
            .collect();
        let sizes: Vec<usize> = latest.values().map(|piece| piece.text.len()).collect();
        let out = elide::left_out(&sizes, project::VALUES_OUTPUT_BYTES);
        let mut secret_keys = false;
        let written = latest
            .into_iter()
            .zip(sizes.into_iter().zip(out))
            .map(|((node, piece), (size, out))| {
                secret_keys |= piece.secret_keys;
                (node, if out { Output::LeftOut(elide::marker(size, None)) } else { Output::Whole(&piece.text) })
            })
            .collect();
        Self { written, secret_keys }
    }

    /// `{"<node id>": <output>, …}`, the node ids in order.
    fn write(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, (node, output)) in self.written.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // A string into a vector: cannot fail.
            let _ = serde_json::to_writer(&mut *out, node);
            out.push(b':');
            match output {
                Output::Whole(text) => out.extend_from_slice(text.as_bytes()),
                Output::LeftOut(marker) => {
                    let _ = serde_json::to_writer(&mut *out, marker);
                }
            }
        }
        out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::RunId;

    #[test]
    fn a_run_before_its_first_frame_writes_as_its_projection() {
        let state = RunState::new(&RunId::generate(), "c");
        let redaction = Redaction::default();
        let written =
            ValuesWriter::new(&redaction, state.run_id.as_str(), "Write \"a\" post").write(&state, None, &redaction);
        assert_eq!(written, Some(project::values(&state, "Write \"a\" post", None, &redaction).to_string()));
    }

    #[test]
    fn a_key_it_writes_itself_that_may_name_a_secret_sends_the_values_the_redactions_way() {
        let state = RunState::new(&RunId::generate(), "c");
        let redaction = Redaction::new(&["label".into()]);
        assert!(redaction.is_secret("label"));
        assert_eq!(ValuesWriter::new(&redaction, state.run_id.as_str(), "o").write(&state, None, &redaction), None);
    }
}
