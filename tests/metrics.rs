//! `GET /metrics` counts what runs did: runs started and ended by status and code, replans by
//! kind, model and capability calls by outcome with their latencies, open streams, commits. The
//! server is its own process, so the counts are exactly this test's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flexrun::llm::standin::StandIn;
use serde_json::json;
use support::process::ServerProcess;
use support::*;

/// Plans `draft`, and `draft` + `polish` for a repair. The first writer call fails with a 500 (a
/// retried model error); writer scores 0.5, editor 0.9. The `slow` capability takes 400 ms.
fn model() -> flexrun::llm::standin::Script {
    let writer_calls = Arc::new(AtomicUsize::new(0));
    script(move |call| {
        if call.is_planner() {
            if call.user.contains("slow step") {
                return plan(&[("wait", "tagger")]);
            }
            if call.user.contains("### GOAL CONDITION REPAIR") {
                return plan(&[("draft", "writer"), ("polish", "editor")]);
            }
            return plan(&[("draft", "writer")]);
        }
        match call.capability_id() {
            Some("writer") if writer_calls.fetch_add(1, Ordering::SeqCst) == 0 => Reply::error(500, "overloaded"),
            Some("writer") => post(0.5),
            Some("tagger") => Reply::json(json!({"tags": ["a"]})).after(Duration::from_millis(400)),
            _ => post(0.9),
        }
    })
}

/// The value of the sample `name{labels}` (labels in the exporter's order), or 0 when absent.
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

async fn metrics(server: &ServerProcess) -> String {
    let response = server.http.get(server.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_runs_replans_calls_streams_and_commits() {
    let model = StandIn::start(model()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;

    // A repair run: a retried model error, one goal-condition replan, then completed.
    let mut repair = envelope();
    repair["policies"] = json!({"retry": {"maxRetries": 1, "baseDelay": 0.1}});
    let (_, response) = server.post_run(&repair).await;
    let frames = read_frames(response, usize::MAX).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed", "{:?}", kinds(&frames));

    // A run paused for its plan's approval, then cancelled.
    let mut approval = envelope();
    approval["policies"] = json!({"approval": {"plan": "required"}});
    let (paused, response) = server.post_run(&approval).await;
    read_frames(response, usize::MAX).await;
    let cancel = server.url(&format!("/api/v1/flex/runs/{paused}/cancel"));
    assert_eq!(server.http.post(cancel).json(&json!({})).send().await.unwrap().status(), 200);

    // A bad envelope: a 400, and no run.
    let bad = server.http.post(server.url("/api/v1/flex/run.stream")).json(&json!({"objective": 1})).send().await;
    assert_eq!(bad.unwrap().status(), 400);

    // Two streams open on a slow run while it runs; none once it ended.
    let mut slow = envelope();
    slow["objective"] = json!("a slow step");
    slow["outputContract"] = json!({"mode": "facets", "facets": ["tags"]});
    slow.as_object_mut().unwrap().remove("goal_condition");
    let (slow_id, slow_stream) = server.post_run(&slow).await;
    let follow = server.http.get(server.url(&format!("/api/v1/flex/runs/{slow_id}/stream"))).send().await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let during = metrics(&server).await;
    let (first, second) = tokio::join!(read_frames(slow_stream, usize::MAX), read_frames(follow, usize::MAX));
    assert_eq!(first.last().unwrap().payload["status"], "completed");
    assert_eq!(second.last().unwrap().payload["status"], "completed");
    assert_eq!(sample(&during, "flexrun_open_streams"), 2.0, "{during}");
    tokio::time::sleep(Duration::from_millis(100)).await;

    let after = metrics(&server).await;
    let expect = |series: &str, value: f64| assert_eq!(sample(&after, series), value, "{series}\n{after}");
    expect("flexrun_open_streams", 0.0);
    expect("flexrun_runs_started_total", 3.0);
    expect(r#"flexrun_runs_ended_total{status="completed",code=""}"#, 2.0);
    expect(r#"flexrun_runs_ended_total{status="cancelled",code="cancelled"}"#, 1.0);
    expect(r#"flexrun_replans_total{reason="goal_condition_failed"}"#, 1.0);
    // Planner: the repair run's two plans, the paused run's and the slow run's.
    expect(r#"flexrun_model_calls_total{purpose="planner",endpoint="default",model="test-model",outcome="ok"}"#, 4.0);
    // Capabilities: writer fails once (retried), writer, editor; the slow run's tagger.
    expect(
        r#"flexrun_model_calls_total{purpose="capability",endpoint="default",model="test-model",outcome="status"}"#,
        1.0,
    );
    expect(
        r#"flexrun_model_calls_total{purpose="capability",endpoint="default",model="test-model",outcome="ok"}"#,
        3.0,
    );
    // The one endpoint's breaker stayed closed (one failure is not five in a row).
    expect(r#"flexrun_model_endpoint_state{endpoint="default"}"#, 0.0);
    expect(r#"flexrun_capability_calls_total{agent_type="ai",outcome="model_error"}"#, 1.0);
    expect(r#"flexrun_capability_calls_total{agent_type="ai",outcome="ok"}"#, 3.0);
    expect(r#"flexrun_capability_call_duration_seconds_count{agent_type="ai"}"#, 4.0);
    expect(r#"flexrun_model_call_duration_seconds_count{purpose="planner"}"#, 4.0);
    // The slow call is in the 0.5 s bucket, not below it.
    expect(r#"flexrun_capability_call_duration_seconds_bucket{agent_type="ai",le="0.25"}"#, 3.0);
    expect(r#"flexrun_capability_call_duration_seconds_bucket{agent_type="ai",le="0.5"}"#, 4.0);
    expect(r#"flexrun_http_requests_total{route="/api/v1/flex/run.stream",status="400"}"#, 1.0);
    expect(r#"flexrun_http_requests_total{route="/api/v1/flex/run.stream",status="200"}"#, 3.0);
    expect(r#"flexrun_http_request_duration_seconds_count{route="/api/v1/flex/run.stream",status="200"}"#, 3.0);
    expect(r#"flexrun_http_request_duration_seconds_count{route="/api/v1/flex/run.stream",status="400"}"#, 1.0);
    assert!(sample(&after, "flexrun_db_commit_duration_seconds_count") >= 10.0, "{after}");
    assert!(sample(&after, "flexrun_db_writes_per_commit_count") >= 10.0, "{after}");
    assert!(after.contains("# HELP flexrun_runs_ended_total"), "metrics are described");
}

/// Every answered call's tokens by model and type, and its cost; a model the configuration does
/// not name is counted as `other` (a response names its model: labels stay a fixed set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_tokens_and_cost_by_model() {
    let usage = |prompt: u64, completion: u64| {
        json!({"prompt_tokens": prompt, "completion_tokens": completion,
               "prompt_tokens_details": {"cached_tokens": 100}, "completion_tokens_details": {"reasoning_tokens": 5}})
    };
    let model = StandIn::start(script(move |call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]).usage(usage(1_000, 200));
        }
        post(0.9).usage(usage(500, 40)).model("someone-elses-model")
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prices.toml");
    std::fs::write(&config, "[llm.prices.\"test-model\"]\ninput_per_mtok = 1.0\noutput_per_mtok = 10.0\n").unwrap();
    let config = config.display().to_string();
    let env = [("FLEXRUN_CONFIG", config.as_str())];
    let server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &env).await;
    let (_, response) = server.post_run(&envelope()).await;
    let frames = read_frames(response, usize::MAX).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed", "{:?}", kinds(&frames));

    let after = metrics(&server).await;
    let expect = |series: &str, value: f64| assert_eq!(sample(&after, series), value, "{series}\n{after}");
    expect(r#"flexrun_model_tokens_total{model="test-model",type="input"}"#, 1_000.0);
    expect(r#"flexrun_model_tokens_total{model="test-model",type="output"}"#, 200.0);
    expect(r#"flexrun_model_tokens_total{model="test-model",type="cached_input"}"#, 100.0);
    expect(r#"flexrun_model_tokens_total{model="test-model",type="reasoning"}"#, 5.0);
    expect(r#"flexrun_model_tokens_total{model="other",type="input"}"#, 500.0);
    // 1,000 × $1 + 200 × $10 per million; the writer's answer is priced as `test-model` (asked for).
    expect(r#"flexrun_model_cost_usd_total{model="test-model"}"#, 0.003);
    expect(r#"flexrun_model_cost_usd_total{model="other"}"#, 0.0009);
}

/// The cost gauge is the sum of the calls' costs in whole micro-dollars, as the runs' own totals
/// are: $0.00021 + $0.000105, three times, reads $0.000945 — not the float sum's
/// 0.0009450000000000001.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_gauge_adds_whole_micro_dollars() {
    let model = StandIn::start(script(|call| {
        if call.is_planner() {
            plan(&[("draft", "writer")]).usage(usage_block(1_000, 100, None, None))
        } else {
            post(0.9).usage(usage_block(500, 50, None, None))
        }
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prices.toml");
    std::fs::write(&config, "[llm.prices.\"test-model\"]\ninput_per_mtok = 0.15\noutput_per_mtok = 0.6\n").unwrap();
    let config = config.display().to_string();
    let env = [("FLEXRUN_CONFIG", config.as_str())];
    let server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &env).await;
    for _ in 0..3 {
        let (_, response) = server.post_run(&envelope()).await;
        let frames = read_frames(response, usize::MAX).await;
        assert_eq!(frames.last().unwrap().payload["usage"]["costUsd"], 0.000315, "{:?}", kinds(&frames));
    }
    let after = metrics(&server).await;
    assert_eq!(sample(&after, r#"flexrun_model_cost_usd_total{model="test-model"}"#), 0.000945, "{after}");
}

/// A series appears with its first known value: a model without a price has no cost series
/// (not one reading 0, which a dashboard would show as free), and tokens an endpoint never
/// reports (cached, reasoning) have none either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_usage_has_no_series_rather_than_zero() {
    // Input and output counted; cached and reasoning tokens not reported at all.
    let usage = usage_block(100, 20, None, None);
    let model = StandIn::start(script(move |call| {
        let reply = if call.is_planner() { plan(&[("draft", "writer")]) } else { post(0.9) };
        reply.usage(usage.clone())
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let (_, response) = server.post_run(&envelope()).await;
    let frames = read_frames(response, usize::MAX).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed", "{:?}", kinds(&frames));
    let after = metrics(&server).await;
    assert!(sample(&after, r#"flexrun_model_tokens_total{model="test-model",type="input"}"#) > 0.0, "{after}");
    assert!(!after.contains("flexrun_model_cost_usd_total{"), "no price, no cost series: {after}");
    assert!(!after.contains(r#"type="cached_input""#) && !after.contains(r#"type="reasoning""#), "{after}");
}

/// What stream backlogs hold goes back to 0 once their clients took it: the gauge follows the
/// frames taken out, not only those put in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_gauge_falls_back_when_streams_are_read() {
    let model = StandIn::start(model()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let (run_id, response) = server.post_run(&envelope()).await;
    let frames = read_frames(response, usize::MAX).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed", "{:?}", kinds(&frames));
    // Re-joined from the start, the stream is read from the log, through the backlog.
    assert_eq!(server.reattach(&run_id, 0).await.len(), frames.len());
    let mut after = metrics(&server).await;
    for _ in 0..50 {
        if sample(&after, "flexrun_open_streams") == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = metrics(&server).await;
    }
    assert_eq!(sample(&after, "flexrun_open_streams"), 0.0, "{after}");
    assert!(after.contains("\nflexrun_stream_backlog_bytes "), "frames were held: {after}");
    assert_eq!(sample(&after, "flexrun_stream_backlog_bytes"), 0.0, "{after}");
}

/// Runs that reach a limit of their budget are counted by limit and by what they did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_budgets_reached_by_limit_and_action() {
    let model = StandIn::start(script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer"), ("polish", "editor")]);
        }
        post(0.9)
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    for on_exceeded in ["fail", "pause", "pause"] {
        let mut envelope = envelope();
        envelope["policies"] = json!({"budget": {"maxModelCalls": 2, "onExceeded": on_exceeded}});
        let (_, response) = server.post_run(&envelope).await;
        let frames = read_frames(response, usize::MAX).await;
        assert!(kinds(&frames).contains(&"budget_exceeded"), "{:?}", kinds(&frames));
    }
    let after = metrics(&server).await;
    let expect = |series: &str, value: f64| assert_eq!(sample(&after, series), value, "{series}\n{after}");
    expect(r#"flexrun_budget_exceeded_total{limit="modelCalls",action="fail"}"#, 1.0);
    expect(r#"flexrun_budget_exceeded_total{limit="modelCalls",action="pause"}"#, 2.0);
    expect(r#"flexrun_runs_ended_total{status="failed",code="budget_exceeded"}"#, 1.0);
}

/// A caller may name its run's models (`policies.models`) among what the server serves, and the
/// `default` endpoint, listing none, serves any name: such a name is the caller's, not the
/// configuration's, and labels no series — callers would otherwise add series without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_name_a_caller_chose_labels_no_series() {
    let model = StandIn::start(script(|call| if call.is_planner() { plan(&[("draft", "writer")]) } else { post(0.9) }))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    for chosen in ["caller-chosen-1", "caller-chosen-2"] {
        let mut envelope = envelope();
        envelope["policies"] = json!({"models": {"planner": [format!("default/{chosen}")]}});
        let (_, response) = server.post_run(&envelope).await;
        let frames = read_frames(response, usize::MAX).await;
        assert_eq!(frames.last().unwrap().payload["status"], "completed", "{:?}", kinds(&frames));
    }
    let after = metrics(&server).await;
    assert!(!after.contains("caller-chosen"), "{after}");
    let expect = |series: &str, value: f64| assert_eq!(sample(&after, series), value, "{series}\n{after}");
    expect(r#"flexrun_model_calls_total{purpose="planner",endpoint="default",model="other",outcome="ok"}"#, 2.0);
    expect(
        r#"flexrun_model_calls_total{purpose="capability",endpoint="default",model="test-model",outcome="ok"}"#,
        2.0,
    );
    assert!(sample(&after, r#"flexrun_model_tokens_total{model="other",type="input"}"#) > 0.0, "{after}");
}

/// A price that is no price stops the server at start, naming the key.
#[tokio::test]
async fn a_negative_price_stops_the_server_naming_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prices.toml");
    std::fs::write(&config, "[llm.prices.\"gpt-x\"]\ninput_per_mtok = 1.0\noutput_per_mtok = -3\n").unwrap();
    let config = config.display().to_string();
    let env = [("FLEXRUN_CONFIG", config.as_str())];
    let (status, log) = ServerProcess::refused(dir.path(), "http://127.0.0.1:9/v1", &[], &env).await;
    assert!(!status.success());
    assert!(log.contains(r#"`llm.prices."gpt-x".output_per_mtok` = -3 is not a price"#), "{log}");
}
