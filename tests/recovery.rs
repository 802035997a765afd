//! Crash recovery: the real `flexrun serve` process is killed with SIGKILL while the model holds a
//! response (mid-plan, mid-node, mid-replan), then started again on the same SQLite file. The run
//! must finish without repeating committed work, with a gap-free log that a re-attaching client
//! receives exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use diesel::RunQueryDsl;
use flexrun::events::ReceivedFrame;
use flexrun::llm::standin::{ChatCall, StandIn};
use serde_json::{Value, json};
use support::process::ServerProcess;
use support::*;

/// What a model call is answered with.
type Answer = fn(&ChatCall) -> Reply;

/// Plans draft (writer) → polish (editor); both score 0.9.
fn two_steps(call: &ChatCall) -> Reply {
    if call.is_planner() { plan(&[("draft", "writer"), ("polish", "editor")]) } else { post(0.9) }
}

/// The first plan's draft scores 0.5; the repair plan adds a polish (editor) scoring 0.9.
fn needs_repair(call: &ChatCall) -> Reply {
    match (call.is_planner(), call.user.contains("### GOAL CONDITION REPAIR")) {
        (true, true) => plan(&[("draft", "writer"), ("polish", "editor")]),
        (true, false) => plan(&[("draft", "writer")]),
        _ if call.capability_id() == Some("writer") => post(0.5),
        _ => post(0.9),
    }
}

/// A stand-in model answering with `answer`, except that calls matching `held` get no answer
/// (for ten minutes) while the returned switch is on.
fn holding_model(answer: Answer, held: fn(&ChatCall) -> bool) -> (StandIn, Arc<AtomicBool>) {
    let hold = Arc::new(AtomicBool::new(true));
    let switch = hold.clone();
    let model = StandIn::start(script(move |call| {
        let reply = answer(call);
        if switch.load(Ordering::SeqCst) && held(call) { reply.after(Duration::from_secs(600)) } else { reply }
    }))
    .unwrap();
    (model, hold)
}

/// What a test saw across a crash.
struct Recovered {
    run_id: String,
    /// Frames the first client read before the kill.
    before: Vec<ReceivedFrame>,
    /// Frames a client re-attaching with `Last-Event-ID` read after the restart.
    after: Vec<ReceivedFrame>,
    calls: Vec<ChatCall>,
    server: ServerProcess,
    _dir: tempfile::TempDir,
}

impl Recovered {
    fn calls_of(&self, capability: &str) -> usize {
        self.calls.iter().filter(|c| c.capability_id() == Some(capability)).count()
    }

    fn planner_calls(&self) -> Vec<&ChatCall> {
        self.calls.iter().filter(|c| c.is_planner()).collect()
    }

    fn event_log(&self) -> Vec<(u64, String, Value)> {
        event_log(&self.server.dir, &self.run_id)
    }

    /// The checks every recovery must pass: the run completed; the log is gap-free; the client
    /// that re-attached got exactly what it had not seen; one `log` frame reports the resume; no
    /// panic in the server's log.
    fn assert_recovered(&self) {
        let log = self.event_log();
        let seen: Vec<(u64, &str)> = self.before.iter().chain(&self.after).map(|f| (f.seq, f.kind.as_str())).collect();
        let logged: Vec<(u64, &str)> = log.iter().map(|(seq, kind, _)| (*seq, kind.as_str())).collect();
        assert_eq!(seen, logged, "the frames before the kill + after re-attaching = the whole log");
        assert_eq!(logged.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), (1..=log.len() as u64).collect::<Vec<_>>());
        let resumed: Vec<&ReceivedFrame> = self.after.iter().filter(|f| f.kind == "log").collect();
        assert_eq!(resumed.len(), 1, "{:?}", kinds(&self.after));
        assert!(resumed[0].message.as_deref().unwrap().starts_with("Resumed after a restart"));
        let complete = self.after.last().unwrap();
        assert_eq!((complete.kind.as_str(), &complete.payload["status"]), ("complete", &json!("completed")));
        assert!(!self.server.log().contains("panicked"), "{}", self.server.log());
    }
}

/// Starts a run on a `flexrun serve` process, reads `frames_before_kill` frames, waits until the
/// model holds a call, kills the process, lets the model answer, restarts the process and
/// re-attaches to the run where the first client stopped.
async fn crash_and_recover(answer: Answer, held: fn(&ChatCall) -> bool, frames_before_kill: usize) -> Recovered {
    crash_and_recover_run(&envelope(), answer, held, frames_before_kill).await
}

/// [`crash_and_recover`] with a run of `envelope`.
async fn crash_and_recover_run(
    envelope: &Value,
    answer: Answer,
    held: fn(&ChatCall) -> bool,
    frames_before_kill: usize,
) -> Recovered {
    let (model, hold) = holding_model(answer, held);
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let (run_id, response) = server.post_run(envelope).await;
    let before = read_frames(response, frames_before_kill).await;
    for _ in 0..200 {
        if model.calls().iter().any(held) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(model.calls().iter().any(held), "the call to hold never reached the model");

    server.kill();
    hold.store(false, Ordering::SeqCst);
    server.restart().await;

    let after = server.reattach(&run_id, before.last().unwrap().seq).await;
    Recovered { run_id, before, after, calls: model.calls(), server, _dir: dir }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_node_the_run_finishes_without_repeating_committed_nodes() {
    // start, plan_requested, plan_generated, node_start draft, node_complete draft, node_start polish
    let run = crash_and_recover(two_steps, |c| c.capability_id() == Some("editor"), 6).await;
    run.assert_recovered();
    assert_eq!(kinds(&run.after), ["log", "node_start", "node_complete", "complete"]);
    assert_eq!(run.after[0].payload["details"]["interruptedNodes"], json!(["polish"]));
    assert_eq!(run.after[1].node_id.as_deref(), Some("polish"));
    assert_eq!(run.calls_of("writer"), 1, "the committed draft is not run again");
    assert_eq!(run.calls_of("editor"), 2, "the interrupted polish is");
    assert_eq!(run.planner_calls().len(), 1);
    // Usage is as durable as the frames: the committed calls counted once across the restart, the
    // call cut off by the kill not at all (its outcome was never committed).
    let log = run.event_log();
    let (frames, complete) = log.split_at(log.len() - 1);
    let sum =
        |key: &str| frames.iter().filter_map(|(_, _, frame)| frame["payload"]["usage"][key].as_u64()).sum::<u64>();
    let total = &complete[0].2["payload"]["usage"];
    assert_eq!(total["calls"], 3, "the plan, the draft and the polish asked again: {total}");
    assert_eq!(
        (total["calls"].as_u64(), total["inputTokens"].as_u64()),
        (Some(sum("calls")), Some(sum("inputTokens")))
    );
    let mut conn = support::database::connect(&run.server.dir);
    let stored = flexrun::store::runs::get(&mut conn, &run.run_id).unwrap();
    let listed: Value = serde_json::from_str(stored.usage.as_deref().unwrap()).unwrap();
    assert_eq!((&listed["calls"], &listed["inputTokens"]), (&total["calls"], &total["inputTokens"]));
}

/// A budget checked after a restart counts what the log recorded: the call the kill cut off is
/// not counted, so the step asked again fits in a budget of exactly the calls recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_the_budget_counts_the_recorded_calls_only() {
    let mut budgeted = envelope();
    budgeted["policies"] = json!({"budget": {"maxModelCalls": 3, "onExceeded": "fail"}});
    let run = crash_and_recover_run(&budgeted, two_steps, |c| c.capability_id() == Some("editor"), 6).await;
    run.assert_recovered();
    assert!(!kinds(&run.after).contains(&"budget_exceeded"), "{:?}", kinds(&run.after));
    assert_eq!(run.calls_of("editor"), 2, "one cut off by the kill, one after the restart");
    assert_eq!(run.after.last().unwrap().payload["usage"]["calls"], 3, "the three recorded calls");
    assert_eq!(run.event_log()[0].2["payload"]["budget"]["maxModelCalls"], 3, "the budget is in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_plan_the_run_asks_the_planner_again() {
    let run = crash_and_recover(two_steps, ChatCall::is_planner, 2).await;
    run.assert_recovered();
    assert_eq!(
        kinds(&run.after),
        [
            "log",
            "plan_requested",
            "plan_generated",
            "node_start",
            "node_complete",
            "node_start",
            "node_complete",
            "complete"
        ]
    );
    assert_eq!(run.after[1].payload["attempt"], 2, "attempts count on across the restart");
    assert_eq!(run.planner_calls().len(), 2);
    assert_eq!((run.calls_of("writer"), run.calls_of("editor")), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_repair_the_replan_keeps_its_reason_and_the_completed_draft() {
    let repair = |c: &ChatCall| c.is_planner() && c.user.contains("### GOAL CONDITION REPAIR");
    // … node_complete draft, goal_condition_failed, plan_requested (replan)
    let run = crash_and_recover(needs_repair, repair, 7).await;
    run.assert_recovered();
    assert_eq!(
        kinds(&run.after),
        ["log", "plan_requested", "plan_generated", "plan_updated", "node_start", "node_complete", "complete"]
    );
    assert_eq!(run.after[1].payload["phase"], "replan");
    assert_eq!(run.after[1].payload["replan"]["reason"], "goal_condition_failed");
    let planner = run.planner_calls();
    assert_eq!(planner.len(), 3, "first plan, the held repair, the repair asked again");
    assert!(planner[2].user.contains("### GOAL CONDITION REPAIR") && planner[2].user.contains("quality_score"));
    assert_eq!(run.calls_of("writer"), 1, "the draft carries into the repair plan");
    assert_eq!(run.calls_of("editor"), 1);
    let mut conn = support::database::connect(&run.server.dir);
    let stored = flexrun::store::runs::get(&mut conn, &run.run_id).unwrap();
    assert_eq!((stored.goal_condition_replans, stored.replans, stored.plan_version), (1, 1, 2));
}

/// Rolls a completed run back to the state its last commit found: every node complete, the goal
/// evaluation (its `complete` frame, `run_outputs` row and status change) not yet committed.
fn rewind_to_last_node_completion(db: &std::path::Path, run_id: &str) {
    let mut conn = support::database::connect(db);
    let statements = [
        format!(
            "DELETE FROM run_events WHERE run_id = '{run_id}' AND seq > (SELECT MAX(seq) FROM run_events \
             WHERE run_id = '{run_id}' AND event_type = 'node_complete')"
        ),
        format!("DELETE FROM run_outputs WHERE run_id = '{run_id}'"),
        format!("UPDATE runs SET status = 'running', result = NULL WHERE run_id = '{run_id}'"),
    ];
    for statement in statements {
        diesel::sql_query(statement).execute(&mut conn).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_nodes_all_completed_finishes_with_no_model_call() {
    let model = StandIn::start(script(two_steps)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path();
    let mut server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let (run_id, response) = server.post_run(&envelope()).await;
    let first = read_frames(response, usize::MAX).await;
    server.kill();
    rewind_to_last_node_completion(db, &run_id);
    let calls = model.calls().len();
    let last = event_log(db, &run_id).len();
    assert_eq!(first[last - 1].kind, "node_complete");

    server.restart().await;
    let after = server.reattach(&run_id, last as u64).await;
    assert_eq!(kinds(&after), ["log", "complete"]);
    assert_eq!(after[1].seq, last as u64 + 2);
    assert_eq!(after[1].payload["status"], "completed");
    assert_eq!(after[1].payload["output"], first.last().unwrap().payload["output"]);
    assert_eq!(model.calls().len(), calls, "goal conditions are evaluated again, nothing else");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_cannot_be_resumed_is_failed_not_left_running() {
    let (model, _hold) = holding_model(two_steps, |c| c.capability_id() == Some("writer"));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path();
    let mut server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let (run_id, response) = server.post_run(&envelope()).await;
    let before = read_frames(response, 4).await;
    server.kill();
    // As an envelope stored by an incompatible version would be.
    let mut conn = support::database::connect(db);
    diesel::sql_query(format!("UPDATE runs SET envelope = '{{\"objective\": 7}}' WHERE run_id = '{run_id}'"))
        .execute(&mut conn)
        .unwrap();

    server.restart().await;
    let after = server.reattach(&run_id, before.len() as u64).await;
    // The step the kill interrupted ends with the run: no node of a failed run is left running.
    assert_eq!(kinds(&after), ["node_error", "complete"]);
    assert_eq!(
        (after[0].node_id.as_deref(), &after[0].payload["error"]["code"]),
        (Some("draft"), &json!("resume_failed"))
    );
    let error = &after[1].payload["error"];
    assert_eq!(error["code"], "resume_failed");
    assert!(error["message"].as_str().unwrap().contains("/objective"), "{error}");
    assert_eq!(flexrun::store::runs::get(&mut conn, &run_id).unwrap().status.as_str(), "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flexrun_run_follows_its_run_across_a_server_restart() {
    let (model, hold) = holding_model(two_steps, |c| c.capability_id() == Some("editor"));
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let envelope_file = dir.path().join("envelope.json");
    std::fs::write(&envelope_file, envelope().to_string()).unwrap();
    let client = std::process::Command::new(env!("CARGO_BIN_EXE_flexrun"))
        .args(["run", envelope_file.to_str().unwrap(), "--json", "--server", &server.base])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..400 {
        if model.calls().iter().any(|c| c.capability_id() == Some("editor")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    server.kill();
    hold.store(false, Ordering::SeqCst);
    server.restart().await;

    let output = tokio::task::spawn_blocking(move || client.wait_with_output().unwrap()).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "flexrun run failed: {stderr}");
    let frames: Vec<Value> =
        String::from_utf8(output.stdout).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let run_id = frames[0]["runId"].as_str().unwrap();
    let printed: Vec<(u64, &str)> =
        frames.iter().map(|f| (f["seq"].as_u64().unwrap(), f["type"].as_str().unwrap())).collect();
    let log = event_log(dir.path(), run_id);
    let logged: Vec<(u64, &str)> = log.iter().map(|(seq, kind, _)| (*seq, kind.as_str())).collect();
    assert_eq!(printed, logged, "every frame exactly once, across the restart");
    assert_eq!(frames.last().unwrap()["payload"]["status"], "completed");
    assert_eq!(model.calls().iter().filter(|c| c.capability_id() == Some("writer")).count(), 1);
}

/// Runs the `flexrun` binary against `server`; its exit status and stdout.
async fn flexrun_cli(server: &ServerProcess, args: &[&str]) -> (bool, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_flexrun"));
    command.args(args).args(["--server", &server.base]);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    (output.status.success(), String::from_utf8(output.stdout).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_survives_a_crash_and_is_approved_from_the_command_line() {
    let model = StandIn::start(flexrun::llm::standin::script(two_steps)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let mut envelope = envelope();
    envelope["policies"] = json!({"approval": {"plan": "required"}});
    let (run_id, response) = server.post_run(&envelope).await;
    assert_eq!(kinds(&read_frames(response, usize::MAX).await).last(), Some(&"hitl_request"));
    server.kill();
    server.restart().await;

    // Still waiting after the restart: nothing was resumed, nothing ran.
    let (ok, listed) = flexrun_cli(&server, &["runs", "list", "--status", "awaiting_hitl"]).await;
    assert!(ok && listed.contains(&run_id), "{listed}");
    let (ok, shown) = flexrun_cli(&server, &["runs", "show", &run_id]).await;
    assert!(ok && shown.contains("approval plan v1: pending"), "{shown}");
    assert_eq!(model.calls().iter().filter(|c| !c.is_planner()).count(), 0);

    let (ok, printed) = flexrun_cli(&server, &["resume", &run_id, "--approve", "--operator", "op-7", "--json"]).await;
    assert!(ok, "{printed}");
    let frames: Vec<Value> = printed.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let printed: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(printed, ["hitl_resolved", "node_start", "node_complete", "node_start", "node_complete", "complete"]);
    assert_eq!(frames[0]["payload"]["decision"]["operator"]["id"], "op-7");
    let log = event_log(dir.path(), &run_id);
    assert_eq!(log.iter().map(|(seq, ..)| *seq).collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>());

    let (ok, _) = flexrun_cli(&server, &["cancel", &run_id]).await;
    assert!(!ok, "cancelling a completed run fails");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_survives_a_crash_and_is_answered_from_the_command_line() {
    // The writer asks which market to write for, until it is told.
    let model = StandIn::start(flexrun::llm::standin::script(|call| match call.capability_id() {
        Some("writer") if !call.user.contains("### CLARIFICATIONS") => {
            Reply::json(json!({"signal": "CLARIFY", "question": "Which market?"}))
        }
        _ => two_steps(call),
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let (run_id, response) = server.post_run(&envelope()).await;
    assert_eq!(kinds(&read_frames(response, usize::MAX).await).last(), Some(&"log"));
    server.kill();
    server.restart().await;

    let (ok, shown) = flexrun_cli(&server, &["runs", "show", &run_id]).await;
    assert!(ok && shown.contains("clarify node v1: pending\n    Which market?"), "{shown}");
    let (ok, printed) = flexrun_cli(&server, &["resume", &run_id, "--answer", "EU only", "--json"]).await;
    assert!(ok, "{printed}");
    let frames: Vec<Value> = printed.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let printed: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(printed, ["hitl_resolved", "node_start", "node_complete", "node_start", "node_complete", "complete"]);
    assert_eq!(frames[0]["payload"]["decision"]["answer"], "EU only");
    let writer: Vec<ChatCall> = model.calls().into_iter().filter(|c| c.capability_id() == Some("writer")).collect();
    assert_eq!(writer.len(), 2, "asked once, then ran once more with the answer");
    assert!(writer[1].user.contains("Answer: EU only"));
}

/// Makes every commit of a `node_complete` frame fail in the test database of `dir`, as a full
/// disk or a database error would, until [`let_nodes_complete`].
fn refuse_node_completions(dir: &std::path::Path) {
    let sql: &[&str] = if support::database::is_postgres() {
        &[
            "CREATE FUNCTION refuse_node_complete() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN IF NEW.event_type = 'node_complete' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$",
            "CREATE TRIGGER refuse_node_complete BEFORE INSERT ON run_events \
             FOR EACH ROW EXECUTE FUNCTION refuse_node_complete()",
        ]
    } else {
        &["CREATE TRIGGER refuse_node_complete BEFORE INSERT ON run_events \
           WHEN NEW.event_type = 'node_complete' BEGIN SELECT RAISE(ABORT, 'refused'); END"]
    };
    let mut conn = support::database::connect(dir);
    for statement in sql {
        diesel::sql_query(*statement).execute(&mut conn).unwrap();
    }
}

/// A run (one step, `draft`) whose coordinator stopped on a database error: the database refuses
/// its step's completion ([`refuse_node_completions`]). The model, the server's directory, the
/// server and the run.
async fn stopped_by_a_database_error() -> (StandIn, tempfile::TempDir, ServerProcess, String) {
    let (model, dir, server, run_id, _stream) = stopped_by_a_database_error_streaming().await;
    (model, dir, server, run_id)
}

/// [`stopped_by_a_database_error`], with the run's `run.stream` response still open.
async fn stopped_by_a_database_error_streaming()
-> (StandIn, tempfile::TempDir, ServerProcess, String, reqwest::Response) {
    let model = StandIn::start(script(|call| if call.is_planner() { plan(&[("draft", "writer")]) } else { post(0.9) }))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let env = [("FLEXRUN_LEASE_SECONDS", "2")];
    let server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &env).await;
    refuse_node_completions(dir.path());
    let (run_id, response) = server.post_run(&envelope()).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !server.log().contains("run coordinator stopped on a database error") {
        assert!(std::time::Instant::now() < deadline, "{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (model, dir, server, run_id, response)
}

/// A client streaming a run whose coordinator stopped on a database error is not told the run
/// ended: its stream stays open while the run is still active, and goes on to `complete` once
/// the run is driven again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_outlives_a_coordinator_that_stopped_with_its_run_active() {
    let (_model, dir, _server, _run_id, stream) = stopped_by_a_database_error_streaming().await;
    allow_node_completions(dir.path());
    let frames = read_frames_within(stream, 1000, Duration::from_secs(30)).await;
    let last = frames.last().expect("frames");
    assert_eq!(
        (last.kind.as_str(), &last.payload["status"]),
        ("complete", &json!("completed")),
        "{:?}",
        kinds(&frames)
    );
}

/// A run whose coordinator stopped on a database error (its step's completion could not be
/// committed) is left `running` with that step started; an operator's cancel ends it, and ends
/// the step as a cancel of a running run does (`node_error {code: "cancelled"}`): no node of an
/// ended run is left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_by_a_database_error_is_cancelled_with_its_step() {
    let (_model, dir, server, run_id) = stopped_by_a_database_error().await;
    let cancel = server.http.post(server.url(&format!("/api/v1/flex/runs/{run_id}/cancel"))).json(&json!({}));
    let cancelled = cancel.send().await.unwrap();
    assert_eq!(cancelled.status(), 200, "{}", cancelled.text().await.unwrap());

    let log = event_log(dir.path(), &run_id);
    let ending: Vec<(&str, &Value)> =
        log.iter().rev().take(2).rev().map(|(_, kind, frame)| (kind.as_str(), frame)).collect();
    assert_eq!(
        ending.iter().map(|(kind, _)| *kind).collect::<Vec<_>>(),
        ["node_error", "complete"],
        "{:?}",
        log.iter().map(|(_, kind, _)| kind).collect::<Vec<_>>()
    );
    assert_eq!(ending[0].1["nodeId"], "draft");
    assert_eq!(ending[0].1["payload"]["error"]["code"], "cancelled");
    assert_eq!(ending[1].1["payload"]["status"], "cancelled");
    let run: Value =
        server.http.get(server.url(&format!("/api/v1/flex/runs/{run_id}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(run["nodes"][0]["status"], "cancelled", "{}", run["nodes"]);
}

/// Drops the trigger of [`refuse_node_completions`]: the database takes every write again.
fn allow_node_completions(dir: &std::path::Path) {
    let sql = if support::database::is_postgres() {
        "DROP TRIGGER refuse_node_complete ON run_events"
    } else {
        "DROP TRIGGER refuse_node_complete"
    };
    diesel::sql_query(sql).execute(&mut support::database::connect(dir)).unwrap();
}

/// A run whose coordinator stopped on a database error goes on by itself once the database takes
/// its writes again — no restart, no operator: it is picked up from its committed log, the step
/// whose completion was lost runs again, and completes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_by_a_database_error_goes_on_once_writes_work_again() {
    let (model, dir, server, run_id) = stopped_by_a_database_error().await;
    allow_node_completions(dir.path());

    let run_url = server.url(&format!("/api/v1/flex/runs/{run_id}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let run: Value = server.http.get(&run_url).send().await.unwrap().json().await.unwrap();
        if run["run"]["status"] == "completed" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the run was left {}:\n{}", run["run"]["status"], server.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = event_log(dir.path(), &run_id);
    let kinds: Vec<&str> = log.iter().map(|(_, kind, _)| kind.as_str()).collect();
    assert_eq!(kinds.iter().filter(|kind| **kind == "node_complete").count(), 1, "{kinds:?}");
    assert!(kinds.contains(&"log"), "the pick-up is in the log: {kinds:?}");
    assert_eq!(kinds.last(), Some(&"complete"));
    let writer = model.calls().iter().filter(|c| c.capability_id() == Some("writer")).count();
    assert!(writer >= 2, "the draft whose completion was lost ran again ({writer} calls)");
}

/// A run in flight each time the server dies is failed at the third start after a crash
/// (`crash_limit_reached`) with the step it had in flight, not resumed forever; a clean stop
/// (SIGTERM) counts no crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_flight_at_every_crash_is_failed_at_the_third() {
    let model = StandIn::start(script(|call| match (call.is_planner(), call.capability_id()) {
        (true, _) => plan(&[("draft", "writer"), ("polish", "editor")]),
        (false, Some("editor")) => post(0.9).after(Duration::from_secs(600)),
        _ => post(0.9),
    }))
    .unwrap();
    let editor = || model.calls().iter().filter(|c| c.capability_id() == Some("editor")).count();
    let dir = tempfile::tempdir().unwrap();
    let env = [("FLEXRUN_DRAIN_SECONDS", "1")];
    let mut server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &env).await;
    let (run_id, response) = server.post_run(&envelope()).await;
    drop(response);
    let held = |calls: usize| async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while editor() < calls {
            assert!(std::time::Instant::now() < deadline, "the polish was not asked for a {calls}th time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    held(1).await;
    server.signal("TERM");
    assert!(server.exited(Duration::from_secs(30)).await.success());
    server.restart().await;
    for crash in 1..=3 {
        held(1 + crash).await;
        server.kill();
        server.restart().await;
    }
    // The last start fails it as it recovers, which it does while already serving.
    let run_url = server.url(&format!("/api/v1/flex/runs/{run_id}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let run = loop {
        let run: Value = server.http.get(&run_url).send().await.unwrap().json().await.unwrap();
        if run["run"]["status"] != "running" || std::time::Instant::now() > deadline {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (&run["run"]["status"], &run["run"]["error"]["code"]),
        (&json!("failed"), &json!("crash_limit_reached")),
        "{}",
        run["run"]
    );
    let nodes: Vec<(&Value, &Value)> =
        run["nodes"].as_array().unwrap().iter().map(|n| (&n["nodeId"], &n["status"])).collect();
    assert_eq!(nodes, [(&json!("draft"), &json!("completed")), (&json!("polish"), &json!("failed"))]);
    let log = event_log(dir.path(), &run_id);
    let ending: Vec<&str> = log.iter().rev().take(2).rev().map(|(_, kind, _)| kind.as_str()).collect();
    assert_eq!(ending, ["node_error", "complete"]);
    assert_eq!(editor(), 4, "asked before the clean stop and once per start after; not after the third crash");
}
