//! Memory held for clients that do not read: `cargo bench --bench slow_readers`.
//!
//! Starts `flexrun serve` (release build, or `BENCH_SERVER_BIN` to measure another build) on a
//! fresh SQLite file with a stand-in model that plans `BENCH_STEPS` steps (default 30), each
//! answering 900 KB: a run whose log is about 27 MB. Then, for each way of reading a run, starts
//! the server afresh on that database, opens `BENCH_READERS` connections (default 100) that send
//! their request and read nothing, waits 5 s, and reports how much the server's resident memory
//! grew (and its peak, which includes what building the answers took while it lasted):
//!
//! - `stream`: `GET /api/v1/flex/runs/{id}/stream` (a replay from the start);
//! - `document`: `GET /api/v1/flex/runs/{id}`;
//! - `events`: `GET /api/v1/flex/runs/{id}/events?limit=1000`;
//! - `values`: the LangGraph join `GET /threads/{tid}/runs/{id}/stream?stream_mode=values`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Bench code states what it expects.

mod common;

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use common::{Server, capability, run_to_completion};
use flexrun::llm::standin::{self, Reply, StandIn};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn resident_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib / 1024.0
}

async fn idle_reader(address: &str, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes()).await.unwrap();
    stream
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let steps: usize = env_or("BENCH_STEPS", 30);
    let readers: usize = env_or("BENCH_READERS", 100);
    let nodes: Vec<Value> = (0..steps).map(|i| json!({"stage": format!("s{i}"), "capabilityId": "writer"})).collect();
    let plan = Reply::json(json!({"nodes": nodes}));
    let big = Reply::json(json!({"text": "x".repeat(900_000), "quality_score": 0.9}));
    let model = StandIn::start(standin::script(move |call| if call.is_planner() { plan.clone() } else { big.clone() }))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let writer = capability("writer", &["brief"], &["post_copy"]);
    let server = Server::start(dir.path(), &model.base_url, std::slice::from_ref(&writer), &[]).await;
    let http = reqwest::Client::new();
    // The thread first, as a LangGraph client makes it (so builds that made no thread for the
    // flex API's threadId can be joined too).
    let thread = http.post(format!("{}/threads", server.base)).json(&json!({"thread_id": "big-thread"})).send();
    assert_eq!(thread.await.unwrap().status(), 200);
    let envelope = json!({
        "objective": "Write a long post", "inputs": {"brief": {"topic": "flexrun"}},
        "outputContract": {"mode": "facets", "facets": ["post_copy"]},
        "constraints": {"threadId": "big-thread"},
    });
    let (run_id, kinds) = run_to_completion(&http, &server.base, &envelope).await;
    let mut server = Some(server);
    println!("a run of {} frames, {steps} outputs of 900 KB; {readers} idle readers of each kind", kinds.len());
    println!("{:<10} {:>12} {:>12} {:>10} {:>14}", "kind", "before MiB", "during MiB", "peak MiB", "MiB / reader");
    for (kind, path) in [
        ("stream", format!("/api/v1/flex/runs/{run_id}/stream")),
        ("document", format!("/api/v1/flex/runs/{run_id}")),
        ("events", format!("/api/v1/flex/runs/{run_id}/events?limit=1000")),
        ("values", format!("/threads/big-thread/runs/{run_id}/stream?stream_mode=values")),
    ] {
        // Each kind on a fresh process: what one kind allocated does not blur the next.
        drop(server.take());
        let fresh = server.insert(Server::start(dir.path(), &model.base_url, std::slice::from_ref(&writer), &[]).await);
        let (base, pid) = (fresh.base.clone(), fresh.pid());
        let address = base.trim_start_matches("http://").to_string();
        let before = resident_mib(pid);
        let mut idle = Vec::with_capacity(readers);
        for _ in 0..readers {
            idle.push(idle_reader(&address, &path).await);
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        let during = resident_mib(pid);
        let peak = server.as_ref().map_or(0.0, Server::peak_rss_mib);
        println!("{kind:<10} {before:>12.0} {during:>12.0} {peak:>10.0} {:>14.2}", (during - before) / readers as f64);
        drop(idle);
    }
    let base = server.as_ref().map(|s| s.base.clone()).unwrap_or_default();
    let health = http.get(format!("{base}/api/v1/health")).send().await.unwrap();
    assert_eq!(health.status(), 200, "the server still answers");
}
