//! Many runs open on one node at once: `cargo bench --bench open_runs`.
//!
//! Starts `flexrun serve` (release build, or `BENCH_SERVER_BIN`) on a fresh SQLite file, or on a
//! new database of `BENCH_POSTGRES_URL` (a server's `postgres` database; build with
//! `--features postgres`), with a stand-in model in this process that answers every call after
//! `BENCH_MODEL_DELAY_MS` (default 1000). `BENCH_OPEN_RUNS` clients (default 10,000) each post a
//! run to `run.stream` and read its SSE stream to `complete`. Every run is a chain of
//! `BENCH_STEPS` steps (default 2): a plan and two steps, three model calls. The server sends at
//! most `llm.max_concurrent_calls` (256) at once, so with 10,000 runs the calls queue and every
//! run is open before the first one ends; the peak-open column checks it.
//!
//! `BENCH_HTTP2=1`: the clients speak HTTP/2 (h2c), their streams multiplexed on few connections,
//! instead of a connection per run.
//!
//! Checks, for every run: the frames arrive with `id` 1, 2, 3 … without a gap or a repeat, every
//! step completes once, the run completes. Reports: how many runs were open at the peak (started,
//! not yet complete), errors, the server's RSS (sampled, and its peak), open descriptors and
//! threads, and how long opening and finishing took.
//!
//! The clients need a descriptor a run in this process, and so does the server: the bench raises
//! its soft limit to the hard one (the server inherits it) and fails when that is too low.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Bench code states what it expects.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use common::{Server, capability};
use flexrun::llm::standin::{self, Reply, StandIn};

/// Posts whose response headers have not arrived yet: the server reads at most
/// `limits.max_concurrent_body_reads` (32) bodies at once and answers 503 beyond that.
const POSTS_IN_FLIGHT: usize = 32;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn envelope() -> Value {
    json!({
        "objective": "Write a post about flexrun",
        "inputs": {"brief": {"topic": "flexrun"}},
        "outputContract": {"mode": "facets", "facets": ["post_copy"]},
    })
}

/// Plans writer → editor × (steps − 1); every call is answered after `delay`.
fn model(steps: usize, delay: Duration) -> StandIn {
    let mut nodes = vec![json!({"stage": "draft", "capabilityId": "writer"})];
    nodes.extend((1..steps).map(|i| json!({"stage": format!("edit_{i}"), "capabilityId": "editor"})));
    let plan = Reply::json(json!({"nodes": nodes})).after(delay);
    let post = Reply::json(json!({"text": "post", "quality_score": 0.9})).after(delay);
    StandIn::start(standin::script(move |call| if call.is_planner() { plan.clone() } else { post.clone() })).unwrap()
}

/// Raises this process's descriptor limit (and so the server's, which inherits it) to the hard
/// limit; fails when that is too low for `runs` clients.
fn raise_descriptor_limit(runs: usize) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let Rlimit { maximum, .. } = getrlimit(Resource::Nofile);
    // A client connection per run, and the stand-in's side of the server's model calls (at most
    // `llm.max_concurrent_calls`, 256 by default, plus the idle ones it keeps).
    let needed = u64::try_from(runs).unwrap() + 2_000;
    let limit = maximum.unwrap_or(needed).min(1 << 20);
    assert!(
        limit >= needed,
        "{runs} runs need about {needed} descriptors in this process, the hard limit is {limit}: raise it (ulimit -Hn, as root)"
    );
    setrlimit(Resource::Nofile, Rlimit { current: Some(limit), maximum }).expect("raise the soft descriptor limit");
}

/// What one client saw.
#[derive(Default)]
struct Seen {
    frames: usize,
    /// `retry` frames: a transient failure (a model call refused or cut off under load) retried.
    retries: usize,
    steps_completed: usize,
    completed: bool,
    problem: Option<String>,
}

/// Counters every client shares.
#[derive(Default)]
struct Progress {
    started: AtomicUsize,
    open: AtomicUsize,
    peak_open: AtomicUsize,
    completed: AtomicUsize,
}

async fn one_run(
    http: reqwest::Client,
    base: String,
    body: Arc<String>,
    posts: Arc<Semaphore>,
    progress: Arc<Progress>,
) -> Seen {
    let mut seen = Seen::default();
    let permit = posts.acquire_owned().await.unwrap();
    let response = http
        .post(format!("{base}/api/v1/flex/run.stream"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await;
    drop(permit);
    let response = match response {
        Ok(r) if r.status() == 200 => r,
        Ok(r) => {
            seen.problem = Some(format!("status {}", r.status()));
            return seen;
        }
        Err(error) => {
            seen.problem = Some(format!("post: {error}"));
            return seen;
        }
    };
    let mut events = response.bytes_stream().eventsource();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                seen.problem = Some(format!("stream: {error}"));
                break;
            }
        };
        seen.frames += 1;
        if event.id != seen.frames.to_string() {
            seen.problem.get_or_insert_with(|| format!("frame {} has id {}", seen.frames, event.id));
        }
        match event.event.as_str() {
            "start" => {
                progress.started.fetch_add(1, Ordering::SeqCst);
                let open = progress.open.fetch_add(1, Ordering::SeqCst) + 1;
                progress.peak_open.fetch_max(open, Ordering::SeqCst);
            }
            "node_complete" => seen.steps_completed += 1,
            "retry" => seen.retries += 1,
            "complete" => {
                progress.open.fetch_sub(1, Ordering::SeqCst);
                progress.completed.fetch_add(1, Ordering::SeqCst);
                seen.completed = event.data.contains(r#""status":"completed""#);
                if !seen.completed {
                    seen.problem.get_or_insert_with(|| format!("run did not complete: {:.300}", event.data));
                }
                break;
            }
            _ => {}
        }
    }
    seen
}

/// VmRSS of `pid`, MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn count_entries(path: String) -> usize {
    std::fs::read_dir(path).map(|d| d.count()).unwrap_or(0)
}

fn main() {
    let runs = env_or("BENCH_OPEN_RUNS", 10_000usize);
    raise_descriptor_limit(runs);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let steps = env_or("BENCH_STEPS", 2usize);
        let delay = Duration::from_millis(env_or("BENCH_MODEL_DELAY_MS", 1000u64));
        let llm = model(steps, delay);
        let dir = tempfile::tempdir().unwrap();
        let capabilities =
            [capability("writer", &["brief"], &["post_copy"]), capability("editor", &["post_copy"], &["post_copy"])];
        let database = std::env::var("BENCH_POSTGRES_URL").ok().map(|url| fresh_postgres(&url));
        let env: Vec<(&str, &str)> = database.iter().map(|url| ("FLEXRUN_DATABASE_URL", url.as_str())).collect();
        let server = Server::start(dir.path(), &llm.base_url, &capabilities, &env).await;
        let pid = server.pid();
        let idle_rss = rss_mib(pid);

        let http2 = std::env::var("BENCH_HTTP2").is_ok_and(|v| v == "1");
        let http = if http2 {
            reqwest::Client::builder().http2_prior_knowledge().build().unwrap()
        } else {
            reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap()
        };
        let body = Arc::new(envelope().to_string());
        let posts = Arc::new(Semaphore::new(POSTS_IN_FLIGHT));
        let progress = Arc::new(Progress::default());
        let started = Instant::now();
        let tasks: Vec<_> = (0..runs)
            .map(|_| {
                let (http, base, body, posts, progress) =
                    (http.clone(), server.base.clone(), body.clone(), posts.clone(), progress.clone());
                tokio::spawn(one_run(http, base, body, posts, progress))
            })
            .collect();

        let (mut peak_rss, mut peak_fds, mut peak_threads, mut all_open_after) = (0f64, 0usize, 0usize, None);
        let sampler = {
            let progress = progress.clone();
            async move {
                loop {
                    peak_rss = peak_rss.max(rss_mib(pid));
                    peak_fds = peak_fds.max(count_entries(format!("/proc/{pid}/fd")));
                    peak_threads = peak_threads.max(count_entries(format!("/proc/{pid}/task")));
                    if all_open_after.is_none() && progress.started.load(Ordering::SeqCst) == runs {
                        all_open_after = Some(started.elapsed());
                    }
                    if progress.completed.load(Ordering::SeqCst) == runs {
                        return (peak_rss, peak_fds, peak_threads, all_open_after);
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        let sampling = tokio::spawn(tokio::time::timeout(Duration::from_secs(600), sampler));
        let mut problems = Vec::new();
        let (mut frames, mut retries) = (0, 0);
        for task in tasks {
            let seen = task.await.unwrap();
            frames += seen.frames;
            retries += seen.retries;
            if seen.steps_completed != steps && seen.problem.is_none() {
                problems.push(format!("{} of {steps} steps completed", seen.steps_completed));
            }
            problems.extend(seen.problem);
        }
        let elapsed = started.elapsed();
        let (peak_rss, peak_fds, peak_threads, all_open_after) = sampling
            .await
            .unwrap()
            .unwrap_or((f64::NAN, 0, 0, None));
        let after_rss = rss_mib(pid);

        println!("HTTP/{}", if http2 { "2 (h2c)" } else { "1.1" });
        println!("| runs | steps each | model delay | peak open | errors | frames | server RSS idle / peak / after | peak descriptors | peak threads | all open after | all done after |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        println!(
            "| {runs} | {steps} | {} ms | {} | {} | {frames} | {idle_rss:.0} / {peak_rss:.0} / {after_rss:.0} MiB | {peak_fds} | {peak_threads} | {} | {:.1} s |",
            delay.as_millis(),
            progress.peak_open.load(Ordering::SeqCst),
            problems.len(),
            all_open_after.map_or("never".to_string(), |d| format!("{:.1} s", d.as_secs_f64())),
            elapsed.as_secs_f64(),
        );
        println!("server peak memory (VmHWM): {:.1} MiB", server.peak_rss_mib());
        println!("retried model calls (a `retry` frame each): {retries}");
        for problem in problems.iter().take(10) {
            println!("problem: {problem}");
        }
    });
}

/// A new database on the PostgreSQL server at `url`: its URL.
#[cfg(feature = "postgres")]
fn fresh_postgres(url: &str) -> String {
    use diesel::{Connection, RunQueryDsl};
    let name = format!("flexrun_bench_open_runs_{}", std::process::id());
    let mut admin = diesel::PgConnection::establish(url).unwrap();
    diesel::sql_query(format!("DROP DATABASE IF EXISTS {name}")).execute(&mut admin).unwrap();
    diesel::sql_query(format!("CREATE DATABASE {name}")).execute(&mut admin).unwrap();
    format!("{}/{name}", url.rsplit_once('/').unwrap().0)
}

#[cfg(not(feature = "postgres"))]
fn fresh_postgres(_: &str) -> String {
    panic!("BENCH_POSTGRES_URL needs a build with --features postgres")
}
