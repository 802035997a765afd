//! The console with big data: `cargo bench --bench console`.
//!
//! Starts `flexrun serve` (release build) on a fresh SQLite file, runs one real run to `complete`,
//! then grows the database beside the server: that run's log to `BENCH_EVENTS` frames (5,000; `log`
//! frames before its `complete`), and `BENCH_RUNS` more runs (100,000) in the run table. Then asks
//! each page `BENCH_REQUESTS` times (200) in turn and reports the response time on loopback (the
//! server's time plus a loopback round trip) at p50 and p99: the run list's first page (plain,
//! filtered by a rare status, by objective text, by date), the big run's page, and its oldest
//! events.
//!
//! Environment: `BENCH_EVENTS`, `BENCH_RUNS`, `BENCH_REQUESTS`, `BENCH_SERVER_BIN` (another
//! server binary).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod common;

use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use serde_json::{Value, json};

use common::{Server, capability, run_to_completion};
use flexrun::llm::standin::{self, Reply, StandIn};

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn script() -> standin::Script {
    standin::script(|call| {
        if call.is_planner() {
            Reply::json(json!({"nodes": [{"stage": "draft", "capabilityId": "writer"}]}))
        } else {
            Reply::json(json!({"text": "a post", "quality_score": 0.9}))
        }
    })
}

fn envelope() -> Value {
    json!({
        "objective": "A run with a long log",
        "inputs": {"brief": {"topic": "flexrun"}},
        "outputContract": {"mode": "facets", "facets": ["post_copy"]},
    })
}

#[derive(QueryableByName)]
struct Frame {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    seq: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    frame: String,
}

/// Moves the run's `complete` frame to the end of `events` frames, with `log` frames before it.
fn grow_log(db: &mut SqliteConnection, run_id: &str, events: usize) {
    let frames: Vec<Frame> =
        diesel::sql_query(format!("SELECT seq, frame FROM run_events WHERE run_id = '{run_id}' ORDER BY seq"))
            .load(db)
            .unwrap();
    let complete = frames.last().unwrap();
    let mut last: Value = serde_json::from_str(&complete.frame).unwrap();
    let template = json!({"type": "log", "runId": run_id, "timestamp": last["timestamp"],
                          "correlationId": last["correlationId"],
                          "payload": {"severity": "info", "message": "progress of a long run"}});
    let first_log = complete.seq;
    let logs = events - frames.len();
    let mut sql = format!("BEGIN; DELETE FROM run_events WHERE run_id = '{run_id}' AND seq = {first_log};");
    let mut insert = |seq: i64, kind: &str, frame: &Value| {
        let text = frame.to_string().replace('\'', "''");
        sql.push_str(&format!(
            "INSERT INTO run_events (run_id, seq, event_type, frame, created_at) \
             VALUES ('{run_id}', {seq}, '{kind}', '{text}', CURRENT_TIMESTAMP);"
        ));
    };
    for i in 0..logs as i64 {
        let mut log = template.clone();
        log["seq"] = json!(first_log + i);
        insert(first_log + i, "log", &log);
    }
    let end = first_log + logs as i64;
    last["seq"] = json!(end);
    insert(end, "complete", &last);
    sql.push_str("COMMIT;");
    db.batch_execute(&sql).unwrap();
}

/// `runs` more completed runs, a few of them waiting for an operator, created over 100 days.
fn add_runs(db: &mut SqliteConnection, runs: usize) {
    let envelope = envelope().to_string();
    db.batch_execute(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {runs})
         INSERT INTO runs (run_id, status, objective, envelope, correlation_id, plan_version, planner_attempts,
                           goal_condition_replans, replans, created_at, updated_at, owner)
         SELECT printf('00000000-0000-7000-8000-%012d', i),
                CASE WHEN i % 10000 = 0 THEN 'awaiting_hitl' ELSE 'completed' END,
                printf('Seeded run %d about topic %d', i, i % 997), '{envelope}', printf('c-%d', i), 1, 1, 0, 0,
                datetime('2026-08-01', printf('+%d minutes', i * 1440 / 1000)),
                datetime('2026-08-01', printf('+%d minutes', i * 1440 / 1000)), 'anonymous'
         FROM n;"
    ))
    .unwrap();
}

/// Asks for `path` `requests` times and returns the response times, sorted.
async fn times(http: &reqwest::Client, base: &str, path: &str, requests: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(requests);
    for _ in 0..requests {
        let started = Instant::now();
        let response = http.get(format!("{base}{path}")).send().await.unwrap();
        let status = response.status();
        let body = response.bytes().await.unwrap();
        times.push(started.elapsed());
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body[..body.len().min(300)]));
    }
    times.sort();
    times
}

fn at(times: &[Duration], quantile: f64) -> f64 {
    let index = ((times.len() as f64 * quantile).ceil() as usize).clamp(1, times.len()) - 1;
    times[index].as_secs_f64() * 1_000.0
}

fn main() {
    let (events, runs, requests) =
        (env_number("BENCH_EVENTS", 5_000), env_number("BENCH_RUNS", 100_000), env_number("BENCH_REQUESTS", 200));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let model = StandIn::start(script()).unwrap();
        let writer = capability("writer", &["brief"], &["post_copy"]);
        let server = Server::start(dir.path(), &model.base_url, &[writer], &[]).await;
        let (run_id, _) = run_to_completion(&reqwest::Client::new(), &server.base, &envelope()).await;
        let mut db = SqliteConnection::establish(dir.path().join("bench.db").to_str().unwrap()).unwrap();
        db.batch_execute("PRAGMA busy_timeout = 10000;").unwrap();
        let seeding = Instant::now();
        grow_log(&mut db, &run_id, events);
        add_runs(&mut db, runs);
        eprintln!("seeded {events} events and {runs} runs in {:.1} s", seeding.elapsed().as_secs_f64());

        let http = reqwest::Client::new();
        let pages = [
            ("run list, first page".to_string(), "/ui/runs".to_string()),
            ("run list, status awaiting_hitl".into(), "/ui/runs?status=awaiting_hitl".into()),
            ("run list, objective contains text".into(), "/ui/runs?q=topic+996".into()),
            ("run list, one day".into(), "/ui/runs?from=2026-09-01&to=2026-09-01".into()),
            (format!("run page, {events} events"), format!("/ui/runs/{run_id}")),
            ("run's oldest events".into(), format!("/ui/runs/{run_id}/events?before=201")),
        ];
        println!("| page | p50 ms | p99 ms | requests |");
        println!("|---|---|---|---|");
        for (name, path) in &pages {
            times(&http, &server.base, path, 5).await; // warm up
            let times = times(&http, &server.base, path, requests).await;
            println!("| {name} | {:.1} | {:.1} | {requests} |", at(&times, 0.5), at(&times, 0.99));
        }
        model.stop().await;
    });
}
