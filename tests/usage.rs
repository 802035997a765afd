//! Model usage and cost: every call that got an answer is recorded, with exact tokens and cost, on
//! the frame that records its outcome; `complete`, the run document and the run list add them up.
//! Real server, real SQLite, the stand-in model answering with `usage` blocks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use support::*;

/// A config file with prices for `test-model` (the model the server asks for).
fn priced(dir: &tempfile::TempDir) -> Vec<(&'static str, String)> {
    let config = dir.path().join("prices.toml");
    std::fs::write(
        &config,
        "[retry]\nbase_delay_secs = 0.001\n\
         [llm.prices.\"test-model\"]\ninput_per_mtok = 2.0\noutput_per_mtok = 8.0\ncached_input_per_mtok = 0.5\n",
    )
    .unwrap();
    vec![("FLEXRUN_CONFIG", config.display().to_string())]
}

async fn document(server: &TestServer, run_id: &str) -> Value {
    server.get_json(&format!("/api/v1/flex/runs/{run_id}")).await
}

async fn listed(server: &TestServer, run_id: &str) -> Value {
    let list = server.get_json("/api/v1/flex/runs").await;
    list["runs"].as_array().unwrap().iter().find(|r| r["runId"] == run_id).cloned().expect("the run is listed")
}

#[tokio::test]
async fn each_answered_call_is_recorded_exactly_on_its_outcome_frame_and_adds_up_everywhere() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let writer_calls = Arc::new(AtomicUsize::new(0));
    let calls = writer_calls.clone();
    let script = script(move |call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]).usage(usage_block(1_000, 100, Some(200), Some(30)));
        }
        match calls.fetch_add(1, Ordering::SeqCst) {
            // Not answered: retried, and not counted.
            0 => Reply::error(503, "busy"),
            // Answered by a model the prices do not name: priced as the model asked for.
            _ => post(0.9).usage(usage_block(500, 50, Some(0), Some(10))).model("test-model-2026-01"),
        }
    });
    let options = Options { env: priced(&dir), dir: Some(dir), ..Options::default() };
    let server = TestServer::start_with(script, options).await;
    let frames = server.run(&envelope()).await;
    let run_id = frames[0].run_id.clone();
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");

    // 800 uncached input tokens × 2 + 200 cached × 0.5 + 100 output × 8 = 2,500 µ$.
    let planner = json!({"calls": 1, "inputTokens": 1_000, "outputTokens": 100, "cachedInputTokens": 200,
                         "reasoningTokens": 30, "costUsd": 0.0025, "models": ["test-model"],
                         "answeredBy": ["default/test-model"]});
    assert_eq!(frame_of(&frames, "plan_generated").payload["usage"], planner);
    assert!(frame_of(&frames, "retry").payload.get("usage").is_none(), "a call without an answer used nothing");
    // 500 × 2 + 50 × 8 = 1,400 µ$.
    let writer = json!({"calls": 1, "inputTokens": 500, "outputTokens": 50, "cachedInputTokens": 0,
                        "reasoningTokens": 10, "costUsd": 0.0014, "models": ["test-model-2026-01"],
                        "answeredBy": ["default/test-model"]});
    assert_eq!(frame_of(&frames, "node_complete").payload["usage"], writer);
    for kind in ["start", "plan_requested", "node_start"] {
        assert!(frame_of(&frames, kind).payload.get("usage").is_none(), "{kind} records no call");
    }
    let total = json!({"calls": 2, "inputTokens": 1_500, "outputTokens": 150, "cachedInputTokens": 200,
                       "reasoningTokens": 40, "costUsd": 0.0039, "models": ["test-model", "test-model-2026-01"],
                       "answeredBy": ["default/test-model"]});
    let mut with_models = total.clone();
    with_models["byModel"] = json!({
        "test-model": {"calls": 1, "inputTokens": 1_000, "outputTokens": 100, "cachedInputTokens": 200,
                       "reasoningTokens": 30, "costUsd": 0.0025},
        "test-model-2026-01": {"calls": 1, "inputTokens": 500, "outputTokens": 50, "cachedInputTokens": 0,
                               "reasoningTokens": 10, "costUsd": 0.0014},
    });
    assert_eq!(frame_of(&frames, "complete").payload["usage"], with_models);
    assert_eq!(server.llm_calls().len(), 3, "two answered calls and the 503");

    let doc = document(&server, &run_id).await;
    assert_eq!(doc["run"]["usage"], with_models);
    assert_eq!(doc["planVersions"][0]["usage"], total, "version 1: its draft and its step");
    assert_eq!(doc["nodes"][0]["usage"], writer);
    assert_eq!(listed(&server, &run_id).await["usage"], total);
}

/// A post-condition that wants `quality_score >= 0.5`, retried once.
fn checked_writer() -> Value {
    let post = json!({"type": "object", "required": ["text", "quality_score"],
                      "properties": {"text": {"type": "string"}, "quality_score": {"type": "number"}}});
    let mut writer = ai_capability("writer", &["brief"], &["post_copy"], post);
    writer["postConditions"] =
        json!([{"facet": "post_copy", "path": "/quality_score", "condition": {"dsl": "quality_score >= 0.5"}}]);
    writer["metadata"] = json!({"postConditionPolicy": {"maxRetries": 1}});
    writer
}

#[tokio::test]
async fn unknown_counts_stay_unknown_and_every_attempt_that_was_answered_counts() {
    let planner_calls = Arc::new(AtomicUsize::new(0));
    let writer_calls = Arc::new(AtomicUsize::new(0));
    let (planned, written) = (planner_calls.clone(), writer_calls.clone());
    let script = script(move |call| {
        if call.is_planner() {
            return match planned.fetch_add(1, Ordering::SeqCst) {
                // A draft naming a capability nobody registered: rejected, but paid for.
                0 => plan(&[("draft", "nobody")]).usage(usage_block(300, 20, None, None)),
                // A server that reports no usage.
                _ => plan(&[("draft", "writer")]).without_usage(),
            };
        }
        match written.fetch_add(1, Ordering::SeqCst) {
            // Fails the post-condition: the node runs again, both calls count.
            0 => post(0.3).usage(usage_block(400, 40, Some(100), None)),
            _ => post(0.9).usage(usage_block(410, 41, Some(0), None)),
        }
    });
    let options = Options { capabilities: vec![checked_writer()], ..Options::default() };
    let server = TestServer::start_with(script, options).await;
    let frames = server.run(&envelope()).await;
    let run_id = frames[0].run_id.clone();
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));

    // No prices configured: every cost is unknown; counts a call did not report are unknown.
    assert_eq!(
        frame_of(&frames, "plan_rejected").payload["usage"],
        json!({"calls": 1, "inputTokens": 300, "outputTokens": 20, "cachedInputTokens": null,
               "reasoningTokens": null, "costUsd": null, "models": ["test-model"],
               "answeredBy": ["default/test-model"]})
    );
    assert_eq!(
        frame_of(&frames, "plan_generated").payload["usage"],
        json!({"calls": 1, "inputTokens": null, "outputTokens": null, "cachedInputTokens": null,
               "reasoningTokens": null, "costUsd": null, "models": ["test-model"],
               "answeredBy": ["default/test-model"]})
    );
    assert!(frame_of(&frames, "policy_update").payload.get("usage").is_none(), "the retry is not the outcome");
    assert_eq!(
        frame_of(&frames, "node_complete").payload["usage"],
        json!({"calls": 2, "inputTokens": 810, "outputTokens": 81, "cachedInputTokens": 100,
               "reasoningTokens": null, "costUsd": null, "models": ["test-model"],
               "answeredBy": ["default/test-model"]})
    );
    let complete = &frame_of(&frames, "complete").payload["usage"];
    assert_eq!(complete["calls"], 4);
    assert_eq!(complete["inputTokens"], Value::Null, "one call did not report its tokens");
    assert_eq!(complete["byModel"]["test-model"]["calls"], 4);
    assert_eq!(server.llm_calls().len(), 4, "every call was answered, every call is counted");

    let doc = document(&server, &run_id).await;
    assert_eq!(doc["planVersions"][0]["usage"]["calls"], 4, "the rejected draft counts to the version it led to");
    assert_eq!(doc["nodes"][0]["usage"]["calls"], 2);
    assert_eq!(listed(&server, &run_id).await["usage"]["calls"], 4);
}

/// The model name a response reports is copied into every frame, document and list that shows
/// the call: one that is no model's name — far too long, or holding control characters — is not
/// kept, and the call is recorded under the model asked for.
#[tokio::test]
async fn a_response_naming_no_plausible_model_is_recorded_under_the_model_asked_for() {
    let script = script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]).model("evil\u{0}\u{202e}name");
        }
        post(0.9).model("x".repeat(100_000))
    });
    let server = TestServer::start(script).await;
    let frames = server.run(&envelope()).await;
    let run_id = frames[0].run_id.clone();
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
    for kind in ["plan_generated", "node_complete", "complete"] {
        assert_eq!(frame_of(&frames, kind).payload["usage"]["models"], json!(["test-model"]), "{kind}");
    }
    let listed = listed(&server, &run_id).await;
    assert_eq!(listed["usage"]["models"], json!(["test-model"]));
    assert!(document(&server, &run_id).await.to_string().len() < 20_000, "the run document stays small");
}
