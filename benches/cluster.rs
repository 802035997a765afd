//! Several flexrun nodes on one PostgreSQL: `cargo bench --features postgres --bench cluster`.
//!
//! Four parts (`BENCH_PARTS`, default `throughput,latency,failover,restart`), each on a new
//! database:
//!
//! - **throughput**: 1, 2 and 3 nodes (release `flexrun serve` processes); `BENCH_CLIENTS` clients
//!   (default 32) post `BENCH_RUNS` runs (default 600) round-robin over the nodes, each a two-step
//!   run read to `complete` on the node that took it. Runs/s and the nodes' CPU per run.
//! - **latency**: a run driven by node a, followed by a client on node b from its first frame;
//!   each step answers after 20 ms. For each frame, the time between its arrival at a's client
//!   and at b's client (`BENCH_LATENCY_RUNS` runs, default 100, 8 at a time).
//! - **failover**: node a is killed (SIGKILL) while a step is in flight; the time until node b has
//!   finished the run (`BENCH_FAILOVERS` times, default 3), with `BENCH_LEASE_SECONDS` (default 10).
//! - **restart**: a single node with the default node id and lease (30 s) is killed (SIGKILL)
//!   while a step is in flight and started again on its port; the time from the kill until the
//!   run completed, on PostgreSQL and, to compare, on SQLite (`BENCH_RESTARTS` times, default 3).
//!   `BENCH_SERVER_BIN` measures another build.
//!
//! PostgreSQL: `BENCH_POSTGRES_URL` (a server's `postgres` database), else a throw-away server
//! started with `scripts/postgres` for the bench. The model is a stand-in in this process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Bench code states what it expects.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use diesel::{Connection, RunQueryDsl};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use common::{Server, capability, run_to_completion};
use flexrun::llm::standin::{self, Reply, StandIn};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn envelope() -> Value {
    json!({
        "objective": "Write a post about flexrun",
        "inputs": {"brief": {"topic": "flexrun"}},
        "outputContract": {"mode": "facets", "facets": ["post_copy"]},
        "goal_condition": [{"facet": "post_copy", "path": "/quality_score",
                            "condition": {"jsonLogic": {">=": [{"var": "quality_score"}, 0.8]}}}]
    })
}

/// Plans draft (writer) → polish (editor); every step answers after `step`, except the first
/// editor call when `stall_first_polish` (it answers after ten minutes: the node dies first).
fn model(step: Duration, stall_first_polish: bool) -> StandIn {
    let polishes = AtomicUsize::new(0);
    StandIn::start(standin::script(move |call| {
        if call.is_planner() {
            return Reply::json(json!({"nodes": [{"stage": "draft", "capabilityId": "writer"},
                                                {"stage": "polish", "capabilityId": "editor"}]}));
        }
        let post = Reply::json(json!({"text": "post", "quality_score": 0.9}));
        if call.capability_id() == Some("editor") && stall_first_polish && polishes.fetch_add(1, Ordering::SeqCst) == 0
        {
            return post.after(Duration::from_secs(600));
        }
        if step.is_zero() { post } else { post.after(step) }
    }))
    .unwrap()
}

/// The PostgreSQL server the bench uses, and the throw-away one it started (stopped on drop).
struct Postgres {
    url: String,
    own: Option<tempfile::TempDir>,
}

impl Postgres {
    fn start() -> Self {
        if let Ok(url) = std::env::var("BENCH_POSTGRES_URL") {
            return Self { url, own: None };
        }
        let dir = tempfile::tempdir().unwrap();
        let output = script("start", dir.path());
        let url = output
            .lines()
            .find_map(|line| line.strip_prefix("FLEXRUN_TEST_POSTGRES_URL="))
            .unwrap_or_else(|| panic!("scripts/postgres start printed no URL:\n{output}"))
            .to_string();
        Self { url, own: Some(dir) }
    }

    /// A new database on the server: its URL.
    fn fresh(&self, name: &str) -> String {
        let name = format!("flexrun_bench_{name}_{}", std::process::id());
        let mut admin = diesel::PgConnection::establish(&self.url).unwrap();
        diesel::sql_query(format!("DROP DATABASE IF EXISTS {name}")).execute(&mut admin).unwrap();
        diesel::sql_query(format!("CREATE DATABASE {name}")).execute(&mut admin).unwrap();
        format!("{}/{name}", self.url.rsplit_once('/').unwrap().0)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(dir) = &self.own {
            script("stop", dir.path());
        }
    }
}

fn script(command: &str, dir: &Path) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/postgres");
    let output = std::process::Command::new(path).arg(command).arg(dir).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "scripts/postgres {command} (needs Debian's postgresql):\n{text}");
    text
}

/// The writer and the editor the model plays.
fn capabilities() -> [Value; 2] {
    [capability("writer", &["brief"], &["post_copy"]), capability("editor", &["post_copy"], &["post_copy"])]
}

/// `n` nodes on the database at `url`, each in a directory of `dirs`.
async fn nodes(n: usize, url: &str, model: &StandIn, lease: &str, dirs: &[tempfile::TempDir]) -> Vec<Server> {
    let mut servers = Vec::new();
    for (i, dir) in dirs.iter().enumerate().take(n) {
        let node = format!("node-{i}");
        let env = [("FLEXRUN_DATABASE_URL", url), ("FLEXRUN_NODE_ID", node.as_str()), ("FLEXRUN_LEASE_SECONDS", lease)];
        servers.push(Server::start(dir.path(), &model.base_url, &capabilities(), &env).await);
    }
    servers
}

fn directories(n: usize) -> Vec<tempfile::TempDir> {
    (0..n).map(|_| tempfile::tempdir().unwrap()).collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn throughput(pg: &Postgres) {
    let (clients, runs) = (env_or("BENCH_CLIENTS", 32usize), env_or("BENCH_RUNS", 600usize));
    println!("\n### Runs/s with 1, 2 and 3 nodes ({clients} clients, {runs} runs per level)\n");
    println!("| nodes | runs/s | flexrun CPU per run (all nodes) |");
    println!("|---:|---:|---:|");
    let model = model(Duration::ZERO, false);
    for n in 1..=3 {
        let url = pg.fresh(&format!("throughput{n}"));
        let dirs = directories(n);
        let servers = nodes(n, &url, &model, "30", &dirs).await;
        let bases: Arc<Vec<String>> = Arc::new(servers.iter().map(|s| s.base.clone()).collect());
        let body = Arc::new(envelope());
        let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build().unwrap();
        for i in 0..8 {
            run_to_completion(&http, &bases[i % n], &body).await; // warm-up
        }
        let cpu = |servers: &[Server]| servers.iter().map(Server::cpu_seconds).sum::<f64>();
        let (cpu_before, started) = (cpu(&servers), Instant::now());
        let gate = Arc::new(Semaphore::new(clients));
        let mut tasks = Vec::new();
        for i in 0..runs {
            let permit = gate.clone().acquire_owned().await.unwrap();
            let (bases, body, http) = (bases.clone(), body.clone(), http.clone());
            tasks.push(tokio::spawn(async move {
                run_to_completion(&http, &bases[i % bases.len()], &body).await;
                drop(permit);
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let elapsed = started.elapsed().as_secs_f64();
        let cpu_ms = (cpu(&servers) - cpu_before) * 1000.0 / runs as f64;
        println!("| {n} | {:.0} | {cpu_ms:.2} ms |", runs as f64 / elapsed);
    }
}

/// When each frame (by seq) of `response` arrived, until `complete`.
async fn arrivals(response: reqwest::Response) -> HashMap<u64, Instant> {
    let mut events = response.bytes_stream().eventsource();
    let mut seen = HashMap::new();
    while let Some(event) = events.next().await {
        let event = event.expect("SSE");
        let frame: Value = serde_json::from_str(&event.data).unwrap();
        seen.insert(frame["seq"].as_u64().unwrap(), Instant::now());
        if event.event == "complete" {
            break;
        }
    }
    seen
}

async fn latency(pg: &Postgres) {
    let runs = env_or("BENCH_LATENCY_RUNS", 100usize);
    let model = model(Duration::from_millis(20), false);
    let url = pg.fresh("latency");
    let dirs = directories(2);
    let servers = nodes(2, &url, &model, "30", &dirs).await;
    let (a, b) = (servers[0].base.clone(), servers[1].base.clone());
    let http = reqwest::Client::new();
    let gate = Arc::new(Semaphore::new(8));
    let mut tasks = Vec::new();
    for _ in 0..runs {
        let permit = gate.clone().acquire_owned().await.unwrap();
        let (http, a, b) = (http.clone(), a.clone(), b.clone());
        tasks.push(tokio::spawn(async move {
            let driven = http.post(format!("{a}/api/v1/flex/run.stream")).json(&envelope()).send().await.unwrap();
            let run_id = driven.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
            let followed = http.get(format!("{b}/api/v1/flex/runs/{run_id}/stream")).send().await.unwrap();
            // Frames committed before b's client attached come from the log, not live: left out.
            let attached = Instant::now();
            let (on_a, on_b) = tokio::join!(arrivals(driven), arrivals(followed));
            drop(permit);
            on_a.iter()
                .filter(|(_, at_a)| **at_a > attached)
                .filter_map(|(seq, at_a)| on_b.get(seq).map(|at_b| at_b.saturating_duration_since(*at_a)))
                .map(|d| d.as_secs_f64() * 1000.0)
                .collect::<Vec<f64>>()
        }));
    }
    let mut lags = Vec::new();
    for task in tasks {
        lags.extend(task.await.unwrap());
    }
    lags.sort_by(f64::total_cmp);
    println!("\n### Cross-node frame latency ({runs} runs driven on node a, followed on node b)\n");
    println!("| frames | p50 | p99 | max |");
    println!("|---:|---:|---:|---:|");
    println!(
        "| {} | {:.1} ms | {:.1} ms | {:.1} ms |",
        lags.len(),
        percentile(&lags, 0.5),
        percentile(&lags, 0.99),
        lags.last().copied().unwrap_or_default()
    );
}

/// Posts a run to the node at `base` and waits until its polish, which stalls (see [`model`]), is
/// in flight: the run's id.
async fn stalled_run(http: &reqwest::Client, base: &str, model: &StandIn) -> String {
    let response = http.post(format!("{base}/api/v1/flex/run.stream")).json(&envelope()).send().await.unwrap();
    let run_id = response.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
    while !model.calls().iter().any(|c| c.capability_id() == Some("editor")) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    run_id
}

async fn failover(pg: &Postgres) {
    let (times, lease) = (env_or("BENCH_FAILOVERS", 3usize), env_or("BENCH_LEASE_SECONDS", 10u64));
    println!("\n### Failover after kill -9 ({lease} s lease; sweeps every {} s)\n", lease as f64 / 5.0);
    println!("| try | from kill to run completed on node b |");
    println!("|---:|---:|");
    let http = reqwest::Client::new();
    for attempt in 1..=times {
        let model = model(Duration::ZERO, true);
        let url = pg.fresh(&format!("failover{attempt}"));
        let dirs = directories(2);
        let mut servers = nodes(2, &url, &model, &lease.to_string(), &dirs).await;
        let run_id = stalled_run(&http, &servers[0].base, &model).await;
        servers[0].kill();
        let killed = Instant::now();
        let follow = http.get(format!("{}/api/v1/flex/runs/{run_id}/stream", servers[1].base)).send().await.unwrap();
        arrivals(follow).await;
        println!("| {attempt} | {:.1} s |", killed.elapsed().as_secs_f64());
    }
}

async fn restart(pg: &Postgres) {
    let times = env_or("BENCH_RESTARTS", 3usize);
    println!("\n### One node killed with SIGKILL and restarted (default node id and lease)\n");
    println!("| try | PostgreSQL: from kill to run completed | SQLite: the same |");
    println!("|---:|---:|---:|");
    let http = reqwest::Client::new();
    for attempt in 1..=times {
        let url = pg.fresh(&format!("restart{attempt}"));
        let on_postgres = kill_and_restart(&http, &[("FLEXRUN_DATABASE_URL", &url)]).await;
        let on_sqlite = kill_and_restart(&http, &[]).await;
        println!("| {attempt} | {:.1} s | {:.1} s |", on_postgres.as_secs_f64(), on_sqlite.as_secs_f64());
    }
}

/// A single node with `env` (its database; SQLite in a directory of its own without one) killed
/// while a step is in flight and started again on its port: the time from the kill until its run
/// completed.
async fn kill_and_restart(http: &reqwest::Client, env: &[(&str, &str)]) -> Duration {
    let model = model(Duration::ZERO, true);
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &model.base_url, &capabilities(), env).await;
    let run_id = stalled_run(http, &server.base, &model).await;
    server.kill();
    let killed = Instant::now();
    server.restart().await;
    let follow = http.get(format!("{}/api/v1/flex/runs/{run_id}/stream", server.base)).send().await.unwrap();
    arrivals(follow).await;
    killed.elapsed()
}

fn main() {
    let parts = std::env::var("BENCH_PARTS").unwrap_or_else(|_| "throughput,latency,failover,restart".into());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let pg = Postgres::start();
        for part in parts.split(',').map(str::trim) {
            match part {
                "throughput" => throughput(&pg).await,
                "latency" => latency(&pg).await,
                "failover" => failover(&pg).await,
                "restart" => restart(&pg).await,
                other => panic!("unknown BENCH_PARTS entry `{other}`: throughput, latency, failover or restart"),
            }
        }
    });
}
