//! Retries of transient failures: faults injected at the stand-in model and at an `http`
//! capability endpoint, each retry visible as a `retry` frame and in the event log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flexrun::events::ReceivedFrame;
use flexrun::llm::standin::Script;
use serde_json::{Value, json};
use support::*;

/// The envelope of [`envelope`] with `policies.retry`.
fn envelope_with_retry(max_retries: u32, base_delay: f64) -> Value {
    let mut envelope = envelope();
    envelope["policies"] = json!({"retry": {"maxRetries": max_retries, "baseDelay": base_delay}});
    envelope
}

/// A model whose first `faults` planner calls get `fault`; everything after succeeds.
fn planner_faults(faults: usize, fault: Reply) -> Script {
    let seen = Arc::new(AtomicUsize::new(0));
    script(move |call| {
        if !call.is_planner() {
            return post(0.9);
        }
        if seen.fetch_add(1, Ordering::SeqCst) < faults { fault.clone() } else { plan(&[("draft", "writer")]) }
    })
}

fn retry_frames(frames: &[ReceivedFrame]) -> Vec<&Value> {
    frames.iter().filter(|f| f.kind == "retry").map(|f| &f.payload).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_planner_errors_are_retried_then_the_run_goes_on() {
    let server = TestServer::start(planner_faults(2, Reply::error(500, "upstream exploded"))).await;
    let frames = server.run(&envelope_with_retry(3, 0.1)).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "retry", "retry", "plan_generated", "node_start", "node_complete", "complete"]
    );
    let retries = retry_frames(&frames);
    for (n, retry) in retries.iter().enumerate() {
        assert_eq!(retry["scope"], "planner");
        assert_eq!(retry["attempt"], n + 1);
        assert_eq!(retry["maxRetries"], 3);
        assert!(retry["error"].as_str().unwrap().contains("500"), "{retry}");
    }
    // Exponential: the second wait starts where twice the base does (jitter only adds).
    assert!(retries[0]["delayMs"].as_u64().unwrap() >= 100);
    assert!(retries[1]["delayMs"].as_u64().unwrap() >= 200);
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    assert_eq!(server.planner_calls().len(), 3);
    let logged = server.event_log(&frames[0].run_id).into_iter().filter(|(_, kind, _)| kind == "retry").count();
    assert_eq!(logged, 2, "retries are recorded in the event log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_planner_errors_stop_after_max_retries() {
    let server = TestServer::start(planner_faults(usize::MAX, Reply::error(503, "overloaded"))).await;
    let frames = server.run(&envelope_with_retry(2, 0.1)).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "retry", "retry", "complete"]);
    let error = &frames[4].payload["error"];
    assert_eq!(error["code"], "planner_error");
    assert_eq!(error["transient"], true);
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("after 2 retries") && message.contains("503"), "{message}");
    assert_eq!(server.planner_calls().len(), 3, "one call and exactly maxRetries retries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_replaces_the_computed_delay() {
    // A base delay of 30 s would outlast the test; the server asks for 0.2 s instead.
    let server = TestServer::start(planner_faults(1, Reply::error_retry_after(429, "slow down", "0.2"))).await;
    let frames = server.run(&envelope_with_retry(3, 30.0)).await;
    let retries = retry_frames(&frames);
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0]["delayMs"], 200);
    assert!(retries[0]["error"].as_str().unwrap().contains("429"));
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
}

/// A `Retry-After` of more seconds than a duration holds is read as the longest wait: it panicked
/// the run's coordinator, leaving the run planning (and recovery drove it into the panic again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_beyond_any_duration_is_the_longest_wait_not_a_panic() {
    let server =
        TestServer::start(planner_faults(usize::MAX, Reply::error_retry_after(429, "slow down", "1e20"))).await;
    let envelope = envelope_with_retry(0, 0.1);
    let run = server.run(&envelope);
    let frames = tokio::time::timeout(std::time::Duration::from_secs(30), run).await.expect("the run ends");
    assert_eq!(kinds(&frames), ["start", "plan_requested", "complete"]);
    assert_eq!(frames[2].payload["error"]["code"], "planner_error", "{}", frames[2].payload);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_connections_are_retried() {
    let server = TestServer::start(planner_faults(1, Reply::reset())).await;
    let frames = server.run(&envelope_with_retry(1, 0.1)).await;
    let retries = retry_frames(&frames);
    assert_eq!(retries.len(), 1, "{:?}", kinds(&frames));
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    assert_eq!(server.planner_calls().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_are_retried() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let config = dir.path().join("flexrun.toml");
    std::fs::write(&config, "[llm]\ntimeout_secs = 1\n").unwrap();
    let slow = Reply::json(json!({"nodes": []})).after(Duration::from_secs(3));
    let options = Options {
        env: vec![("FLEXRUN_CONFIG", config.display().to_string())],
        dir: Some(dir.clone()),
        ..Options::default()
    };
    let server = TestServer::start_with(planner_faults(1, slow), options).await;
    let frames = server.run(&envelope_with_retry(1, 0.1)).await;
    let retries = retry_frames(&frames);
    assert_eq!(retries.len(), 1, "{:?}", kinds(&frames));
    assert!(retries[0]["error"].as_str().unwrap().contains("1s"), "{}", retries[0]);
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_planner_errors_fail_at_once() {
    let server = TestServer::start(script(|_| Reply::error(401, "invalid api key"))).await;
    let frames = server.run(&envelope_with_retry(3, 0.1)).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "complete"]);
    let error = &frames[2].payload["error"];
    assert_eq!(error["code"], "planner_error");
    assert_eq!(error["transient"], false);
    assert!(error["message"].as_str().unwrap().contains("invalid api key"), "{error}");
    assert_eq!(server.planner_calls().len(), 1);
}

/// A model server that echoes the key it was sent in its error (as OpenAI's "Incorrect API key
/// provided: …" does): the key is cut out of the failure every reader sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_error_that_echoes_the_api_key_never_shows_it() {
    const KEY: &str = "sk-echoed-9f8e7d6c5b4a";
    let echo = format!("Incorrect API key provided: Bearer {KEY}");
    let options = Options { env: vec![("FLEXRUN_LLM_API_KEY", KEY.into())], ..Options::default() };
    let server = TestServer::start_with(script(move |_| Reply::error(401, echo.clone())), options).await;
    let frames = server.run(&envelope_with_retry(0, 0.1)).await;
    let complete = frame_of(&frames, "complete");
    let message = complete.payload["error"]["message"].as_str().unwrap();
    assert!(message.contains("Incorrect API key provided: Bearer [redacted]"), "{message}");
    let document = server.get_json(&format!("/api/v1/flex/runs/{}", complete.run_id)).await;
    assert!(!document.to_string().contains(KEY), "{document}");
    let logged = server.event_log_text(&complete.run_id).join("\n");
    assert!(!logged.contains(KEY) && logged.contains("[redacted]"), "the stored log holds no key either");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_drafts_are_rejected_not_retried() {
    let server = TestServer::start(planner_faults(1, Reply::content("{not json"))).await;
    let frames = server.run(&envelope_with_retry(3, 0.1)).await;
    assert_eq!(
        kinds(&frames),
        [
            "start",
            "plan_requested",
            "plan_rejected",
            "plan_requested",
            "plan_generated",
            "node_start",
            "node_complete",
            "complete"
        ]
    );
    assert_eq!(frames[2].payload["diagnostics"][0]["code"], "DRAFT_NOT_JSON");
    assert_eq!(server.planner_calls().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_ai_capability_errors_retry_the_node() {
    let seen = Arc::new(AtomicUsize::new(0));
    let server = TestServer::start(script(move |call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]);
        }
        if seen.fetch_add(1, Ordering::SeqCst) == 0 { Reply::error(502, "bad gateway") } else { post(0.9) }
    }))
    .await;
    let frames = server.run(&envelope_with_retry(2, 0.1)).await;
    assert_eq!(kinds(&frames)[3..], ["node_start", "retry", "node_complete", "complete"]);
    let retry = &frames[4];
    assert_eq!(retry.payload["scope"], "capability");
    assert_eq!(retry.payload["attempt"], 1);
    assert_eq!(retry.node_id.as_deref(), Some("draft"));
    assert_eq!(server.capability_calls("writer"), 2);
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_capabilities_are_retried_until_they_answer() {
    let ok = json!({"text": "from http", "quality_score": 0.9});
    let endpoint = HttpCapability::sequence(vec![(503, json!({"error": "busy"})), (429, json!({})), (200, ok)]);
    let server = http_writer_server(&endpoint, json!({"type": "object"})).await;
    let frames = server.run(&envelope_with_retry(3, 0.1)).await;
    assert_eq!(kinds(&frames)[3..], ["node_start", "retry", "retry", "node_complete", "complete"]);
    assert_eq!(endpoint.received().len(), 3);
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_of_http_capabilities_are_not_retried() {
    let endpoint = HttpCapability::start(400, json!({"error": "bad input"}));
    let server = http_writer_server(&endpoint, json!({"type": "object"})).await;
    let frames = server.run(&envelope_with_retry(3, 0.1)).await;
    assert_eq!(kinds(&frames)[3..], ["node_start", "node_error", "complete"]);
    assert_eq!(endpoint.received().len(), 1);
}
