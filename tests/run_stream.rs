//! `POST /api/v1/flex/run.stream` end to end: frames, persistence, goal-condition repair, caps,
//! rejected drafts and disconnecting clients.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_path_frames_are_gap_free_and_match_the_event_log() {
    let server = TestServer::start(planner_then(&[("draft", "writer"), ("polish", "editor")], post(0.9))).await;
    let frames = server.run(&envelope()).await;

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
            "complete"
        ]
    );
    let seqs: Vec<u64> = frames.iter().map(|f| f.seq).collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    let run_id = frames[0].run_id.clone();
    assert!(frames.iter().all(|f| f.run_id == run_id), "runId on every frame");
    assert_eq!(frames[0].payload["runId"], run_id.as_str());
    assert_eq!(frames[1].payload["phase"], "initial");
    assert_eq!(frames[2].plan_version, Some(1));
    assert_eq!(frames[3].node_id.as_deref(), Some("draft"));
    let complete = &frames[7].payload;
    assert_eq!(complete["status"], "completed");
    assert_eq!(complete["output"]["post_copy"]["quality_score"], 0.9);
    assert_eq!(complete["goal_condition_results"][0]["satisfied"], true);

    // Every frame is in the event log, in order, byte for byte as sent.
    let log = server.event_log(&run_id);
    assert_eq!(log.len(), frames.len());
    for ((seq, kind, json), frame) in log.iter().zip(&frames) {
        assert_eq!((*seq, kind.as_str()), (frame.seq, frame.kind.as_str()));
        assert_eq!(json["payload"], frame.payload);
    }
    // The run, its plan, nodes and goal evaluation are persisted.
    let run = flexrun::store::runs::get(&mut server.db(), &run_id).unwrap();
    assert_eq!((run.status.as_str(), run.plan_version, run.planner_attempts), ("completed", 1, 1));
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM run_events WHERE event_type = 'plan_generated'"), 1);
    assert_eq!(server.nodes_with_status(&run_id, "completed").await, 2);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM run_outputs WHERE status = 'satisfied'"), 1);
    assert_eq!(server.llm_calls().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_nodes_run_concurrently() {
    let server = TestServer::start(script(|call| {
        if call.is_planner() {
            return plan(&[("slow", "writer"), ("fast", "tagger")]);
        }
        match call.capability_id() {
            Some("writer") => post(0.9).after(Duration::from_millis(400)),
            _ => Reply::json(json!({"tags": ["rust"]})),
        }
    }))
    .await;
    let frames = server.run(&envelope()).await;
    let nodes: Vec<(&str, &str)> = frames
        .iter()
        .filter(|f| f.kind.starts_with("node_"))
        .map(|f| (f.kind.as_str(), f.node_id.as_deref().unwrap()))
        .collect();
    // Both start before either finishes; the fast one finishes first although it started second.
    assert_eq!(
        nodes,
        [("node_start", "slow"), ("node_start", "fast"), ("node_complete", "fast"), ("node_complete", "slow")]
    );
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_goal_condition_triggers_a_repair_replan_that_keeps_completed_work() {
    let server = TestServer::start(repair_script(0.6, 0.95)).await;
    let frames = server.run(&envelope()).await;

    assert_eq!(
        kinds(&frames),
        [
            "start",
            "plan_requested",
            "plan_generated",
            "node_start",
            "node_complete",
            "goal_condition_failed",
            "plan_requested",
            "plan_generated",
            "plan_updated",
            "node_start",
            "node_complete",
            "complete"
        ]
    );
    let failed = &frames[5].payload;
    assert_eq!((failed["attempt"].as_u64(), failed["limit"].as_u64()), (Some(1), Some(2)));
    assert_eq!(failed["failedGoalConditions"][0]["observedValue"], 0.6);
    for frame in &frames[6..=8] {
        assert_eq!(frame.payload["replan"]["reason"], "goal_condition_failed", "{}", frame.kind);
        assert_eq!(frame.payload["replan"]["failedGoalConditions"][0]["facet"], "post_copy");
    }
    assert_eq!(frames[6].payload["phase"], "replan");
    assert_eq!(frames[8].payload["previousVersion"], 1);
    assert_eq!(frames[8].payload["version"], 2);
    // The kept node is marked completed in the new plan and not run again.
    assert_eq!(frames[7].payload["plan"]["nodes"][0]["status"], "completed");
    assert_eq!(frames[9].node_id.as_deref(), Some("polish"));
    let complete = &frames[11].payload;
    assert_eq!(complete["status"], "completed");
    assert!(complete["goal_condition_results"].as_array().unwrap().iter().all(|r| r["satisfied"] == true));

    // The second planner prompt carries the repair section with facet, path and observed value.
    let planner = server.planner_calls();
    assert_eq!(planner.len(), 2);
    assert!(!planner[0].user.contains("GOAL CONDITION REPAIR"));
    let repair = planner[1].user.split("### GOAL CONDITION REPAIR\n").nth(1).expect("repair section");
    assert!(repair.contains("Facet \"post_copy\" @ path \"/quality_score\""), "{repair}");
    assert!(repair.contains("Observed value:\n  0.6"), "{repair}");
    assert!(planner[1].user.contains("stage \"draft\" (node draft)"), "completed work is listed");
    // What every planning request sends unchanged (written once, copied in) arrives as it reads.
    for call in &planner {
        assert!(
            call.system.starts_with("You are the flexrun planner.") && call.system.contains("\"status\"?: \"pending\"")
        );
        let schema: serde_json::Value = serde_json::from_str(flexrun::planner::draft_schema().get()).unwrap();
        assert_eq!(call.body["response_format"]["json_schema"]["schema"], schema);
    }
    assert_eq!(server.llm_calls().len(), 4, "2 planner calls + writer once + editor once");
    assert_eq!(server.capability_calls("writer"), 1);

    let run_id = &frames[0].run_id;
    let run = flexrun::store::runs::get(&mut server.db(), run_id).unwrap();
    assert_eq!((run.goal_condition_replans, run.replans, run.plan_version), (1, 1, 2));
    assert_eq!(
        server.count("SELECT COUNT(*) AS n FROM run_events WHERE event_type = 'plan_generated'"),
        2,
        "every plan version is kept"
    );
    let versions: std::collections::BTreeSet<_> =
        server.nodes(run_id).await.iter().map(|n| n["planVersion"].as_u64()).collect();
    assert_eq!(versions.len(), 2);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM run_outputs WHERE status = 'unsatisfied'"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_goal_condition_cap_fails_the_run() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.1))).await;
    let frames = server.run(&envelope()).await;

    let count = |kind: &str| frames.iter().filter(|f| f.kind == kind).count();
    assert_eq!(count("goal_condition_failed"), 2);
    assert_eq!(count("plan_requested"), 3);
    let complete = &frames.last().unwrap().payload;
    assert_eq!(complete["status"], "failed");
    assert_eq!(complete["error"]["code"], "goal_condition_replan_limit");
    assert_eq!(complete["error"]["attempts"], 2);
    assert_eq!(complete["error"]["limit"], 2);
    assert_eq!(complete["goal_condition_results"][0]["satisfied"], false);
    assert_eq!(server.planner_calls().len(), 3);
    let run = flexrun::store::runs::get(&mut server.db(), &frames[0].run_id).unwrap();
    assert_eq!(run.status.as_str(), "failed");
    assert_eq!(run.goal_condition_replans, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replan_cap_comes_from_the_envelope() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.1))).await;
    let mut envelope = envelope();
    envelope["policies"] = json!({"replan": {"maxGoalConditionReplans": 0}});
    let frames = server.run(&envelope).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "plan_generated", "node_start", "node_complete", "complete"]
    );
    assert_eq!(frames[5].payload["error"]["code"], "goal_condition_replan_limit");
    assert_eq!(server.planner_calls().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_draft_is_rejected_then_retried_with_its_diagnostics() {
    let planner_calls = Arc::new(AtomicUsize::new(0));
    let calls = planner_calls.clone();
    let server = TestServer::start(script(move |call| {
        if call.is_planner() {
            return match calls.fetch_add(1, Ordering::SeqCst) {
                0 => plan(&[("draft", "ghostwriter")]),
                _ => plan(&[("draft", "writer")]),
            };
        }
        post(0.9)
    }))
    .await;
    let frames = server.run(&envelope()).await;

    assert_eq!(kinds(&frames)[..5], ["start", "plan_requested", "plan_rejected", "plan_requested", "plan_generated"]);
    let rejected = &frames[2].payload;
    assert_eq!(rejected["attempt"], 1);
    assert_eq!(rejected["diagnostics"][0]["code"], "CAPABILITY_NOT_REGISTERED");
    assert_eq!(frames[3].payload["attempt"], 2);
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let second = &server.planner_calls()[1];
    assert!(second.user.contains("### PREVIOUS DRAFT DIAGNOSTICS"), "{}", second.user);
    assert!(second.user.contains("ghostwriter"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_invalid_drafts_fail_the_run() {
    let server = TestServer::start(script(|call| {
        if call.is_planner() {
            return Reply::content("Sure! Here is a plan: first write, then polish.");
        }
        post(0.9)
    }))
    .await;
    let frames = server.run(&envelope()).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "plan_rejected", "plan_requested", "plan_rejected", "complete"]
    );
    assert_eq!(frames[2].payload["diagnostics"][0]["code"], "DRAFT_NOT_JSON");
    let complete = &frames[5].payload;
    assert_eq!(complete["status"], "failed");
    assert_eq!(complete["error"]["code"], "plan_rejected");
    assert_eq!(server.planner_calls().len(), 2);
    let run = flexrun::store::runs::get(&mut server.db(), &frames[0].run_id).unwrap();
    assert_eq!(run.status.as_str(), "failed");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM run_events WHERE event_type = 'plan_generated'"), 0);
    assert_eq!(server.nodes(&frames[0].run_id).await.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_capability_output_fails_the_node_and_the_run() {
    let server = TestServer::start(script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]);
        }
        Reply::json(json!({"text": "no score"}))
    }))
    .await;
    let frames = server.run(&envelope()).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "plan_generated", "node_start", "validation_error", "node_error", "complete"]
    );
    assert_eq!(frames[4].payload["scope"], "capability_output");
    assert_eq!(frames[5].payload["error"]["code"], "capability_output_invalid");
    let complete = &frames[6].payload;
    assert_eq!(complete["error"]["code"], "node_failed");
    assert_eq!(complete["error"]["nodeId"], "draft");
    assert_eq!(server.nodes_with_status(&frames[0].run_id, "failed").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_does_not_stop_the_run() {
    let server = TestServer::start(planner_then(
        &[("draft", "writer"), ("polish", "editor")],
        post(0.9).after(Duration::from_millis(200)),
    ))
    .await;
    let response = server.post_run(&envelope()).await;
    let run_id = response.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
    assert_eq!(response.headers()["location"], format!("/api/v1/flex/runs/{run_id}/stream").as_str());
    let first = read_frames(response, 2).await; // then the response is dropped: the client is gone
    assert_eq!(kinds(&first), ["start", "plan_requested"]);

    server.wait_for_status(&run_id, "completed").await;
    let log = server.event_log(&run_id);
    let types: Vec<&str> = log.iter().map(|(_, kind, _)| kind.as_str()).collect();
    assert_eq!(types.last(), Some(&"complete"));
    assert_eq!(log.iter().map(|(seq, ..)| *seq).collect::<Vec<_>>(), (1..=log.len() as u64).collect::<Vec<_>>());
    assert_eq!(server.capability_calls("writer") + server.capability_calls("editor"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reattaching_client_gets_exactly_the_frames_it_missed() {
    let server = TestServer::start(planner_then(
        &[("draft", "writer"), ("polish", "editor")],
        post(0.9).after(Duration::from_millis(150)),
    ))
    .await;
    let response = server.post_run(&envelope()).await;
    let run_id = response.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
    let first = read_frames(response, 3).await;
    let rest = server
        .http
        .get(server.url(&format!("/api/v1/flex/runs/{run_id}/stream")))
        .header("last-event-id", "3")
        .send()
        .await
        .unwrap();
    assert_eq!(rest.headers()["content-type"], "text/event-stream");
    let rest = read_frames(rest, usize::MAX).await;
    let seen: Vec<u64> = first.iter().chain(&rest).map(|f| f.seq).collect();
    let log: Vec<u64> = server.event_log(&run_id).iter().map(|(seq, ..)| *seq).collect();
    assert_eq!(seen, log, "first part + re-attached part = the whole log, no gap, no duplicate");
    assert_eq!(rest.last().unwrap().kind, "complete");

    // A finished run replays and ends; the JSON page endpoint agrees.
    let replay =
        server.http.get(server.url(&format!("/api/v1/flex/runs/{run_id}/stream?after=5"))).send().await.unwrap();
    let replay = read_frames(replay, usize::MAX).await;
    assert_eq!(replay.first().unwrap().seq, 6);
    let page: Value = server
        .http
        .get(server.url(&format!("/api/v1/flex/runs/{run_id}/events?after=2&limit=3")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let seqs: Vec<u64> = page["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [3, 4, 5]);
    assert_eq!((page["nextAfter"].as_u64(), page["hasMore"].as_bool()), (Some(5), Some(true)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_detail_shows_plans_nodes_outputs_and_redacts_secrets() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let mut envelope = envelope();
    envelope["inputs"]["credentials"] = json!({"apiKey": "sk-live-123"});
    let frames = server.run(&envelope).await;
    let run_id = &frames[0].run_id;
    let detail: Value =
        server.http.get(server.url(&format!("/api/v1/flex/runs/{run_id}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(detail["run"]["status"], "completed");
    assert_eq!(detail["planVersions"].as_array().unwrap().len(), 1);
    assert_eq!(detail["nodes"][0]["nodeId"], "draft");
    assert_eq!(detail["outputs"][0]["goalConditionResults"][0]["satisfied"], true);
    // The run context, rebuilt from the event log: inputs and what each node wrote.
    let post_copy = &detail["context"]["facets"]["post_copy"];
    assert_eq!(post_copy["value"]["quality_score"], 0.9);
    assert_eq!(post_copy["provenance"][0]["nodeId"], "draft");
    assert_eq!(post_copy["provenance"][0]["capabilityId"], "writer");
    assert_eq!(detail["context"]["facets"]["brief"]["provenance"][0]["nodeId"], "envelope_input");
    assert!(!detail.to_string().contains("sk-live-123"), "secrets are redacted");
    let missing = server.http.get(server.url("/api/v1/flex/runs/nope")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], "run_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_contract_is_checked_before_goal_conditions() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let mut envelope = envelope();
    envelope["outputContract"] = json!({"mode": "json_schema", "schema": {
        "type": "object", "required": ["headline"], "properties": {"headline": {"type": "string"}}}});
    let frames = server.run(&envelope).await;
    assert_eq!(kinds(&frames)[5..], ["validation_error", "complete"]);
    assert_eq!(frames[5].payload["scope"], "final_output");
    assert_eq!(frames[5].payload["errors"][0]["keyword"], "required");
    let complete = &frames[6].payload;
    assert_eq!(complete["error"]["code"], "final_output_invalid");
    assert_eq!(complete["output"]["quality_score"], 0.9, "the last node's output was composed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_facet_no_node_wrote_fails_the_run() {
    let both = ai_capability("both", &["brief"], &["post_copy", "tags"], json!({"type": "object"}));
    let server = TestServer::start_with(
        planner_then(&[("draft", "both")], Reply::json(json!({"post_copy": {"text": "x", "quality_score": 0.9}}))),
        Options { capabilities: vec![both], ..Options::default() },
    )
    .await;
    let mut envelope = envelope();
    envelope["outputContract"] = json!({"mode": "facets", "facets": ["post_copy", "tags"]});
    let frames = server.run(&envelope).await;
    let validation = frames.iter().find(|f| f.kind == "validation_error").expect("validation_error");
    assert_eq!(validation.payload["errors"][0]["instancePath"], "/tags");
    assert_eq!(frames.last().unwrap().payload["error"]["code"], "final_output_invalid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_stream_over_http2_too() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    // h2c with prior knowledge: the client starts with HTTP/2's preface on the plain port.
    let http2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let start = || http2.post(server.url("/api/v1/flex/run.stream")).json(&envelope()).send();
    let (a, b) = tokio::join!(start(), start());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.version(), b.version()), (reqwest::Version::HTTP_2, reqwest::Version::HTTP_2));
    assert_eq!((a.status(), b.status()), (reqwest::StatusCode::OK, reqwest::StatusCode::OK));
    let run_id = a.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
    let (a, b) = tokio::join!(read_frames(a, usize::MAX), read_frames(b, usize::MAX));
    for frames in [&a, &b] {
        assert_eq!(
            kinds(frames),
            ["start", "plan_requested", "plan_generated", "node_start", "node_complete", "complete"]
        );
        assert_eq!(frames.iter().map(|f| f.seq).collect::<Vec<_>>(), (1..=6).collect::<Vec<_>>());
    }
    assert_ne!(a[0].run_id, b[0].run_id, "two runs");

    // Re-attaching over HTTP/2 replays the log after Last-Event-ID.
    let response = http2
        .get(server.url(&format!("/api/v1/flex/runs/{run_id}/stream")))
        .header("last-event-id", "4")
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    let rest = read_frames(response, usize::MAX).await;
    assert_eq!(kinds(&rest), ["node_complete", "complete"]);
    // HTTP/1.1 clients are served on the same port as before.
    assert_eq!(
        server.http.get(server.url("/api/v1/health")).send().await.unwrap().version(),
        reqwest::Version::HTTP_11
    );
}
