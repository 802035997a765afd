//! The `values` events of a LangGraph stream, written as text. A stream sends the run's whole
//! projection ([`project::Values`]) after every step, and most of it did not change since the
//! last one: the outputs of the nodes that completed before, the plan's edges, the goal
//! results, the usage. Each of those is kept as the JSON text it was written as, and written
//! again only when it changes; the rest (statuses, the end, open requests) is small and written
//! each time. The text is what [`project::values`] writes (every object's keys in order), so a
//! stream's last `values` and the thread's state read the same.

use std::collections::{BTreeMap, HashMap};

use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::project;
use crate::condition::GoalConditionResult;
use crate::elide;
use crate::events::Event;
use crate::plan::{Edge, NodeId, Plan};
use crate::redact::Redaction;
use crate::run::RunStatus;
use crate::run::state::RunState;
use flexrun_core::usage::Usage;

/// Writes the `values` of one stream's run, keeping what it wrote between events.
#[derive(Default)]
pub struct ValuesWriter {
    /// Each completed node's latest output as written, by node id; dropped when the node
    /// completes again (the state holds the new output).
    outputs: HashMap<String, Piece>,
    edges: Memo<Vec<Edge>>,
    goal_results: Memo<Vec<GoalConditionResult>>,
    usage: Memo<Usage>,
}

impl ValuesWriter {
    /// `event` was applied to the state: what it changed is written anew next time.
    pub fn saw(&mut self, event: &Event) {
        if let Event::NodeComplete(complete) = event {
            self.outputs.remove(complete.node_id.as_str());
        }
    }

    /// The run's `values` (with its open requests under `__interrupt__`) as JSON text, or `None`
    /// when a key in it may name a secret: then the caller writes them through the redaction.
    pub fn write(
        &mut self,
        state: &RunState,
        objective: &str,
        chat: Option<&[Value]>,
        redaction: &Redaction,
    ) -> Option<String> {
        for work in state.completed() {
            if !self.outputs.contains_key(&work.node_id) {
                self.outputs.insert(work.node_id.clone(), Piece::of(&work.output, redaction));
            }
        }
        let goal_results = match &state.end {
            Some(end) => end.goal_condition_results.as_ref(),
            None => Some(&state.repair),
        };
        let goal_results = match goal_results {
            Some(results) => Some(self.goal_results.of(results, redaction)),
            None => None,
        };
        let plan = match state.plan() {
            Some(plan) => Some(PlanDoc::of(state, plan, self.edges.of(&plan.edges, redaction))),
            None => None,
        };
        let usage = self.usage.of(&state.usage.total, redaction);
        let outputs = Outputs::of(state, &self.outputs);
        let secret_keys = outputs.secret_keys
            || goal_results.is_some_and(|piece| piece.secret_keys)
            || plan.as_ref().is_some_and(|plan| plan.secret_keys)
            || usage.secret_keys;
        if secret_keys {
            return None;
        }
        let end = state.end.as_ref();
        let messages = chat.map(|chat| {
            let mut messages = chat.to_vec();
            messages.extend(project::answer(state));
            messages
        });
        let doc = Doc {
            interrupts: project::interrupts(state),
            error: end.and_then(|end| end.error.as_ref()),
            goal_results: goal_results.map(|piece| &*piece.text),
            messages,
            objective,
            output: end.map(|end| &end.output),
            outputs,
            plan,
            plan_version: state.plan_version(),
            run_id: state.run_id.as_str(),
            status: state.status,
            usage: &usage.text,
        };
        let mut watch = redaction.watch();
        let mut text = Vec::with_capacity(1024);
        doc.serialize(&mut serde_json::Serializer::with_formatter(&mut text, &mut watch)).ok()?;
        if watch.found() {
            return None;
        }
        String::from_utf8(text).ok()
    }
}

/// A value's JSON text (keys in order), and whether a key in it may name a secret.
struct Piece {
    text: Box<RawValue>,
    secret_keys: bool,
}

impl Piece {
    fn of(value: &Value, redaction: &Redaction) -> Self {
        let mut watch = redaction.watch();
        let mut text = Vec::with_capacity(256);
        let written = value.serialize(&mut serde_json::Serializer::with_formatter(&mut text, &mut watch));
        let text = written.ok().and_then(|()| String::from_utf8(text).ok()).and_then(|t| RawValue::from_string(t).ok());
        match text {
            Some(text) => Self { text, secret_keys: watch.found() },
            None => Self::default(),
        }
    }
}

/// `null`, taken for a secret: a piece not written yet, or one that could not be (never: a
/// `Value` always writes), sends the caller the redaction's way.
impl Default for Piece {
    fn default() -> Self {
        Self { text: Box::default(), secret_keys: true }
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

/// `values` with its keys in the order [`project::values`] writes them.
#[derive(Serialize)]
struct Doc<'a> {
    #[serde(rename = "__interrupt__", skip_serializing_if = "Vec::is_empty")]
    interrupts: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Value>,
    #[serde(rename = "goalConditionResults")]
    goal_results: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<Vec<Value>>,
    objective: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a Value>,
    outputs: Outputs<'a>,
    plan: Option<PlanDoc<'a>>,
    #[serde(rename = "planVersion")]
    plan_version: u32,
    #[serde(rename = "runId")]
    run_id: &'a str,
    status: RunStatus,
    usage: &'a RawValue,
}

/// The current plan as `project::values` shows it: its nodes with their statuses now.
#[derive(Serialize)]
struct PlanDoc<'a> {
    edges: &'a RawValue,
    nodes: Vec<NodeDoc<'a>>,
    version: u32,
    #[serde(skip)]
    secret_keys: bool,
}

impl<'a> PlanDoc<'a> {
    fn of(state: &'a RunState, plan: &'a Plan, edges: &'a Piece) -> Self {
        let nodes = plan
            .nodes
            .iter()
            .map(|node| NodeDoc {
                capability_id: &node.capability_id,
                id: &node.id,
                label: &node.label,
                status: state.nodes.get(&node.id).copied().unwrap_or(node.status).as_str(),
            })
            .collect();
        Self { edges: &edges.text, nodes, version: plan.version, secret_keys: edges.secret_keys }
    }
}

#[derive(Serialize)]
struct NodeDoc<'a> {
    #[serde(rename = "capabilityId")]
    capability_id: &'a str,
    id: &'a NodeId,
    label: &'a str,
    status: &'static str,
}

/// The outputs of the run's completed nodes, by node id; the largest are left out beyond
/// `project::VALUES_OUTPUT_BYTES` together, as [`project::values`] leaves them out.
struct Outputs<'a> {
    written: BTreeMap<&'a str, Output<'a>>,
    secret_keys: bool,
}

enum Output<'a> {
    Whole(&'a RawValue),
    LeftOut(Value),
}

impl<'a> Outputs<'a> {
    fn of(state: &'a RunState, pieces: &'a HashMap<String, Piece>) -> Self {
        let latest: BTreeMap<&str, &Piece> = state
            .completed()
            .iter()
            .filter_map(|work| Some((work.node_id.as_str(), pieces.get(&work.node_id)?)))
            .collect();
        let sizes: Vec<usize> = latest.values().map(|piece| piece.text.get().len()).collect();
        let out = elide::left_out(&sizes, project::VALUES_OUTPUT_BYTES);
        let mut secret_keys = false;
        let written = latest
            .into_iter()
            .zip(sizes.into_iter().zip(out))
            .map(|((node, piece), (size, out))| {
                if out {
                    return (node, Output::LeftOut(elide::marker(size, None)));
                }
                secret_keys |= piece.secret_keys;
                (node, Output::Whole(&piece.text))
            })
            .collect();
        Self { written, secret_keys }
    }
}

impl Serialize for Outputs<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.written.iter().map(|(node, output)| match output {
            Output::Whole(text) => (node, OutputRef::Text(text)),
            Output::LeftOut(marker) => (node, OutputRef::Value(marker)),
        }))
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutputRef<'a> {
    Text(&'a RawValue),
    Value(&'a Value),
}
