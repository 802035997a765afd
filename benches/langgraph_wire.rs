//! The LangGraph wire against the native one: `cargo bench --bench langgraph_wire`.
//!
//! One `flexrun serve` (release build, fresh SQLite file) serves both wires; the stand-in model
//! and the `http` capabilities' endpoint are in this process, on 127.0.0.1. Every run: a plan of
//! three `http` steps (fetch → analyze → tag), whose goal condition (`report.quality_score >=
//! 0.8`) fails; a repair plan keeps the three and adds three more (enrich → rewrite → review),
//! and the run completes — 2 planner calls and 6 capability calls, counted and checked for every
//! batch.
//!
//! The client is one Python program (`benches/langgraph_wire.py`, httpx, asyncio), as the
//! LangGraph SDK's users are: the native wire posts the envelope to `run.stream` and reads the
//! stream to its end; the LangGraph wire makes a thread (`POST /threads`) and reads
//! `POST /threads/{tid}/runs/stream` to its end. Batches of the two wires alternate on the one
//! server (native, LangGraph, native, … for `BENCH_ROUNDS` rounds at each level), so both see
//! the same phase of a shared machine; server CPU per run is read from /proc/<pid>/stat of the
//! server before and after each batch.
//!
//! The client is one process, so it runs on at most one core: its `client busy` column (its
//! CPU time over the batch's wall time) near 100 % means the batch went at the client's pace, and
//! a runs/s ratio of two such batches is the ratio of the client's own CPU per run on the two
//! wires — what the server spends shows in the CPU columns, not in runs/s.
//!
//! httpx (and sniffio) go into a venv of their own, `target/test-tools/bench-venv` (Debian's
//! python3 and python3-venv, pip from PyPI), installed here when missing; `BENCH_PYTHON` names
//! another interpreter that has them.
//!
//! Environment: `BENCH_RUNS` (runs per batch, default 400), `BENCH_LEVELS` (client concurrency,
//! default "1,32"), `BENCH_ROUNDS` (default 5), `BENCH_STREAM_MODES` (the LangGraph stream modes,
//! comma-separated, default `values`: the SDK's default), `BENCH_LANGGRAPH_START` (`thread`, the
//! default: `POST /threads` then the run, as above; `create`: the run alone, on a thread id the
//! client chooses, with `if_not_exists: create`), `BENCH_PIN=1` (server on its own
//! core), `BENCH_SERVER_BIN` (another server binary), `BENCH_WIRES` (default "native,langgraph";
//! one of them alone to profile the server under it: `perf record -p <the pid printed>`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use common::Server;
use flexrun::llm::standin::{self, Reply, StandIn};

/// The httpx the client is measured with.
const HTTPX_VERSION: &str = "0.28.1";

/// Installed beside httpx: without it, httpcore tries to import it for every connection lock it
/// sets up, and a failed import searches the whole module path each time (about a third of the
/// client's CPU per request here), which would weigh on the wire that makes two requests a run.
const SNIFFIO_VERSION: &str = "1.3.1";

/// The first plan, then the repair plan: the first three steps kept, three more.
const FIRST_PLAN: &[(&str, &str)] = &[("fetch", "http.fetch"), ("analyze", "http.analyze"), ("tag", "http.tag")];
const REPAIR_STEPS: &[(&str, &str)] =
    &[("enrich", "http.enrich"), ("rewrite", "http.rewrite"), ("review", "http.review")];

fn script() -> standin::Script {
    standin::script(|call| {
        let mut stages: Vec<(&str, &str)> = FIRST_PLAN.to_vec();
        if call.user.contains("### GOAL CONDITION REPAIR") {
            stages.extend(REPAIR_STEPS);
        }
        let nodes: Vec<Value> = stages.iter().map(|(s, c)| json!({"stage": s, "capabilityId": c})).collect();
        Reply::json(json!({"nodes": nodes}))
    })
}

/// The `http` capabilities: (id, input facets, output facets).
const CAPABILITIES: &[(&str, &[&str], &[&str])] = &[
    ("http.fetch", &["brief"], &["source"]),
    ("http.analyze", &["source"], &["report"]),
    ("http.tag", &["report"], &["tags"]),
    ("http.enrich", &["source"], &["notes"]),
    ("http.rewrite", &["report", "notes"], &["report"]),
    ("http.review", &["report"], &["review"]),
];

fn registration(id: &str, inputs: &[&str], outputs: &[&str], endpoint: &str) -> Value {
    json!({
        "capabilityId": id, "version": "1", "displayName": id, "summary": id, "kind": "execution",
        "agentType": "http", "endpoint": format!("{endpoint}/{id}"), "inputFacets": inputs, "outputFacets": outputs,
        "outputContract": {"mode": "json_schema", "schema": {"type": "object"}}
    })
}

/// What each capability's endpoint answers: `analyze` scores below the goal, `rewrite` above it.
fn answer(id: &str) -> Value {
    match id {
        "http.fetch" => json!({"url": "https://example.org/flexrun", "text": "flexrun runs LLM-planned agent runs"}),
        "http.analyze" => json!({"summary": "a first analysis", "quality_score": 0.6}),
        "http.tag" => json!({"tags": ["rust", "agents", "langgraph"]}),
        "http.enrich" => json!({"notes": ["replans until the goal holds", "two wires"]}),
        "http.rewrite" => json!({"summary": "a better analysis", "quality_score": 0.92}),
        _ => json!({"verdict": "ok"}),
    }
}

/// The endpoint every `http` capability posts to (`<base>/<capability id>`), counting its calls.
struct Endpoint {
    base: String,
    calls: Arc<AtomicUsize>,
    _handle: actix_web::dev::ServerHandle,
}

impl Endpoint {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/cap", listener.local_addr().unwrap());
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = actix_web::web::Data::new(calls.clone());
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new().app_data(counter.clone()).app_data(actix_web::web::PayloadConfig::new(1 << 20)).route(
                "/cap/{id}",
                actix_web::web::post().to(
                    |calls: actix_web::web::Data<Arc<AtomicUsize>>,
                     id: actix_web::web::Path<String>,
                     _: actix_web::web::Bytes| async move {
                        calls.fetch_add(1, Ordering::Relaxed);
                        actix_web::HttpResponse::Ok().json(answer(&id))
                    },
                ),
            )
        })
        .workers(1)
        .tcp_nodelay(true)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Self { base, calls, _handle: handle }
    }
}

fn envelope() -> Value {
    json!({
        "objective": "Analyse flexrun for platform engineers",
        "inputs": {"brief": {"topic": "flexrun", "audience": "platform engineers"}},
        "outputContract": {"mode": "facets", "facets": ["report", "tags"]},
        "goal_condition": [{"facet": "report", "path": "/quality_score",
                            "condition": {"jsonLogic": {">=": [{"var": "quality_score"}, 0.8]}}}]
    })
}

/// An interpreter with httpx: `BENCH_PYTHON`, or the bench's own venv, made when missing.
fn python() -> PathBuf {
    if let Ok(python) = std::env::var("BENCH_PYTHON") {
        return PathBuf::from(python);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-tools/bench-venv");
    let python = venv.join("bin/python");
    let check = format!(
        "import httpx, sniffio, sys; sys.exit(httpx.__version__ != '{HTTPX_VERSION}' or sniffio.__version__ != '{SNIFFIO_VERSION}')"
    );
    if Command::new(&python).args(["-c", &check]).status().is_ok_and(|s| s.success()) {
        return python;
    }
    eprintln!(
        "langgraph_wire: installing httpx {HTTPX_VERSION} and sniffio {SNIFFIO_VERSION} into {} (python3 -m venv, pip from PyPI)",
        venv.display()
    );
    let _ = std::fs::remove_dir_all(&venv);
    let made = Command::new("python3").args(["-m", "venv"]).arg(&venv).status();
    assert!(
        made.is_ok_and(|s| s.success()),
        "langgraph_wire: `python3 -m venv {}` failed: install Debian's python3 and python3-venv \
         (apt-get install python3 python3-venv), or set BENCH_PYTHON to a python with httpx",
        venv.display()
    );
    let pip = venv.join("bin/pip");
    let installed = Command::new(&pip)
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args([format!("httpx=={HTTPX_VERSION}"), format!("sniffio=={SNIFFIO_VERSION}")])
        .status();
    assert!(
        installed.is_ok_and(|s| s.success()),
        "langgraph_wire: pip could not install httpx {HTTPX_VERSION} and sniffio {SNIFFIO_VERSION} from PyPI into {}; \
         set BENCH_PYTHON to a python with both instead",
        venv.display()
    );
    python
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Wire {
    Native,
    LangGraph,
}

impl Wire {
    fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::LangGraph => "langgraph",
        }
    }
}

/// One batch's measurements.
#[derive(Clone, Copy, Debug)]
struct Batch {
    runs_per_second: f64,
    cpu_ms_per_run: f64,
    client_cpu_ms_per_run: f64,
    /// The client's CPU over the batch's wall time: near 1 (all of one core, as far as a Python
    /// process goes), runs/s are the client's pace, not the server's.
    client_busy: f64,
    events_per_run: f64,
    kib_per_run: f64,
}

struct Bench {
    python: PathBuf,
    client: PathBuf,
    envelope_file: PathBuf,
    modes: String,
    /// How a LangGraph run gets its thread: `thread` or `create` (`BENCH_LANGGRAPH_START`).
    start: String,
    server: Server,
    llm: StandIn,
    endpoint: Endpoint,
}

impl Bench {
    /// Runs one batch of `runs` over `wire` with `concurrency` clients, and checks that each run
    /// made its 2 planner calls and 6 capability calls.
    fn batch(&self, wire: Wire, runs: usize, concurrency: usize) -> Batch {
        let (model_before, calls_before) = (self.llm.calls().len(), self.endpoint.calls.load(Ordering::Relaxed));
        let cpu_before = self.server.cpu_seconds();
        let output = Command::new(&self.python)
            .arg(&self.client)
            .args([&self.server.base, wire.name(), &runs.to_string(), &concurrency.to_string()])
            .arg(&self.envelope_file)
            .arg(&self.modes)
            .arg(&self.start)
            .output()
            .expect("start the Python client");
        let cpu = self.server.cpu_seconds() - cpu_before;
        assert!(
            output.status.success(),
            "the {} batch failed: {}{}",
            wire.name(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let model_calls = self.llm.calls().len() - model_before;
        let capability_calls = self.endpoint.calls.load(Ordering::Relaxed) - calls_before;
        assert_eq!(
            (model_calls, capability_calls),
            (2 * runs, 6 * runs),
            "{} batch: each run makes 2 planner calls and 6 capability calls",
            wire.name()
        );
        let result: Value = serde_json::from_slice(&output.stdout).expect("the client's JSON line");
        let (seconds, runs) = (result["seconds"].as_f64().unwrap(), runs as f64);
        let client_cpu = result["client_cpu_seconds"].as_f64().unwrap();
        Batch {
            runs_per_second: runs / seconds,
            cpu_ms_per_run: cpu * 1000.0 / runs,
            client_cpu_ms_per_run: client_cpu * 1000.0 / runs,
            client_busy: client_cpu / seconds,
            events_per_run: result["events"].as_f64().unwrap() / runs,
            kib_per_run: result["bytes"].as_f64().unwrap() / 1024.0 / runs,
        }
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

fn spread(values: &[f64]) -> String {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.3} ({:.3}–{:.3})", median(values.to_vec()), min, max)
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    if std::env::var("BENCH_PIN").is_ok_and(|v| v == "1") {
        // Keep this process (the stand-ins and the client it starts) on CPU 0.
        let _ = Command::new("taskset").args(["-p", "-c", "0", &std::process::id().to_string()]).output();
    }
    let runs = env_number("BENCH_RUNS", 400);
    let rounds = env_number("BENCH_ROUNDS", 5);
    let levels: Vec<usize> = std::env::var("BENCH_LEVELS")
        .unwrap_or_else(|_| "1,32".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let modes = std::env::var("BENCH_STREAM_MODES").unwrap_or_else(|_| "values".into());
    let start = std::env::var("BENCH_LANGGRAPH_START").unwrap_or_else(|_| "thread".into());
    assert!(["thread", "create"].contains(&start.as_str()), "BENCH_LANGGRAPH_START is thread or create, not {start:?}");
    let wires: Vec<Wire> = std::env::var("BENCH_WIRES")
        .unwrap_or_else(|_| "native,langgraph".into())
        .split(',')
        .map(|name| match name.trim() {
            "native" => Wire::Native,
            "langgraph" => Wire::LangGraph,
            other => panic!("BENCH_WIRES lists native and langgraph, not {other:?}"),
        })
        .collect();
    let python = python();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let llm = StandIn::start(script()).unwrap();
        let endpoint = Endpoint::start();
        let dir = tempfile::tempdir().unwrap();
        let capabilities: Vec<Value> =
            CAPABILITIES.iter().map(|(id, inputs, outputs)| registration(id, inputs, outputs, &endpoint.base)).collect();
        let server = Server::start(dir.path(), &llm.base_url, &capabilities, &[]).await;
        let envelope_file = dir.path().join("envelope.json");
        std::fs::write(&envelope_file, envelope().to_string()).unwrap();
        let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/langgraph_wire.py");
        let bench = Bench { python, client, envelope_file, modes, start, server, llm, endpoint };
        // The client blocks this thread while the server, the stand-in model and the endpoint
        // answer on the runtime's other threads.
        tokio::task::block_in_place(|| {
            for wire in [Wire::Native, Wire::LangGraph] {
                bench.batch(wire, 50, 4); // warm-up
            }
            println!(
                "LangGraph stream modes: {}; LangGraph start: {}; {runs} runs per batch, {rounds} rounds, server pid {}\n",
                bench.modes,
                bench.start,
                bench.server.pid()
            );
            println!(
                "| round | clients | wire | runs/s | server CPU per run | client CPU per run | client busy | events per run | KiB per run |"
            );
            println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|");
            let mut results: Vec<(usize, Wire, Batch)> = Vec::new();
            for round in 1..=rounds {
                for &level in &levels {
                    for &wire in &wires {
                        let b = bench.batch(wire, runs, level);
                        println!(
                            "| {round} | {level} | {} | {:.0} | {:.3} ms | {:.3} ms | {:.0} % | {:.1} | {:.1} |",
                            wire.name(),
                            b.runs_per_second,
                            b.cpu_ms_per_run,
                            b.client_cpu_ms_per_run,
                            b.client_busy * 100.0,
                            b.events_per_run,
                            b.kib_per_run
                        );
                        results.push((level, wire, b));
                    }
                }
            }
            if wires.len() == 2 {
                summary(&levels, &results);
            }
            println!("\nserver peak memory (VmHWM): {:.1} MiB", bench.server.peak_rss_mib());
        });
    });
}

/// Medians and ranges over the rounds, per level and wire, and the ratios LangGraph / native:
/// of the medians, and the median of the rounds' own ratios (each round's two batches ran
/// back to back).
fn summary(levels: &[usize], results: &[(usize, Wire, Batch)]) {
    println!("\n| clients | wire | server CPU per run, ms: median (min–max) | runs/s: median (min–max) |");
    println!("|---:|---|---:|---:|");
    let of = |level: usize, wire: Wire, f: fn(&Batch) -> f64| -> Vec<f64> {
        results.iter().filter(|(l, w, _)| *l == level && *w == wire).map(|(_, _, b)| f(b)).collect()
    };
    for &level in levels {
        for wire in [Wire::Native, Wire::LangGraph] {
            println!(
                "| {level} | {} | {} | {} |",
                wire.name(),
                spread(&of(level, wire, |b| b.cpu_ms_per_run)),
                spread(&of(level, wire, |b| b.runs_per_second))
            );
        }
    }
    println!(
        "\n| clients | LangGraph / native: CPU per run (medians; median of rounds) | runs/s (medians; median of rounds) |"
    );
    println!("|---:|---:|---:|");
    for &level in levels {
        let ratios = |f: fn(&Batch) -> f64| {
            let (native, langgraph) = (of(level, Wire::Native, f), of(level, Wire::LangGraph, f));
            let of_medians = median(langgraph.clone()) / median(native.clone());
            let by_round: Vec<f64> = langgraph.iter().zip(&native).map(|(l, n)| l / n).collect();
            format!("{:.2}; {:.2}", of_medians, median(by_round))
        };
        println!("| {level} | {} | {} |", ratios(|b| b.cpu_ms_per_run), ratios(|b| b.runs_per_second));
    }
}
