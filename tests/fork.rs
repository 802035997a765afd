//! Forks: a new run from a point of another, reusing what was done before it — counted at the
//! stand-in model: no planner call for the installed plan, no capability call for a reused node.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use serde_json::{Value, json};
use support::*;

/// A repaired run: v1 drafts (0.5, the goal fails), v2 keeps the draft and polishes (0.9).
async fn repaired() -> (TestServer, String, Vec<ReceivedFrame>) {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let frames = server.run(&envelope()).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
    let run_id = frames[0].run_id.clone();
    (server, run_id, frames)
}

type ReceivedFrame = flexrun::events::ReceivedFrame;

async fn fork(server: &TestServer, run_id: &str, body: &Value) -> (u16, Vec<ReceivedFrame>, Value) {
    let url = server.url(&format!("/api/v1/flex/runs/{run_id}/fork"));
    let response = server.http.post(url).bearer_auth(OPERATOR_KEY).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    if status == 200 {
        return (status, read_frames(response, usize::MAX).await, Value::Null);
    }
    (status, Vec::new(), response.json().await.unwrap())
}

fn runs(server: &TestServer) -> i64 {
    server.count("SELECT COUNT(*) AS n FROM runs")
}

#[tokio::test]
async fn a_fork_from_version_2_reuses_the_kept_draft_and_runs_only_the_polish() {
    let (server, parent, parent_frames) = repaired().await;
    let draft_seq =
        parent_frames.iter().find(|f| f.kind == "node_complete" && f.node_id.as_deref() == Some("draft")).unwrap().seq;
    let (planner, writer, editor) =
        (server.planner_calls().len(), server.capability_calls("writer"), server.capability_calls("editor"));

    let (status, frames, _) = fork(&server, &parent, &json!({"fromVersion": 2})).await;
    assert_eq!(status, 200);
    let start = frame_of(&frames, "start");
    assert_eq!(start.payload["forkedFrom"], json!({"runId": parent, "version": 2}));
    let generated = frame_of(&frames, "plan_generated");
    assert_eq!(generated.payload["plan"]["version"], 1);
    assert_eq!(generated.payload["plan"]["metadata"]["phase"], "fork");
    let reused = frame_of(&frames, "node_complete");
    assert_eq!(reused.node_id.as_deref(), Some("draft"));
    assert_eq!(reused.payload["reusedFrom"], json!({"runId": parent, "nodeId": "draft", "seq": draft_seq}));
    assert!(reused.payload.get("usage").is_none(), "a reused step's usage is not counted again");
    let started: Vec<&str> =
        frames.iter().filter(|f| f.kind == "node_start").filter_map(|f| f.node_id.as_deref()).collect();
    assert_eq!(started, ["polish"]);
    assert!(!frames.iter().any(|f| f.kind == "plan_requested"), "no planner round: {:?}", kinds(&frames));
    let complete = frame_of(&frames, "complete");
    assert_eq!(complete.payload["status"], "completed", "{:?}", kinds(&frames));
    assert_eq!(server.planner_calls().len(), planner, "no planner call");
    assert_eq!(server.capability_calls("writer"), writer, "the draft was reused");
    assert_eq!(server.capability_calls("editor"), editor + 1, "the polish ran again");

    let child = frames[0].run_id.clone();
    let document = server.get_json(&format!("/api/v1/flex/runs/{child}")).await;
    assert_eq!(document["run"]["parentRunId"], json!(parent));
    assert_eq!(document["run"]["forkedFrom"], json!({"runId": parent, "version": 2}));
    let parent_document = server.get_json(&format!("/api/v1/flex/runs/{parent}")).await;
    assert_eq!(parent_document["run"]["forks"], json!([child]));
}

#[tokio::test]
async fn a_replaced_output_reaches_the_steps_that_run_again_and_a_bad_one_creates_nothing() {
    let (server, parent, _) = repaired().await;
    let editor = server.capability_calls("editor");
    let mine = json!({"text": "a draft written by hand 4711", "quality_score": 0.7});

    let (status, frames, _) = fork(&server, &parent, &json!({"outputs": {"draft": mine}})).await;
    assert_eq!(status, 200);
    let reused = frame_of(&frames, "node_complete");
    assert_eq!(
        (reused.payload["output"].clone(), reused.payload["reusedFrom"]["replaced"].clone()),
        (mine, json!(true))
    );
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));
    assert_eq!(server.capability_calls("editor"), editor + 1, "polish follows the replaced draft");
    let polish = server.llm_calls().into_iter().rev().find(|c| c.capability_id() == Some("editor")).unwrap();
    assert!(polish.user.contains("a draft written by hand 4711"), "the new value reached the polish");

    let before = runs(&server);
    let bad = json!({"outputs": {"draft": {"text": 7}}});
    let (status, _, body) = fork(&server, &parent, &bad).await;
    assert_eq!(status, 400, "{body}");
    let pointers: Vec<&str> =
        body["error"]["details"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap()).collect();
    assert!(pointers.contains(&"/outputs/draft/text") || pointers.contains(&"/outputs/draft"), "{body}");
    for (request, pointer) in [
        (json!({"fromVersion": 3}), "/fromVersion"),
        // Written as a float, the version is still read (it was taken as no version: the newest).
        (json!({"fromVersion": 3.0}), "/fromVersion"),
        (json!({"fromNode": "nope"}), "/fromNode"),
        (json!({"outputs": {"nope": {}}}), "/outputs/nope"),
        (json!({"envelope": {"objective": ""}}), "/envelope"),
        (json!({"fromVersion": "two"}), "/fromVersion"),
        (json!({"surprise": 1}), ""),
    ] {
        let (status, _, body) = fork(&server, &parent, &request).await;
        assert_eq!(status, 400, "{request}: {body}");
        let paths = body["error"]["details"].to_string();
        assert!(paths.contains(pointer), "{request}: {body}");
    }
    assert_eq!(runs(&server), before, "nothing was created");
}

#[tokio::test]
async fn a_fork_whose_changed_goal_now_fails_is_repaired_like_any_run() {
    let (server, parent, _) = repaired().await;
    let planner = server.planner_calls().len();
    let mut stricter = envelope();
    stricter["goal_condition"][0]["condition"] = json!({"jsonLogic": {">=": [{"var": "quality_score"}, 0.95]}});
    stricter["policies"] = json!({"replan": {"maxGoalConditionReplans": 1}});

    let (status, frames, _) = fork(&server, &parent, &json!({"envelope": stricter})).await;
    assert_eq!(status, 200);
    assert!(frames.iter().any(|f| f.kind == "goal_condition_failed"), "{:?}", kinds(&frames));
    let replanned = frames.iter().find(|f| f.kind == "plan_requested").expect("a repair replan on the fork");
    assert_eq!(replanned.payload["replan"]["reason"], "goal_condition_failed");
    assert!(server.planner_calls().len() > planner, "the fork asked the planner for a repair");
    let complete = frame_of(&frames, "complete");
    assert_eq!(complete.payload["error"]["code"], "goal_condition_replan_limit", "{:?}", kinds(&frames));
}

#[tokio::test]
async fn a_caller_forks_its_own_runs_only() {
    let options = Options {
        env: vec![
            ("FLEXRUN_API_KEYS", "alice:alice-secret,bob:bob-secret".to_string()),
            ("FLEXRUN_OPERATOR_KEYS", format!("ops:{OPERATOR_KEY}")),
        ],
        ..Options::default()
    };
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), options).await;
    let response = server
        .http
        .post(server.url("/api/v1/flex/run.stream"))
        .bearer_auth("alice-secret")
        .json(&envelope())
        .send()
        .await
        .unwrap();
    let frames = read_frames(response, usize::MAX).await;
    let run_id = frames[0].run_id.clone();
    let url = server.url(&format!("/api/v1/flex/runs/{run_id}/fork"));
    let bob = server.http.post(&url).bearer_auth("bob-secret").json(&json!({})).send().await.unwrap();
    assert_eq!(bob.status().as_u16(), 404, "bob cannot see alice's run");
    let alice = server.http.post(&url).bearer_auth("alice-secret").json(&json!({})).send().await.unwrap();
    assert_eq!(alice.status().as_u16(), 200);
    let frames = read_frames(alice, usize::MAX).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
    let fork_id = frames[0].run_id.clone();
    let listed = server
        .http
        .get(server.url(&format!("/api/v1/flex/runs/{fork_id}")))
        .bearer_auth("alice-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status().as_u16(), 200, "alice owns her fork");
}

/// flexrun killed with SIGKILL while a fork's first step to run is in flight: after the restart
/// the fork finishes; the reused draft is never called; the planner is never asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_killed_mid_step_resumes_without_running_reused_work() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    let hold = Arc::new(AtomicBool::new(false));
    let holding = hold.clone();
    let model = flexrun::llm::standin::StandIn::start(script(move |call| {
        let reply = match (call.is_planner(), call.user.contains("### GOAL CONDITION REPAIR")) {
            (true, true) => plan(&[("draft", "writer"), ("polish", "editor")]),
            (true, false) => plan(&[("draft", "writer")]),
            _ if call.capability_id() == Some("writer") => post(0.5),
            _ => post(0.9),
        };
        let held = holding.load(Ordering::SeqCst) && call.capability_id() == Some("editor");
        if held { reply.after(Duration::from_secs(600)) } else { reply }
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut server = process::ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let (parent, response) = server.post_run(&envelope()).await;
    let frames = read_frames(response, usize::MAX).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
    let (writer, planner) = (
        model.calls().iter().filter(|c| c.capability_id() == Some("writer")).count(),
        model.calls().iter().filter(|c| c.is_planner()).count(),
    );

    hold.store(true, Ordering::SeqCst);
    let url = server.url(&format!("/api/v1/flex/runs/{parent}/fork"));
    let response = server.http.post(&url).json(&json!({"fromVersion": 2})).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let fork_id = response.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
    let before = read_frames(response, 4).await;
    assert_eq!(kinds(&before), ["start", "plan_generated", "node_complete", "node_start"]);
    server.kill();
    hold.store(false, Ordering::SeqCst);
    server.restart().await;

    let after = server.reattach(&fork_id, before.last().unwrap().seq).await;
    let complete = after.iter().find(|f| f.kind == "complete").expect("the fork completes");
    assert_eq!(complete.payload["status"], "completed", "{:?}", kinds(&after));
    let calls = model.calls();
    assert_eq!(calls.iter().filter(|c| c.capability_id() == Some("writer")).count(), writer, "the draft was reused");
    assert_eq!(calls.iter().filter(|c| c.is_planner()).count(), planner, "no planner call for the fork");
    let log = event_log(dir.path(), &fork_id);
    let drafts = log
        .iter()
        .filter(|(_, kind, frame)| kind == "node_complete" && frame["payload"]["reusedFrom"]["nodeId"] == "draft");
    assert_eq!(drafts.count(), 1);
    assert!(
        !log.iter().any(|(_, kind, frame)| kind == "node_start" && frame["payload"]["capabilityId"] == "writer"),
        "draft never started"
    );
}

/// A fork of a fork reuses what its parent reused or ran, naming its parent's frames; a run still
/// waiting for an operator may be forked from what it has committed, and goes on waiting — and so
/// does the fork, for the approval of its plan that its envelope requires.
#[tokio::test]
async fn forks_of_forks_and_of_a_waiting_run() {
    let (server, parent, _) = repaired().await;
    let (status, first, _) = fork(&server, &parent, &json!({"fromVersion": 2})).await;
    assert_eq!(status, 200);
    let child = first[0].run_id.clone();
    let calls = server.llm_calls().len();

    let (status, second, _) = fork(&server, &child, &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(frame_of(&second, "complete").payload["status"], "completed", "{:?}", kinds(&second));
    let reused: Vec<(String, String)> = second
        .iter()
        .filter(|f| f.kind == "node_complete")
        .map(|f| (f.node_id.clone().unwrap(), f.payload["reusedFrom"]["runId"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(reused, [("draft".to_string(), child.clone()), ("polish".to_string(), child.clone())]);
    assert_eq!(server.llm_calls().len(), calls, "everything was reused: no model call");
    assert!(!second.iter().any(|f| f.kind == "node_start"));

    let mut gated = envelope();
    gated["policies"] = json!({"approval": {"plan": "required"}});
    let waiting = server.run(&gated).await;
    let waiting_id = waiting[0].run_id.clone();
    server.wait_for_status(&waiting_id, "awaiting_hitl").await;
    let (status, frames, _) = fork(&server, &waiting_id, &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(frame_of(&frames, "start").payload["forkedFrom"]["version"], 1);
    assert_eq!(kinds(&frames), ["start", "plan_generated", "hitl_request"], "the fork waits for its approval");
    let stored = flexrun::store::runs::get(&mut server.db(), &waiting_id).unwrap();
    assert_eq!(stored.status.as_str(), "awaiting_hitl", "the parent goes on waiting");
}

/// A fork obeys its envelope's plan approval: a plan the parent's operator never approved runs in
/// the fork only once approved there — and one the parent's operator approved is asked again (an
/// approval is given for one run). A fork with no step left to run has nothing to approve.
#[tokio::test]
async fn a_fork_waits_for_the_plan_approval_its_envelope_requires() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let waiting = server.run(&gated_envelope()).await;
    let parent = waiting[0].run_id.clone();
    server.wait_for_status(&parent, "awaiting_hitl").await;
    let writer = server.capability_calls("writer");

    let (status, frames, _) = fork(&server, &parent, &json!({"fromVersion": 1})).await;
    assert_eq!(status, 200);
    let asked = frame_of(&frames, "hitl_request");
    let request = &asked.payload["request"];
    assert_eq!(
        (request["kind"].as_str(), request["subject"].as_str(), request["planVersion"].as_u64()),
        (Some("approval"), Some("plan"), Some(1))
    );
    assert!(!frames.iter().any(|f| f.kind == "node_start" || f.kind == "complete"), "{:?}", kinds(&frames));
    let child = asked.run_id.clone();
    server.wait_for_status(&child, "awaiting_hitl").await;
    assert_eq!(server.capability_calls("writer"), writer, "no step ran before the approval");
    let open = format!("SELECT COUNT(*) AS n FROM hitl_requests WHERE run_id = '{child}' AND status = 'pending'");
    assert_eq!(server.count(&open), 1, "the fork's request is open in the inbox");
    // PostgreSQL: no node holds the lease of a run that waits (SQLite has no leases).
    let unleased = format!("SELECT COUNT(*) AS n FROM runs WHERE run_id = '{child}' AND lease_owner IS NULL");
    assert_eq!(server.count(&unleased), 1, "the fork's first commit let go of its lease");

    let request_id = request["id"].as_str().unwrap();
    let (status, after, _) = resume(&server, decision(&child, request_id, true, None)).await;
    assert_eq!(status, 200);
    assert_eq!(frame_of(&after, "complete").payload["status"], "completed", "{:?}", kinds(&after));
    assert_eq!(server.capability_calls("writer"), writer + 1, "approved, the draft ran");

    // The parent approved and completed: a fork that runs its plan again asks again.
    let parent_request = server.get_json(&format!("/api/v1/flex/runs/{parent}")).await["hitlRequests"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, done, _) = resume(&server, decision(&parent, &parent_request, true, None)).await;
    assert_eq!((status, frame_of(&done, "complete").payload["status"].as_str()), (200, Some("completed")));
    let (status, frames, _) = fork(&server, &parent, &json!({"fromVersion": 1})).await;
    assert_eq!(status, 200);
    assert_eq!(kinds(&frames), ["start", "plan_generated", "hitl_request"]);
    // Everything reused: no step runs, none waits for an approval.
    let (status, frames, _) = fork(&server, &parent, &json!({})).await;
    assert_eq!(status, 200);
    assert!(!frames.iter().any(|f| f.kind == "hitl_request" || f.kind == "node_start"), "{:?}", kinds(&frames));
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));
}

/// An idempotency key re-joins the fork a first request made; the same key forking another run is
/// a key reused (422), and nothing more is created.
#[tokio::test]
async fn an_idempotency_key_rejoins_the_fork_it_made() {
    let (server, parent, _) = repaired().await;
    let body = json!({"fromVersion": 2, "idempotencyKey": "fork-once"});
    let url = server.url(&format!("/api/v1/flex/runs/{parent}/fork"));
    let first = server.http.post(&url).bearer_auth(OPERATOR_KEY).json(&body).send().await.unwrap();
    let fork_id = first.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
    read_frames(first, usize::MAX).await;
    let runs_before = runs(&server);
    let again = server.http.post(&url).bearer_auth(OPERATOR_KEY).json(&body).send().await.unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.headers()["x-flexrun-run-id"].to_str().unwrap(), fork_id);
    let frames = read_frames(again, usize::MAX).await;
    assert_eq!(frames[0].kind, "start", "the fork's stream from its start");

    let other = server.run(&envelope()).await[0].run_id.clone();
    let runs_now = runs(&server);
    let (status, _, error) = fork(&server, &other, &body).await;
    assert_eq!((status, error["error"]["code"].as_str()), (422, Some("idempotency_key_reused")), "{error}");
    assert_eq!((runs_before, runs(&server)), (runs_now - 1, runs_now), "nothing more was created");
}
