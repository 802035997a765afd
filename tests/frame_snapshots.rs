//! Snapshots of the exact wire form of frames.
//!
//! Each scenario drives one real run over the real server (loopback HTTP, SQLite, the scripted
//! stand-in model) and pins its whole event log — every frame's JSON text, in `seq` order, byte
//! for byte — against `tests/snapshots/<scenario>.jsonl` (one frame per line). It also checks that
//! every `data:` text the SSE streams delivered is the very text stored for that `seq`.
//!
//! The point is to prove that a change to how frames are produced leaves the wire untouched: field
//! order, optional fields, number formats, messages. So the stored text is compared as text, never
//! re-serialised. Only what differs from one run to the next is replaced, by text: UUIDs (numbered
//! in order of first appearance, `<id-1>`, …), RFC 3339 timestamps (`<time>`) and the jittered
//! `delayMs` of a retry (`<delay-ms>`). Every plan runs its nodes one after another, so the order
//! of frames cannot vary.
//!
//! `UPDATE_SNAPSHOTS=1 cargo test --locked --test frame_snapshots` writes the snapshot files;
//! without it, a missing or different snapshot fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use support::*;

const UPDATE_HINT: &str = "run `UPDATE_SNAPSHOTS=1 cargo test --locked --test frame_snapshots` to (re)write the \
                           snapshots, and review the diff of tests/snapshots/";

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// The demo (`flexrun demo`): the first plan fails both goal conditions, the repair replan adds a
/// polish and a final review, and the run completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_repair() {
    let options = Options { capabilities: demo_capabilities(), ..Options::default() };
    let mut scenario = Scenario::start(flexrun::cli::demo_script(), options).await;
    let envelope = read_json(&crate_path("examples/demo-envelope.json"));
    let frames = scenario.run(&envelope).await;
    assert_eq!(
        kinds(&frames),
        [
            "start",
            "plan_requested",
            "plan_generated",
            "node_start",
            "node_complete",
            "node_start",
            "node_complete",
            "node_start",
            "node_complete",
            "goal_condition_failed",
            "plan_requested",
            "plan_generated",
            "plan_updated",
            "node_start",
            "node_complete",
            "node_start",
            "node_complete",
            "complete"
        ]
    );
    assert_eq!(frames.last().unwrap().json()["payload"]["status"], "completed");
    scenario.finish(&run_id(&frames), "demo_repair").await;
}

/// Plan approval: the first plan is rejected with feedback (a new plan version, waiting again),
/// the second is approved and runs to completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_approval() {
    let mut scenario = Scenario::start(feedback_replan_script(), Options::default()).await;
    let frames = scenario.run(&with_policies(json!({"approval": {"plan": "required"}}))).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "plan_generated", "hitl_request"]);
    let run = run_id(&frames);
    scenario.server.wait_for_status(&run, "awaiting_hitl").await;

    let rejection = decide(&run, &request_id(&frames), false, Some("add a polish step"));
    let frames = scenario.resume(rejection).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "plan_requested", "plan_generated", "plan_updated", "hitl_request"]);
    scenario.server.wait_for_status(&run, "awaiting_hitl").await;

    let mut approval = decide(&run, &request_id(&frames), true, None);
    approval["expectedPlanVersion"] = json!(2);
    let frames = scenario.resume(approval).await;
    assert_eq!(
        kinds(&frames),
        ["hitl_resolved", "node_start", "node_complete", "node_start", "node_complete", "complete"]
    );
    scenario.finish(&run, "plan_approval").await;
}

/// A human task: an output that breaks the contract keeps the run waiting, a valid one completes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_task() {
    let mut capabilities = default_capabilities();
    capabilities.push(human_reviewer());
    let options = Options { capabilities, ..Options::default() };
    let script = planner_then(&[("draft", "writer"), ("review", "reviewer")], post(0.9));
    let mut scenario = Scenario::start(script, options).await;
    let frames = scenario.run(&envelope()).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "plan_generated", "node_start", "node_complete", "node_start", "log"]
    );
    let run = run_id(&frames);
    scenario.server.wait_for_status(&run, "awaiting_human").await;

    let invalid = json!({"runId": run, "operator": {"id": "op-3"},
                         "payload": {"nodeId": "review", "output": {"approved": "yes"}}});
    let frames = scenario.resume(invalid).await;
    assert_eq!(kinds(&frames), ["validation_error", "node_error"]);
    scenario.server.wait_for_status(&run, "awaiting_human").await;

    let valid = json!({"runId": run, "operator": {"id": "op-3"}, "note": "reads well",
                       "payload": {"nodeId": "review", "output": {"approved": true}}});
    let frames = scenario.resume(valid).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "node_complete", "complete"]);
    scenario.finish(&run, "human_task").await;
}

/// A node's question (a CLARIFY signal), answered by an operator; the node runs again and the run
/// completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clarification() {
    let script = script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]);
        }
        if call.user.contains("### CLARIFICATIONS") {
            return post(0.9);
        }
        Reply::json(json!({"signal": "CLARIFY", "question": "Formal or casual?", "context": {"audience": "mixed"}}))
    });
    let mut scenario = Scenario::start(script, Options::default()).await;
    let frames = scenario.run(&envelope()).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "plan_generated", "node_start", "hitl_request", "log"]);
    let run = run_id(&frames);
    scenario.server.wait_for_status(&run, "awaiting_hitl").await;

    let frames = scenario.resume(decide(&run, &request_id(&frames), true, Some("casual"))).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "node_start", "node_complete", "complete"]);
    scenario.finish(&run, "clarification").await;
}

/// A runtime policy pauses the run after the draft; approved, the polish runs and the run completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_pause() {
    let script = planner_then(&[("draft", "writer"), ("polish", "editor")], post(0.9));
    let mut scenario = Scenario::start(script, Options::default()).await;
    let policies = json!({"runtime": [
        {"id": "look", "trigger": {"kind": "onNodeComplete", "selector": {"nodeId": "draft"}},
         "action": {"type": "pause", "reason": "check the draft"}}
    ]});
    let frames = scenario.run(&with_policies(policies)).await;
    assert_eq!(
        kinds(&frames),
        [
            "start",
            "plan_requested",
            "plan_generated",
            "node_start",
            "node_complete",
            "policy_update",
            "hitl_request",
            "log"
        ]
    );
    let run = run_id(&frames);
    scenario.server.wait_for_status(&run, "awaiting_hitl").await;

    let frames = scenario.resume(decide(&run, &request_id(&frames), true, None)).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "node_start", "node_complete", "complete"]);
    scenario.finish(&run, "policy_pause").await;
}

/// A run reaches its budget after the draft and waits; an operator raises it and the polish runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_pause() {
    let script = planner_then(&[("draft", "writer"), ("polish", "editor")], post(0.9));
    let mut scenario = Scenario::start(script, Options::default()).await;
    let mut envelope = envelope();
    envelope["policies"] = json!({"budget": {"maxModelCalls": 2, "maxTokens": 100000}});
    let frames = scenario.run(&envelope).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "plan_generated", "node_start", "node_complete", "budget_exceeded", "hitl_request"]
    );
    let run = run_id(&frames);
    scenario.server.wait_for_status(&run, "awaiting_hitl").await;

    let mut raise = decide(&run, &request_id(&frames), true, None);
    raise["decision"]["budget"] = json!({"maxModelCalls": 4});
    let frames = scenario.resume(raise).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "node_start", "node_complete", "complete"]);
    scenario.finish(&run, "budget_pause").await;
}

/// Goal conditions that never hold: every repair replan is spent and the run fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goal_condition_limit() {
    let script = planner_then(&[("draft", "writer")], post(0.1));
    let mut scenario = Scenario::start(script, Options::default()).await;
    let frames = scenario.run(&envelope()).await;
    assert_eq!(kinds(&frames).iter().filter(|k| **k == "goal_condition_failed").count(), 2);
    let complete = frames.last().unwrap().json();
    assert_eq!(complete["payload"]["error"]["code"], "goal_condition_replan_limit");
    scenario.finish(&run_id(&frames), "goal_condition_limit").await;
}

/// A capability output that breaks its contract fails the node, and with it the run; the node
/// after it never starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_failed() {
    let script = planner_then(&[("draft", "writer"), ("polish", "editor")], Reply::json(json!({"text": "no score"})));
    let mut scenario = Scenario::start(script, Options::default()).await;
    let frames = scenario.run(&envelope()).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "plan_generated", "node_start", "validation_error", "node_error", "complete"]
    );
    assert_eq!(frames[6].json()["payload"]["error"]["code"], "node_failed");
    scenario.finish(&run_id(&frames), "node_failed").await;
}

/// An operator replans a run waiting for its plan's approval, then cancels it while the new plan
/// waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_replan_then_cancel() {
    let mut scenario = Scenario::start(feedback_replan_script(), Options::default()).await;
    let frames = scenario.run(&with_policies(json!({"approval": {"plan": "required"}}))).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "plan_generated", "hitl_request"]);
    let run = run_id(&frames);
    scenario.server.wait_for_status(&run, "awaiting_hitl").await;

    let body = json!({"feedback": "add a polish step", "note": "too thin", "operator": {"id": "op-2"}});
    let answer = scenario.post(&format!("/api/v1/flex/runs/{run}/replan"), body).await;
    assert_eq!(answer["status"], "planning");
    let frames = scenario.follow(&run, 4).await;
    assert_eq!(
        kinds(&frames),
        ["hitl_resolved", "policy_triggered", "plan_requested", "plan_generated", "plan_updated", "hitl_request"]
    );
    scenario.server.wait_for_status(&run, "awaiting_hitl").await;

    let body = json!({"note": "wrong brief", "operator": {"id": "op-2", "displayName": "Grace"}});
    let answer = scenario.post(&format!("/api/v1/flex/runs/{run}/cancel"), body).await;
    assert_eq!(answer["status"], "cancelled");
    let frames = scenario.follow(&run, 10).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "complete"]);
    scenario.finish(&run, "operator_replan_then_cancel").await;
}

/// A transient capability failure (503) is retried once, then the node completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capability_retry() {
    let calls = Arc::new(AtomicUsize::new(0));
    let script = script(move |call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]);
        }
        if calls.fetch_add(1, Ordering::SeqCst) == 0 { Reply::error(503, "overloaded") } else { post(0.9) }
    });
    let mut scenario = Scenario::start(script, Options::default()).await;
    let frames = scenario.run(&with_policies(json!({"retry": {"maxRetries": 2, "baseDelay": 0.1}}))).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "plan_generated", "node_start", "retry", "node_complete", "complete"]
    );
    scenario.finish(&run_id(&frames), "capability_retry").await;
}

// ---------------------------------------------------------------------------------------------
// Scenario inputs
// ---------------------------------------------------------------------------------------------

/// The default envelope with `policies` set.
fn with_policies(policies: Value) -> Value {
    let mut envelope = envelope();
    envelope["policies"] = policies;
    envelope
}

/// A `run.resume` decision on `request` by a named operator, with a note.
fn decide(run_id: &str, request: &str, approved: bool, feedback: Option<&str>) -> Value {
    let mut body = decision(run_id, request, approved, feedback);
    body["operator"] = json!({"id": "op-1", "displayName": "Ada"});
    body["note"] = json!("checked");
    body
}

/// A person reviews the post: `post_copy` → `review {approved}`.
fn human_reviewer() -> Value {
    json!({
        "capabilityId": "reviewer", "version": "1.0", "displayName": "Reviewer", "summary": "A person reviews the post",
        "kind": "validation", "agentType": "human", "inputFacets": ["post_copy"], "outputFacets": ["review"],
        "instructions": "Read the post and approve it or not.",
        "outputContract": {"mode": "json_schema", "schema": {"type": "object", "required": ["approved"],
            "properties": {"approved": {"type": "boolean"}}}}
    })
}

/// The example capabilities of `config/capabilities/`, which the demo runs on.
fn demo_capabilities() -> Vec<Value> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(crate_path("config/capabilities")).unwrap().map(|entry| entry.unwrap().path()).collect();
    files.sort();
    files.iter().map(|path| read_json(path)).collect()
}

/// A path in the crate, given relative to its root.
fn crate_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Driving a run and reading its streams as text
// ---------------------------------------------------------------------------------------------

/// One SSE event as it arrived: its `id:`, `event:` and `data:` text, untouched.
#[derive(Debug, Clone)]
struct SseEvent {
    id: u64,
    event: String,
    data: String,
}

impl SseEvent {
    fn json(&self) -> Value {
        serde_json::from_str(&self.data).expect("a frame's data is JSON")
    }
}

fn kinds(events: &[SseEvent]) -> Vec<&str> {
    events.iter().map(|e| e.event.as_str()).collect()
}

fn run_id(events: &[SseEvent]) -> String {
    events[0].json()["runId"].as_str().unwrap().to_string()
}

/// The id of the last operator request among `events`.
fn request_id(events: &[SseEvent]) -> String {
    let request = events.iter().rfind(|e| e.event == "hitl_request").expect("a hitl_request frame");
    request.json()["payload"]["request"]["id"].as_str().unwrap().to_string()
}

/// A test server and every SSE event its streams delivered, in order.
struct Scenario {
    server: TestServer,
    delivered: Vec<SseEvent>,
}

impl Scenario {
    async fn start(script: flexrun::llm::standin::Script, options: Options) -> Self {
        Self { server: TestServer::start_with(script, options).await, delivered: Vec::new() }
    }

    /// Posts `envelope` to `run.stream`: the frames until the stream ends.
    async fn run(&mut self, envelope: &Value) -> Vec<SseEvent> {
        let response = self.server.post_run(envelope).await;
        self.read(response).await
    }

    /// `run.resume` with `body`: the frames until the stream ends.
    async fn resume(&mut self, body: Value) -> Vec<SseEvent> {
        let url = self.server.url("/api/v1/flex/run.resume");
        let response = self.server.http.post(url).bearer_auth(OPERATOR_KEY).json(&body).send().await.unwrap();
        self.read(response).await
    }

    /// Re-attaches to the run after frame `after`: the frames until the stream ends.
    async fn follow(&mut self, run_id: &str, after: u64) -> Vec<SseEvent> {
        let url = self.server.url(&format!("/api/v1/flex/runs/{run_id}/stream?after={after}"));
        let response = self.server.http.get(url).bearer_auth(OPERATOR_KEY).send().await.unwrap();
        self.read(response).await
    }

    /// Posts `body` to an operator endpoint that answers JSON; it must answer 200.
    async fn post(&self, path: &str, body: Value) -> Value {
        let url = self.server.url(path);
        let response = self.server.http.post(url).bearer_auth(OPERATOR_KEY).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 200, "POST {path}");
        response.json().await.unwrap()
    }

    async fn read(&mut self, response: reqwest::Response) -> Vec<SseEvent> {
        assert_eq!(response.status(), 200, "{:?}", response.text().await);
        let events = read_sse(response).await;
        self.delivered.extend(events.iter().cloned());
        events
    }

    /// Checks the run's event log against what was delivered and against the snapshot `name`.
    async fn finish(self, run_id: &str, name: &str) {
        let log = stored_frames(&self.server, run_id);
        assert_delivered_as_stored(&log, &self.delivered);
        let mut normaliser = Normaliser::default();
        let lines: Vec<String> = log.iter().map(|(_, _, text)| normaliser.normalise(text)).collect();
        assert_snapshot(name, &lines);
        self.server.stop().await;
    }
}

/// Reads an SSE response until it ends (at most 30 s).
async fn read_sse(response: reqwest::Response) -> Vec<SseEvent> {
    let mut stream = response.bytes_stream().eventsource();
    let mut events = Vec::new();
    let read = async {
        while let Some(event) = stream.next().await {
            let event = event.expect("an SSE event");
            let id = event.id.parse().expect("the SSE id is a seq");
            events.push(SseEvent { id, event: event.event, data: event.data });
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read).await.expect("the stream ends within 30 s");
    events
}

/// The run's event log: `(seq, type, frame text)` as stored, in `seq` order.
fn stored_frames(server: &TestServer, run_id: &str) -> Vec<(u64, String, String)> {
    let frames = flexrun::store::events::after(&mut server.db(), run_id, flexrun::events::Seq::ZERO, 10_000).unwrap();
    let log: Vec<_> = frames.into_iter().map(|f| (f.seq.get(), f.event_type, f.json.to_string())).collect();
    let seqs: Vec<u64> = log.iter().map(|(seq, _, _)| *seq).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>(), "the log's seqs are 1, 2, … without gaps");
    log
}

/// Every delivered SSE event is the stored frame of its `seq`, byte for byte, and every stored
/// frame was delivered.
fn assert_delivered_as_stored(log: &[(u64, String, String)], delivered: &[SseEvent]) {
    for event in delivered {
        let (_, kind, text) =
            log.get(event.id as usize - 1).unwrap_or_else(|| panic!("seq {} is not stored", event.id));
        assert_eq!(&event.event, kind, "SSE event name of seq {}", event.id);
        assert_eq!(&event.data, text, "SSE data of seq {} differs from the stored frame", event.id);
    }
    for (seq, _, _) in log {
        assert!(delivered.iter().any(|e| e.id == *seq), "stored frame {seq} reached no stream");
    }
}

// ---------------------------------------------------------------------------------------------
// Snapshot files
// ---------------------------------------------------------------------------------------------

fn snapshot_path(name: &str) -> PathBuf {
    crate_path("tests/snapshots").join(format!("{name}.jsonl"))
}

/// Writes the snapshot (`UPDATE_SNAPSHOTS=1`) or compares `lines` with it, line by line.
fn assert_snapshot(name: &str, lines: &[String]) {
    let path = snapshot_path(name);
    if std::env::var("UPDATE_SNAPSHOTS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, lines.iter().map(|line| format!("{line}\n")).collect::<String>()).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("snapshot {} cannot be read ({e}); {UPDATE_HINT}", path.display()));
    let expected: Vec<&str> = expected.lines().collect();
    if let Some(difference) = first_difference(&expected, lines) {
        panic!("frames differ from snapshot {}:\n{difference}\n{UPDATE_HINT}", path.display());
    }
}

/// Where `actual` first departs from `expected`: the line (= the frame's seq), both texts and the
/// column of the first differing byte.
fn first_difference(expected: &[&str], actual: &[String]) -> Option<String> {
    (0..expected.len().max(actual.len())).find_map(|i| {
        let (want, got) = (expected.get(i).copied(), actual.get(i).map(String::as_str));
        if want == got {
            return None;
        }
        let (want, got) = (want.unwrap_or("<no line>"), got.unwrap_or("<no line>"));
        let column = want.bytes().zip(got.bytes()).take_while(|(a, b)| a == b).count() + 1;
        Some(format!(
            "first difference at line {} (seq {}), column {column}:\n  expected: {want}\n  actual:   {got}",
            i + 1,
            i + 1
        ))
    })
}

// ---------------------------------------------------------------------------------------------
// Normalising what differs between runs
// ---------------------------------------------------------------------------------------------

/// Numeric fields whose values depend on the run, and their placeholders.
const RUN_DEPENDENT_NUMBERS: [(&str, &str); 1] = [("\"delayMs\":", "<delay-ms>")];

/// Replaces, by text, what differs between two runs of a scenario: UUIDs by `<id-N>` (numbered in
/// order of first appearance, over all lines given to the same normaliser), RFC 3339 timestamps by
/// `<time>`, and the values of [`RUN_DEPENDENT_NUMBERS`]. Everything else is kept as it is.
#[derive(Default)]
struct Normaliser {
    ids: Vec<String>,
}

impl Normaliser {
    fn normalise(&mut self, text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        while at < bytes.len() {
            if let Some(end) = uuid_end(bytes, at) {
                let number = self.id_number(&text[at..end]);
                out.push_str(&format!("<id-{number}>"));
                at = end;
            } else if let Some(end) = timestamp_end(bytes, at) {
                out.push_str("<time>");
                at = end;
            } else if let Some((key, placeholder, end)) = run_dependent_number(bytes, at) {
                out.push_str(key);
                out.push_str(placeholder);
                at = end;
            } else {
                let c = text[at..].chars().next().unwrap();
                out.push(c);
                at += c.len_utf8();
            }
        }
        out
    }

    fn id_number(&mut self, id: &str) -> usize {
        match self.ids.iter().position(|known| known == id) {
            Some(index) => index + 1,
            None => {
                self.ids.push(id.to_string());
                self.ids.len()
            }
        }
    }
}

/// The end of the characters at `at` that all pass `class`, when there are exactly `len` of them.
fn run_of(bytes: &[u8], at: usize, len: usize, class: fn(&u8) -> bool) -> Option<usize> {
    let end = at + len;
    (end <= bytes.len() && bytes[at..end].iter().all(class)).then_some(end)
}

/// The end of `literal` when `bytes` has it at `at`.
fn literal(bytes: &[u8], at: usize, literal: &[u8]) -> Option<usize> {
    bytes[at..].starts_with(literal).then_some(at + literal.len())
}

/// The end of a UUID (`8-4-4-4-12` hex digits) starting at `at`, not part of a longer word.
fn uuid_end(bytes: &[u8], at: usize) -> Option<usize> {
    if at > 0 && bytes[at - 1].is_ascii_alphanumeric() {
        return None;
    }
    let mut end = run_of(bytes, at, 8, u8::is_ascii_hexdigit)?;
    for len in [4, 4, 4, 12] {
        end = literal(bytes, end, b"-")?;
        end = run_of(bytes, end, len, u8::is_ascii_hexdigit)?;
    }
    (end == bytes.len() || !bytes[end].is_ascii_alphanumeric()).then_some(end)
}

/// The end of an RFC 3339 timestamp (`2026-11-21T10:00:00.000Z`, fraction optional, `Z` or an
/// offset) starting at `at`.
fn timestamp_end(bytes: &[u8], at: usize) -> Option<usize> {
    if at > 0 && bytes[at - 1].is_ascii_digit() {
        return None;
    }
    let mut end = at;
    for (len, separator) in [(4, b"-"), (2, b"-"), (2, b"T"), (2, b":"), (2, b":")] {
        end = run_of(bytes, end, len, u8::is_ascii_digit)?;
        end = literal(bytes, end, separator)?;
    }
    end = run_of(bytes, end, 2, u8::is_ascii_digit)?;
    if let Some(fraction) = literal(bytes, end, b".") {
        let digits = bytes[fraction..].iter().take_while(|b| b.is_ascii_digit()).count();
        end = run_of(bytes, fraction, digits.max(1), u8::is_ascii_digit)?;
    }
    if let Some(zulu) = literal(bytes, end, b"Z") {
        return Some(zulu);
    }
    end = literal(bytes, end, b"+").or_else(|| literal(bytes, end, b"-"))?;
    end = run_of(bytes, end, 2, u8::is_ascii_digit)?;
    end = literal(bytes, end, b":")?;
    run_of(bytes, end, 2, u8::is_ascii_digit)
}

/// A field of [`RUN_DEPENDENT_NUMBERS`] at `at`: its key, its placeholder and the end of its value.
fn run_dependent_number(bytes: &[u8], at: usize) -> Option<(&'static str, &'static str, usize)> {
    RUN_DEPENDENT_NUMBERS.iter().find_map(|(key, placeholder)| {
        let start = literal(bytes, at, key.as_bytes())?;
        let digits = bytes[start..].iter().take_while(|b| b.is_ascii_digit() || **b == b'.').count();
        (digits > 0).then_some((*key, *placeholder, start + digits))
    })
}

#[test]
fn the_normaliser_replaces_only_what_varies_between_runs() {
    let mut normaliser = Normaliser::default();
    let first = r#"{"runId":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","timestamp":"2026-11-21T10:00:00.123Z","correlationId":"0199A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5C","payload":{"delayMs":187,"attempt":1,"at":"2026-11-21T10:00:00+02:00"}}"#;
    assert_eq!(
        normaliser.normalise(first),
        r#"{"runId":"<id-1>","timestamp":"<time>","correlationId":"<id-2>","payload":{"delayMs":<delay-ms>,"attempt":1,"at":"<time>"}}"#
    );
    // Ids keep their numbers across lines; a new one gets the next number.
    let second = r#"{"runId":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","id":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5d"}"#;
    assert_eq!(normaliser.normalise(second), r#"{"runId":"<id-1>","id":"<id-3>"}"#);
    // Near misses, other numbers and non-ASCII text stay as they are.
    let kept = [
        r#"{"x":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5","y":"x0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}"#,
        r#"{"z":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5bc","date":"2026-11-21","local":"2026-11-21T10:00:00"}"#,
        r#"{"maxDelayMs":5,"delayMs":"soon","limitSeconds":30,"quality_score":0.62,"text":"café — ünïcode"}"#,
    ];
    for text in kept {
        assert_eq!(normaliser.normalise(text), text);
    }
}
