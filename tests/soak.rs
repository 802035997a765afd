//! Soak test: many runs through a `flexrun serve` process while the model fails transiently on a
//! fifth of its calls and the server is killed (SIGKILL) and restarted several times. Clients post
//! with an `Idempotency-Key` and post again until they get an answer, so every run is created once.
//!
//! Every run must end `completed`, or `failed` with a code and a message; none may stay active; each
//! event log must be gap-free with one `complete` at its end; the server must not panic. The summary
//! line it prints is reported in docs/benchmarks.md. `SOAK_RUNS` changes the number of runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use diesel::{QueryableByName, RunQueryDsl};
use eventsource_stream::Eventsource;
use flexrun::llm::standin::{ChatCall, StandIn};
use futures::StreamExt;
use serde_json::{Value, json};
use support::process::ServerProcess;
use support::*;

const CLIENTS: usize = 16;
const FAULT_PERCENT: u64 = 20;
const KILLS: usize = 3;

/// A stable pseudo-random number for the n-th call (splitmix64).
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Plans draft → polish; fails `FAULT_PERCENT` of all calls with a transient fault.
fn faulty_model(calls: Arc<AtomicU64>, faults: Arc<AtomicU64>) -> StandIn {
    StandIn::start(script(move |call: &ChatCall| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let roll = mix(n);
        if roll % 100 < FAULT_PERCENT {
            faults.fetch_add(1, Ordering::SeqCst);
            return match (roll / 100) % 4 {
                0 => Reply::error(500, "injected fault"),
                1 => Reply::error(503, "injected overload"),
                2 => Reply::error_retry_after(429, "injected rate limit", "0.1"),
                _ => Reply::reset(),
            };
        }
        if call.is_planner() { plan(&[("draft", "writer"), ("polish", "editor")]) } else { post(0.9) }
    }))
    .unwrap()
}

/// Posts the envelope with `key` until the server answers (it may be down), then reads frames until
/// the stream ends or breaks. Returns the run id.
async fn client_run(http: &reqwest::Client, base: &str, key: &str, body: &Value) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "no answer to run.stream for {key}");
        let sent =
            http.post(format!("{base}/api/v1/flex/run.stream")).header("idempotency-key", key).json(body).send().await;
        let Ok(response) = sent else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        assert_eq!(response.status(), 200, "{key}");
        let run_id = response.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
        let mut events = response.bytes_stream().eventsource();
        while let Some(Ok(event)) = events.next().await {
            if event.event == "complete" {
                break;
            }
        }
        return run_id;
    }
}

#[derive(QueryableByName)]
struct RunState {
    #[diesel(sql_type = diesel::sql_types::Text)]
    run_id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    status: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    error: Option<String>,
}

fn run_states(db: &std::path::Path) -> Vec<RunState> {
    let mut conn = support::database::connect(db);
    diesel::sql_query("SELECT run_id, status, error FROM runs").load(&mut conn).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_with_faults_and_kills() {
    let runs: usize = std::env::var("SOAK_RUNS").ok().and_then(|n| n.parse().ok()).unwrap_or(300);
    let (calls, faults) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let model = faulty_model(calls.clone(), faults.clone());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path();
    let mut server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let base = server.base.clone();
    let mut body = envelope();
    body["policies"] = json!({"retry": {"maxRetries": 3, "baseDelay": 0.1}});
    let started = Instant::now();

    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (next, base, body) = (next.clone(), base.clone(), body.clone());
            tokio::spawn(async move {
                // Bounded waits: a request caught by a kill must fail, and be posted again with
                // its key, rather than wait forever (the server sends a comment every 15
                // seconds, so a live stream never goes quiet this long).
                let http = reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .read_timeout(Duration::from_secs(30))
                    .build()
                    .unwrap();
                let mut ids = Vec::new();
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= runs {
                        return ids;
                    }
                    ids.push(client_run(&http, &base, &format!("soak-{n}"), &body).await);
                }
            })
        })
        .collect();

    // Kill the server each time another share of the runs has been handed out.
    for kill in 1..=KILLS {
        while next.load(Ordering::SeqCst) < runs * kill / (KILLS + 1) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server.kill();
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.restart().await;
    }
    let mut ids: Vec<String> = Vec::new();
    for client in clients {
        ids.extend(client.await.unwrap());
    }
    // Runs whose clients lost their stream finish in the background.
    let deadline = Instant::now() + Duration::from_secs(120);
    while run_states(db).iter().any(|r| !matches!(r.status.as_str(), "completed" | "failed")) {
        assert!(Instant::now() < deadline, "runs still active two minutes after the last post");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed();

    let states = run_states(db);
    assert_eq!(states.len(), runs, "one run per idempotency key");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), runs);
    let mut retries = 0;
    let mut resumed = 0;
    let mut failures = std::collections::BTreeMap::<String, usize>::new();
    for state in &states {
        let log = event_log(db, &state.run_id);
        let seqs: Vec<u64> = log.iter().map(|(seq, ..)| *seq).collect();
        assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>(), "run {} has a gap", state.run_id);
        let completes = log.iter().filter(|(_, kind, _)| kind == "complete").count();
        assert_eq!((completes, log.last().map(|(_, kind, _)| kind.as_str())), (1, Some("complete")));
        retries += log.iter().filter(|(_, kind, _)| kind == "retry").count();
        resumed += log
            .iter()
            .filter(|(_, kind, frame)| kind == "log" && frame["payload"]["details"]["resumedFrom"].is_string())
            .count();
        if state.status == "failed" {
            let error: Value = serde_json::from_str(state.error.as_deref().unwrap()).unwrap();
            assert!(error["code"].is_string() && error["message"].is_string(), "{error}");
            *failures.entry(error["code"].as_str().unwrap().to_string()).or_default() += 1;
        }
    }
    let completed = states.iter().filter(|r| r.status == "completed").count();
    let log = server.log();
    assert!(!log.contains("panicked"), "{log}");
    eprintln!(
        "soak: {runs} runs in {:.1} s ({:.1} runs/s), {CLIENTS} clients, {KILLS} kills; model calls {}, \
         injected faults {}, retry frames {retries}, resumed runs {resumed}; completed {completed}, failed {} {failures:?}",
        elapsed.as_secs_f64(),
        runs as f64 / elapsed.as_secs_f64(),
        calls.load(Ordering::SeqCst),
        faults.load(Ordering::SeqCst),
        runs - completed,
    );
    assert!(completed * 10 >= runs * 9, "transient faults within the retry budget should rarely fail a run");
}
