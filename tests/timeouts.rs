//! Time limits: a run, a model call; each ends in a clear failure, never a hang.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

fn envelope_with(policies: Value) -> Value {
    let mut envelope = envelope();
    envelope["policies"] = policies;
    envelope
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_time_limit_fails_and_its_running_node_is_recorded_failed() {
    let server =
        TestServer::start(planner_then(&[("draft", "writer")], post(0.9).after(Duration::from_secs(10)))).await;
    let frames = server.run(&envelope_with(json!({"timeouts": {"runSeconds": 1}}))).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "plan_generated", "node_start", "node_error", "complete"]);
    assert_eq!(frames[4].payload["error"]["code"], "run_timeout");
    let error = &frames[5].payload["error"];
    assert_eq!((error["code"].as_str(), error["limitSeconds"].as_u64()), (Some("run_timeout"), Some(1)));
    assert_eq!(server.nodes_with_status(&frames[0].run_id, "failed").await, 1);
    let run = flexrun::store::runs::get(&mut server.db(), &frames[0].run_id).unwrap();
    assert_eq!(run.status.as_str(), "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_limit_covers_planning() {
    let server = TestServer::start(script(|call| {
        if call.is_planner() { plan(&[("draft", "writer")]).after(Duration::from_secs(10)) } else { post(0.9) }
    }))
    .await;
    let frames = server.run(&envelope_with(json!({"timeouts": {"runSeconds": 1}}))).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "complete"]);
    assert_eq!(frames[2].payload["error"]["code"], "run_timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_call_limit_from_the_envelope_applies() {
    let server = TestServer::start(script(|call| {
        if call.is_planner() { plan(&[("draft", "writer")]).after(Duration::from_secs(10)) } else { post(0.9) }
    }))
    .await;
    let policies = json!({"timeouts": {"modelCallSeconds": 1}, "retry": {"maxRetries": 0}});
    let frames = server.run(&envelope_with(policies)).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "complete"]);
    let error = &frames[2].payload["error"];
    assert_eq!(error["code"], "planner_error");
    assert!(error["message"].as_str().unwrap().contains("1s"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_limits_out_of_range_are_rejected() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let response = server.post_run(&envelope_with(json!({"timeouts": {"runSeconds": 0, "hours": 2}}))).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    let paths: Vec<&str> =
        error["error"]["details"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"/policies/timeouts/runSeconds"), "{error}");
    assert!(paths.iter().any(|p| p.starts_with("/policies/timeouts")), "{error}");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0);
}
