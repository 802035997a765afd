//! Racing operator commands: many concurrent approve / reject / replan / cancel commands against
//! paused and running runs of the real `flexrun serve` binary. Each command is applied whole or
//! refused with a documented code and nothing of it recorded; each pending request is resolved
//! exactly once; every run reaches one consistent state with a gap-free log; and the server logs
//! no ERROR for any of it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use serde_json::{Value, json};
use support::process::ServerProcess;
use support::*;

/// Runs raced in each scenario.
const RUNS: usize = 30;

/// Plans `draft` then `polish`; each capability call takes a while, so commands also land while a
/// node runs.
fn slow_two_steps() -> flexrun::llm::standin::Script {
    script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer"), ("polish", "editor")]);
        }
        post(0.9).after(Duration::from_millis(40))
    })
}

fn with_plan_approval(mut envelope: Value) -> Value {
    envelope["policies"] = json!({"approval": {"plan": "required"}});
    envelope
}

/// One operator command and what it got.
#[derive(Debug, Clone)]
struct Outcome {
    command: &'static str,
    status: u16,
    code: Option<String>,
}

/// Sends `command` to the run after `delay`; a resume's stream is read to its end.
async fn send(server: &ServerProcess, run_id: &str, request_id: &str, command: &'static str, delay: u64) -> Outcome {
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let client = &server.http;
    let (path, body) = match command {
        "approve" | "approve again" => (
            "/api/v1/flex/run.resume".to_string(),
            json!({"runId": run_id, "decision": {"requestId": request_id, "approved": true}}),
        ),
        "reject" => (
            "/api/v1/flex/run.resume".to_string(),
            json!({"runId": run_id, "decision": {"requestId": request_id, "approved": false}}),
        ),
        "replan" => (format!("/api/v1/flex/runs/{run_id}/replan"), json!({"feedback": "once more"})),
        "cancel" | "cancel again" => (format!("/api/v1/flex/runs/{run_id}/cancel"), json!({})),
        other => unreachable!("no command {other}"),
    };
    let response = client.post(server.url(&path)).json(&body).send().await.expect(command);
    let status = response.status().as_u16();
    if status == 200 {
        if path.ends_with("run.resume") {
            read_frames(response, usize::MAX).await;
        }
        return Outcome { command, status, code: None };
    }
    let body: Value = response.json().await.expect("an error answer is JSON");
    Outcome { command, status, code: body["error"]["code"].as_str().map(str::to_string) }
}

/// Whether a refusal is one the API documents for a command that lost a race (or came too late).
fn documented(outcome: &Outcome) -> bool {
    let code = outcome.code.as_deref().unwrap_or_default();
    match outcome.status {
        409 => ["run_busy", "invalid_run_state", "stale_request", "replan_in_progress"].contains(&code),
        // A replan of a run that no longer waits on an operator, or with no replan left.
        422 => outcome.command == "replan" && ["invalid_run_state", "replan_limit"].contains(&code),
        _ => false,
    }
}

/// Polls until the run neither plans nor runs (it ended, or waits on an operator).
async fn settled_status(server: &ServerProcess, run_id: &str) -> String {
    let client = &server.http;
    for _ in 0..600 {
        let run: Value =
            client.get(server.url(&format!("/api/v1/flex/runs/{run_id}"))).send().await.unwrap().json().await.unwrap();
        let status = run["run"]["status"].as_str().unwrap().to_string();
        if !["pending", "planning", "running"].contains(&status.as_str()) {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run {run_id} did not settle");
}

/// The run's stored frames: (seq, type, payload).
fn stored_frames(server: &ServerProcess, run_id: &str) -> Vec<(u64, String, Value)> {
    let frames = event_log(&server.dir, run_id);
    frames.into_iter().map(|(seq, kind, frame)| (seq, kind, frame["payload"].clone())).collect()
}

/// Checks one raced run: its log has no gap and holds exactly what the accepted commands did;
/// its row, its document and its last frame agree on its status.
async fn check_run(server: &ServerProcess, run_id: &str, request_id: Option<&str>, outcomes: &[Outcome]) {
    for outcome in outcomes {
        assert!(outcome.status == 200 || documented(outcome), "run {run_id}: {outcome:?} is not a documented answer");
    }
    let accepted = |name: &str| outcomes.iter().filter(|o| o.status == 200 && o.command.starts_with(name)).count();
    let status = settled_status(server, run_id).await;
    let frames = stored_frames(server, run_id);
    let seqs: Vec<u64> = frames.iter().map(|(seq, _, _)| *seq).collect();
    assert_eq!(seqs, (1..=frames.len() as u64).collect::<Vec<_>>(), "run {run_id}: the log has a gap");

    // Each request is resolved exactly once, by whichever command got to it first.
    if let Some(request_id) = request_id {
        let resolved: Vec<&Value> = frames
            .iter()
            .filter(|(_, kind, payload)| kind == "hitl_resolved" && payload["request"]["id"] == request_id)
            .map(|(_, _, payload)| payload)
            .collect();
        assert_eq!(
            resolved.len(),
            1,
            "run {run_id}: request {request_id} resolved {} times: {outcomes:?}",
            resolved.len()
        );
        let answered = accepted("approve") + accepted("reject");
        assert!(answered <= 1, "run {run_id}: {answered} answers accepted for one request: {outcomes:?}");
    }
    let decisions =
        frames.iter().filter(|(_, kind, p)| kind == "hitl_resolved" && p["decision"]["decision"].is_string()).count();
    assert_eq!(decisions, accepted("approve") + accepted("reject"), "run {run_id}: {outcomes:?}");
    let operator_replans = frames
        .iter()
        .filter(|(_, kind, p)| kind == "policy_triggered" && p["trigger"]["reason"] == "operator_replan")
        .count();
    assert_eq!(operator_replans, accepted("replan"), "run {run_id}: {outcomes:?}");
    assert!(accepted("cancel") <= 1, "run {run_id}: two cancels accepted: {outcomes:?}");
    if accepted("cancel") == 1 {
        assert_eq!(status, "cancelled", "run {run_id}: {outcomes:?}");
    }

    // One consistent end state: the row, the document and the last frame agree.
    let row = flexrun::store::runs::get(&mut db(server), run_id).unwrap();
    assert_eq!(row.status.as_str(), status);
    let (_, last, payload) = frames.last().unwrap();
    match status.as_str() {
        "completed" | "cancelled" | "failed" => {
            assert_eq!((last.as_str(), payload["status"].as_str()), ("complete", Some(status.as_str())), "{payload}")
        }
        "awaiting_hitl" => assert_eq!(last, "hitl_request"),
        other => panic!("run {run_id} settled as {other}: {outcomes:?}"),
    }
    // And it is where the accepted commands took it: nothing else ended it.
    let why = || format!("run {run_id} is {status}: {outcomes:?}\n{payload}");
    match status.as_str() {
        "completed" => assert_eq!(accepted("approve"), 1, "{}", why()),
        "failed" => {
            assert_eq!(payload["error"]["code"], "operator_rejected", "{}", why());
            assert_eq!(accepted("reject"), 1, "{}", why());
        }
        "cancelled" => assert_eq!(accepted("cancel"), 1, "{}", why()),
        _ => assert_eq!(accepted("replan"), 1, "{}", why()),
    }
}

fn db(server: &ServerProcess) -> flexrun::store::DbConn {
    support::database::connect(&server.dir)
}

/// A run paused on its plan approval: its id and the request's id.
async fn paused_run(server: &ServerProcess) -> (String, String) {
    let (run_id, response) = server.post_run(&with_plan_approval(envelope())).await;
    let frames = read_frames(response, usize::MAX).await;
    let request = frames.last().expect("frames");
    assert_eq!(request.kind, "hitl_request", "{:?}", kinds(&frames));
    (run_id, request.payload["request"]["id"].as_str().unwrap().to_string())
}

/// Commands and their start delays (ms) for the `i`-th run: the order shifts from run to run,
/// so each command is sometimes first.
fn schedule(commands: &[&'static str], i: usize) -> Vec<(&'static str, u64)> {
    commands.iter().enumerate().map(|(j, c)| (*c, ((i * 7 + j * 5) % 11) as u64)).collect()
}

fn tally(all: &[Outcome]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for outcome in all {
        let key = format!("{} {} {}", outcome.command, outcome.status, outcome.code.as_deref().unwrap_or(""));
        *counts.entry(key).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_commands_on_paused_and_running_runs_leave_one_consistent_run() {
    let model = flexrun::llm::standin::StandIn::start(slow_two_steps()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let mut all = Vec::new();

    // Paused runs: two approvals, a rejection, a replan and two cancels of one pending request.
    let paused = join_all((0..RUNS).map(|_| paused_run(&server))).await;
    let commands = ["approve", "approve again", "reject", "replan", "cancel", "cancel again"];
    let raced = join_all(paused.iter().enumerate().map(|(i, (run_id, request_id))| {
        let server = &server;
        async move {
            let sends = schedule(&commands, i).into_iter().map(|(c, d)| send(server, run_id, request_id, c, d));
            join_all(sends).await
        }
    }))
    .await;
    for ((run_id, request_id), outcomes) in paused.iter().zip(&raced) {
        check_run(&server, run_id, Some(request_id), outcomes).await;
        all.extend(outcomes.iter().cloned());
    }

    // Running runs: approved, then cancels, a replan and a stale approval while their nodes run.
    let approved = join_all((0..RUNS).map(|_| paused_run(&server))).await;
    let commands = ["cancel", "cancel again", "replan", "approve again"];
    let raced = join_all(approved.iter().enumerate().map(|(i, (run_id, request_id))| {
        let server = &server;
        async move {
            let approve = send(server, run_id, request_id, "approve", 0);
            let sends = schedule(&commands, i).into_iter().map(|(c, d)| send(server, run_id, request_id, c, d + 20));
            let (first, mut rest) = tokio::join!(approve, join_all(sends));
            rest.insert(0, first);
            rest
        }
    }))
    .await;
    for ((run_id, request_id), outcomes) in approved.iter().zip(&raced) {
        check_run(&server, run_id, Some(request_id), outcomes).await;
        all.extend(outcomes.iter().cloned());
    }

    let counts = tally(&all);
    eprintln!("outcomes of {} raced commands: {counts:#?}", all.len());
    assert!(counts.keys().any(|k| k.contains("run_busy") || k.contains("invalid_run_state")), "no race was lost");
    let log = server.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "expected races logged errors:\n{}", errors.join("\n"));
}
