//! The goal-repair scenario under load: `cargo bench --bench repair`.
//!
//! Starts `flexrun serve` as a child process (release build) on a fresh SQLite file, with a
//! zero-latency stand-in model in this process. Every run plans three steps, fails its goal
//! condition, is replanned once (three steps, two of them kept) and completes: 2 planner calls and
//! 4 capability calls per run. Reports, per client concurrency: runs/s, server CPU time per run
//! (from /proc of the server process), time to first frame, and the server's peak memory.
//!
//! Environment: `BENCH_RUNS` (runs per concurrency level, default 400), `BENCH_LEVELS` (default
//! "1,8,32"), `BENCH_PIN=1` (server on its own core), `BENCH_SERVER_BIN` (another server binary).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use common::{Server, capability};
use flexrun::llm::standin::{self, Reply, StandIn};

fn script() -> standin::Script {
    standin::script(|call| {
        if call.is_planner() {
            let stages = if call.user.contains("### GOAL CONDITION REPAIR") {
                json!([{"stage": "draft", "capabilityId": "writer"}, {"stage": "tags", "capabilityId": "tagger"},
                       {"stage": "final_polish", "capabilityId": "editor"}])
            } else {
                json!([{"stage": "draft", "capabilityId": "writer"}, {"stage": "tags", "capabilityId": "tagger"},
                       {"stage": "polish", "capabilityId": "editor"}])
            };
            return Reply::json(json!({"nodes": stages}));
        }
        match call.capability_id() {
            Some("tagger") => Reply::json(json!({"tags": ["rust", "agents"]})),
            Some("editor") if call.user.contains("Node: final_polish") => {
                Reply::json(json!({"text": "polished", "quality_score": 0.92}))
            }
            _ => Reply::json(json!({"text": "draft", "quality_score": 0.6})),
        }
    })
}

fn envelope() -> Value {
    json!({
        "objective": "Write a post about flexrun",
        "inputs": {"brief": {"topic": "flexrun", "audience": "platform engineers"}},
        "outputContract": {"mode": "facets", "facets": ["post_copy", "tags"]},
        "goal_condition": [{"facet": "post_copy", "path": "/quality_score",
                            "condition": {"jsonLogic": {">=": [{"var": "quality_score"}, 0.8]}}}]
    })
}

/// Runs one envelope to `complete`; returns the time to the first frame.
async fn one_run(http: &reqwest::Client, base: &str, body: &str) -> Duration {
    let started = Instant::now();
    let response = http
        .post(format!("{base}/api/v1/flex/run.stream"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("run.stream");
    assert_eq!(response.status(), 200);
    let mut events = response.bytes_stream().eventsource();
    let mut first = None;
    while let Some(event) = events.next().await {
        let event = event.expect("SSE");
        first.get_or_insert_with(|| started.elapsed());
        if event.event == "complete" {
            assert!(event.data.contains(r#""status":"completed""#), "run did not complete: {}", event.data);
            break;
        }
    }
    first.expect("at least one frame")
}

struct Level {
    concurrency: usize,
    runs: usize,
    runs_per_second: f64,
    cpu_ms_per_run: f64,
    ttff_p50_ms: f64,
    ttff_p99_ms: f64,
}

async fn level(server: &Server, concurrency: usize, runs: usize) -> Level {
    let http = reqwest::Client::builder().pool_max_idle_per_host(concurrency).build().unwrap();
    let body = Arc::new(envelope().to_string());
    let gate = Arc::new(Semaphore::new(concurrency));
    let cpu_before = server.cpu_seconds();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(runs);
    for _ in 0..runs {
        let permit = gate.clone().acquire_owned().await.unwrap();
        let (http, base, body) = (http.clone(), server.base.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let ttff = one_run(&http, &base, &body).await;
            drop(permit);
            ttff
        }));
    }
    let mut ttff = Vec::with_capacity(runs);
    for task in tasks {
        ttff.push(task.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = server.cpu_seconds() - cpu_before;
    ttff.sort();
    let pct = |p: f64| ttff[((ttff.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0;
    Level {
        concurrency,
        runs,
        runs_per_second: runs as f64 / elapsed,
        cpu_ms_per_run: cpu * 1000.0 / runs as f64,
        ttff_p50_ms: pct(0.5),
        ttff_p99_ms: pct(0.99),
    }
}

fn main() {
    if std::env::var("BENCH_PIN").is_ok_and(|v| v == "1") {
        // Keep this process (clients and stand-in model) on CPU 0.
        let _ = Command::new("taskset").args(["-p", "-c", "0", &std::process::id().to_string()]).output();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
        let levels: Vec<usize> = std::env::var("BENCH_LEVELS")
            .unwrap_or_else(|_| "1,8,32".into())
            .split(',')
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        let llm = StandIn::start(script()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let capabilities = [
            capability("writer", &["brief"], &["post_copy"]),
            capability("tagger", &["brief"], &["tags"]),
            capability("editor", &["post_copy"], &["post_copy"]),
        ];
        let server = Server::start(dir.path(), &llm.base_url, &capabilities, &[]).await;
        let http = reqwest::Client::new();
        level(&server, 4, 50).await; // warm-up
        let calls_before = llm.calls().len();
        println!("| clients | runs | runs/s | server CPU per run | time to first frame p50 / p99 |");
        println!("|---:|---:|---:|---:|---:|");
        let mut total_runs = 0;
        for concurrency in levels {
            let l = level(&server, concurrency, runs).await;
            total_runs += l.runs;
            println!(
                "| {} | {} | {:.0} | {:.3} ms | {:.2} / {:.2} ms |",
                l.concurrency, l.runs, l.runs_per_second, l.cpu_ms_per_run, l.ttff_p50_ms, l.ttff_p99_ms
            );
        }
        let calls = llm.calls().len() - calls_before;
        println!("\nmodel calls per run: {:.2}", calls as f64 / total_runs as f64);
        println!("server peak memory (VmHWM): {:.1} MiB", server.peak_rss_mib());
        let metrics = http.get(format!("{}/metrics", server.base)).send().await.unwrap().text().await.unwrap();
        let value = |name: &str| {
            metrics.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0)
        };
        let (sum, count) = (value("flexrun_db_writes_per_commit_sum"), value("flexrun_db_writes_per_commit_count"));
        println!("database: {:.0} commits, {:.2} writes per commit on average", count, sum / count.max(1.0));
    });
}
