//! Per-node cost against plan size: `cargo bench --bench wide_plan`.
//!
//! Starts `flexrun serve` (release build) with a zero-latency stand-in model whose plan is a chain
//! of N steps, each depending on the one before, so they run one at a time. Reports, per N: the
//! run's wall time, wall time and server CPU per node, and the model calls made (N + 1 planner
//! call). If per-node bookkeeping grew with the plan, the per-node columns would grow with N.
//!
//! Environment: `BENCH_NODES` (plan sizes, default "10,100,1000"), `BENCH_SERVER_BIN` (another
//! server binary).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod common;

use std::time::Instant;

use serde_json::{Value, json};

use common::{Server, capability, run_to_completion};
use flexrun::llm::standin::{self, Reply, StandIn};

/// A chain of `n` steps named `s0001`, `s0002`, … each depending on the one before.
fn chain(n: usize) -> Value {
    let nodes: Vec<Value> = (1..=n)
        .map(|i| {
            let mut node = json!({"stage": format!("s{i:04}"), "capabilityId": "step"});
            if i > 1 {
                node["dependsOn"] = json!([format!("s{:04}", i - 1)]);
            }
            node
        })
        .collect();
    json!({ "nodes": nodes })
}

fn script(n: usize) -> standin::Script {
    let plan = chain(n);
    standin::script(
        move |call| {
            if call.is_planner() { Reply::json(plan.clone()) } else { Reply::json(json!({"note": "done"})) }
        },
    )
}

fn envelope() -> Value {
    json!({
        "objective": "Take many small steps",
        "inputs": {"brief": {"topic": "flexrun"}},
        "outputContract": {"mode": "facets", "facets": ["notes"]},
    })
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let sizes: Vec<usize> = std::env::var("BENCH_NODES")
            .unwrap_or_else(|_| "10,100,1000".into())
            .split(',')
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        println!("| plan nodes | run wall time | wall time per node | server CPU per node | model calls |");
        println!("|---:|---:|---:|---:|---:|");
        for n in sizes {
            let llm = StandIn::start(script(n)).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let config = dir.path().join("limits.toml");
            std::fs::write(&config, format!("[limits]\nmax_plan_nodes = {}\n", n.max(1))).unwrap();
            let capabilities = [capability("step", &["brief"], &["notes"])];
            let env = [("FLEXRUN_CONFIG", config.to_str().unwrap())];
            let server = Server::start(dir.path(), &llm.base_url, &capabilities, &env).await;
            let cpu_before = server.cpu_seconds();
            let started = Instant::now();
            let (_, kinds) = run_to_completion(&reqwest::Client::new(), &server.base, &envelope()).await;
            let completed = kinds.iter().filter(|kind| *kind == "node_complete").count();
            let wall = started.elapsed().as_secs_f64();
            let cpu = server.cpu_seconds() - cpu_before;
            assert_eq!(completed, n, "every node completed");
            println!(
                "| {n} | {:.2} s | {:.2} ms | {:.2} ms | {} |",
                wall,
                wall * 1000.0 / n as f64,
                cpu * 1000.0 / n as f64,
                llm.calls().len()
            );
        }
    });
}
