//! `/ui/new` — the composer: a task envelope as JSON, started from an example in `examples/` or
//! from a run being started again (Re-run), with its goal conditions as rows that compile as
//! they are typed. **Launch** posts it to `run.stream` from the page; the server validates it, and
//! its 400 details are shown at their fields.
//!
//! Forking (`?fork=<run>&version=N[&node=X]`, the run page's "Fork from …" links) shows the same
//! form with the run's envelope and, for a step, its output as an editable value; **Launch** posts
//! to `runs/{id}/fork` what was changed: the envelope only if edited (so a run's hidden values
//! stay as they were), the step's output if edited (the step is reused with it), else the step
//! runs again.
//!
//! The envelope is shown redacted, as the API serves it (`crate::redact`): a run's secrets do not
//! reach the page. The page lists where values were hidden, and does not launch while one still
//! reads `[redacted]`: they are typed again, never posted as the marker.

use actix_web::{HttpResponse, get, web};
use askama::Template;
use serde::Deserialize;
use serde_json::{Value, json};

use super::page::{self, Chrome};
use super::runs::unavailable;
use super::viewer::Viewer;
use crate::redact::REDACTED;
use crate::run::RunId;
use crate::run::nodes::NodeTable;
use crate::run::view::state_of;
use crate::services::Services;
use crate::store::runs::RunRow;

/// Hidden values the page lists by path; it counts the rest.
const HIDDEN_LISTED: usize = 20;

/// The envelopes of `examples/`, compiled in (a test checks that none is missing).
const EXAMPLES: [(&str, &str); 2] = [
    ("demo-envelope.json", include_str!("../../examples/demo-envelope.json")),
    ("json-schema-envelope.json", include_str!("../../examples/json-schema-envelope.json")),
];

#[derive(Debug, Deserialize)]
pub struct Start {
    /// Start again from this run's envelope.
    from: Option<String>,
    /// Start from this example.
    example: Option<String>,
    /// Fork this run, from plan version `version` (and step `node`).
    fork: Option<String>,
    version: Option<u32>,
    node: Option<String>,
}

/// What a fork starts from, as the page shows and posts it.
struct ForkSource {
    run_id: String,
    version: u32,
    node: Option<String>,
    /// The step's output (redacted), to edit.
    output: Option<String>,
}

#[derive(Template)]
#[template(path = "console/composer.html")]
struct ComposerPage {
    chrome: Chrome,
    examples: Vec<&'static str>,
    /// What the envelope started from, in words.
    started_from: String,
    envelope: String,
    rerun_of: Option<String>,
    fork: Option<ForkSource>,
    /// Where the envelope's values were redacted (JSON Pointers, at most [`HIDDEN_LISTED`]).
    hidden: Vec<String>,
    /// How many more were.
    hidden_more: usize,
    /// What a hidden value reads, for the page's script.
    redacted: &'static str,
}

impl page::Page for ComposerPage {
    fn chrome(&self) -> &Chrome {
        &self.chrome
    }
}

/// `GET /ui/new?from=<run id>` or `?example=<file>`.
#[get("/new")]
pub async fn compose(viewer: Viewer, query: web::Query<Start>, services: web::Data<Services>) -> HttpResponse {
    let query = query.into_inner();
    if let Some(run) = query.fork.as_deref() {
        return fork(viewer, run, query.version, query.node, &services).await;
    }
    let (started_from, envelope, rerun_of) = match query.from.as_deref().map(RunId::parse) {
        Some(Ok(run_id)) => match viewer.run_row(&services, &run_id).await {
            Ok(Some(row)) => {
                let stored: Value = serde_json::from_str(&row.envelope).unwrap_or_else(|_| json!({}));
                (format!("run {run_id}"), rerun(stored, run_id.as_str()), Some(run_id.to_string()))
            }
            Ok(None) => return not_found(&viewer),
            Err(error) => return unavailable(&viewer, &error),
        },
        Some(Err(_)) => return not_found(&viewer),
        None => {
            let name = query.example.as_deref().unwrap_or(EXAMPLES[0].0);
            let Some((name, text)) = EXAMPLES.iter().find(|(n, _)| *n == name) else { return not_found(&viewer) };
            let example: Value = serde_json::from_str(text).unwrap_or_else(|_| json!({}));
            (format!("examples/{name}"), example, None)
        }
    };
    render(&viewer, &services, started_from, envelope, rerun_of, None)
}

/// `GET /ui/new?fork=<run>&version=N[&node=X]`: the composer forking a run the viewer may see.
async fn fork(
    viewer: Viewer,
    run: &str,
    version: Option<u32>,
    node: Option<String>,
    services: &Services,
) -> HttpResponse {
    let Ok(run_id) = RunId::parse(run) else { return not_found(&viewer) };
    let row = match viewer.run_row(services, &run_id).await {
        Ok(Some(row)) => row,
        Ok(None) => return not_found(&viewer),
        Err(error) => return unavailable(&viewer, &error),
    };
    let newest = u32::try_from(row.plan_version).unwrap_or_default();
    let version = version.unwrap_or(newest);
    let missing = |what: String| page::message(Some(&viewer), 404, "Nothing to fork from", &what);
    if version == 0 || version > newest {
        return missing(format!("Run {run_id} has no plan version {version}: it is at version {newest}."));
    }
    let output = match &node {
        Some(node) => match step_output(services, &row, version, node).await {
            Ok(Some(output)) => {
                output.map(|output| serde_json::to_string_pretty(&services.redaction.value(output)).unwrap_or_default())
            }
            Ok(None) => {
                let node = crate::excerpt::excerpt(node, 100);
                return missing(format!("Plan version {version} of run {run_id} has no step {node:?}."));
            }
            Err(error) => return unavailable(&viewer, &error),
        },
        None => None,
    };
    let point = node.as_ref().map_or(String::new(), |node| format!(", step {node}"));
    let started_from = format!("run {run_id}, plan version {version}{point} (a fork)");
    let envelope = as_written(serde_json::from_str(&row.envelope).unwrap_or_else(|_| json!({})));
    let source = ForkSource { run_id: run_id.to_string(), version, node, output };
    render(&viewer, services, started_from, envelope, None, Some(source))
}

/// Step `node` of plan version `version` of the run of `row`, if there is one: with the output it
/// recorded, if it completed.
async fn step_output(
    services: &Services,
    row: &RunRow,
    version: u32,
    node: &str,
) -> Result<Option<Option<Value>>, crate::run::view::ViewError> {
    let _reading = services.run_reads.acquire().await;
    let (_, nodes) = state_of(services, row, None, NodeTable::default()).await?;
    let step = nodes.into_nodes().into_iter().find(|n| n.plan_version == version && n.node_id == node);
    Ok(step.map(|n| n.output))
}

fn render(
    viewer: &Viewer,
    services: &Services,
    started_from: String,
    envelope: Value,
    rerun_of: Option<String>,
    fork: Option<ForkSource>,
) -> HttpResponse {
    let envelope = services.redaction.value(envelope);
    let mut hidden = Vec::new();
    redacted_paths(&envelope, &mut String::new(), &mut hidden);
    let hidden_more = hidden.len().saturating_sub(HIDDEN_LISTED);
    hidden.truncate(HIDDEN_LISTED);
    page::html(&ComposerPage {
        chrome: Chrome::new("new", Some(viewer)),
        examples: EXAMPLES.iter().map(|(name, _)| *name).collect(),
        started_from,
        envelope: serde_json::to_string_pretty(&envelope).unwrap_or_default(),
        rerun_of,
        fork,
        hidden,
        hidden_more,
        redacted: REDACTED,
    })
}

/// The JSON Pointers of the values in `value` (at `path`) that read [`REDACTED`].
fn redacted_paths(value: &Value, path: &mut String, found: &mut Vec<String>) {
    let mut descend = |key: &str, item: &Value| {
        let length = path.len();
        path.push('/');
        path.push_str(&key.replace('~', "~0").replace('/', "~1"));
        redacted_paths(item, path, found);
        path.truncate(length);
    };
    match value {
        Value::String(text) if text == REDACTED => found.push(path.clone()),
        Value::Object(map) => map.iter().for_each(|(key, item)| descend(key, item)),
        Value::Array(items) => items.iter().enumerate().for_each(|(i, item)| descend(&i.to_string(), item)),
        _ => {}
    }
}

fn not_found(viewer: &Viewer) -> HttpResponse {
    let text = "There is no such run that you may see, or no such example.";
    page::message(Some(viewer), 404, "Nothing to start from", text)
}

/// A stored envelope made ready to post again as a run of its own: [`as_written`], and
/// `metadata.rerunOf` naming the run.
fn rerun(envelope: Value, run_id: &str) -> Value {
    let mut envelope = as_written(envelope);
    if !envelope.get("metadata").is_some_and(Value::is_object) {
        envelope["metadata"] = json!({});
    }
    if let Some(metadata) = envelope.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert("rerunOf".into(), Value::String(run_id.to_string()));
    }
    envelope
}

/// A stored envelope as its caller wrote it: each condition as written (the stored envelope adds
/// its compiled forms), and no correlation id of the old run.
fn as_written(mut envelope: Value) -> Value {
    if let Some(goals) = envelope.get_mut("goal_condition").and_then(Value::as_array_mut) {
        for goal in goals {
            if let Some(dsl) = goal.pointer("/condition/dsl").cloned() {
                goal["condition"] = json!({"dsl": dsl});
            }
        }
    }
    if let Some(metadata) = envelope.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("correlationId");
    }
    envelope
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_is_offered_and_is_json() {
        let mut files: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".json"))
            .collect();
        files.sort();
        assert_eq!(files, EXAMPLES.map(|(name, _)| name.to_string()));
        for (name, text) in EXAMPLES {
            assert!(serde_json::from_str::<Value>(text).is_ok(), "{name}");
        }
    }

    #[test]
    fn a_rerun_envelope_keeps_the_conditions_as_written_and_names_its_parent() {
        let stored = json!({
            "objective": "o",
            "goal_condition": [
                {"facet": "f", "path": "", "condition": {"dsl": "x > 1", "canonicalDsl": "x > 1", "jsonLogic": {">": [{"var": "x"}, 1]}, "variables": ["x"]}},
                {"facet": "g", "path": "", "condition": {"jsonLogic": {"var": "y"}}}
            ],
            "metadata": {"correlationId": "c-1", "runLabel": "l"}
        });
        let again = rerun(stored, "r-1");
        assert_eq!(again["goal_condition"][0]["condition"], json!({"dsl": "x > 1"}));
        assert_eq!(again["goal_condition"][1]["condition"], json!({"jsonLogic": {"var": "y"}}));
        assert_eq!(again["metadata"], json!({"runLabel": "l", "rerunOf": "r-1"}));
        assert_eq!(rerun(json!({"objective": "o"}), "r-2")["metadata"], json!({"rerunOf": "r-2"}));
    }

    #[test]
    fn hidden_values_are_found_by_their_paths() {
        let envelope = json!({"inputs": {"a/b": {"key": REDACTED}, "list": [1, REDACTED], "t~": REDACTED, "x": "y"}});
        let mut found = Vec::new();
        redacted_paths(&envelope, &mut String::new(), &mut found);
        found.sort();
        assert_eq!(found, ["/inputs/a~1b/key", "/inputs/list/1", "/inputs/t~0"]);
    }
}
