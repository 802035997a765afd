//! A node sends at most `llm.max_concurrent_calls` model calls and
//! `http_capabilities.max_concurrent_calls` http capability calls at once, whatever the number of
//! open runs: the others wait for a free slot (counted in `flexrun_model_calls_waiting` and
//! `flexrun_http_capability_calls_waiting`) and every run still completes. The server is its own
//! process, so its metrics are this test's alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flexrun::llm::standin::{Script, StandIn};
use support::process::ServerProcess;
use support::*;

/// Calls in flight at a stand-in now, and the most there ever were.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl InFlight {
    /// One call: takes 300 ms, counted while it lasts.
    async fn call(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Plans `draft` (writer); every call is counted in `in_flight` ([`InFlight::call`]).
fn counting_model(in_flight: Arc<InFlight>) -> Script {
    Arc::new(move |call| {
        let in_flight = in_flight.clone();
        Box::pin(async move {
            in_flight.call().await;
            if call.is_planner() { plan(&[("draft", "writer")]) } else { post(0.9) }
        })
    })
}

/// An http capability endpoint on loopback that answers a post; every call is counted in
/// `in_flight` ([`InFlight::call`]). Its URL.
fn counting_endpoint(in_flight: Arc<InFlight>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/capability", listener.local_addr().unwrap());
    let server = actix_web::HttpServer::new(move || {
        let in_flight = in_flight.clone();
        actix_web::App::new().route(
            "/capability",
            actix_web::web::post().to(move || {
                let in_flight = in_flight.clone();
                async move {
                    in_flight.call().await;
                    actix_web::HttpResponse::Ok().json(serde_json::json!({"text": "post", "quality_score": 0.9}))
                }
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    tokio::spawn(server);
    url
}

/// The value of the gauge `name` on the server now (0 before it is first set).
async fn gauge(server: &ServerProcess, name: &str) -> f64 {
    let metrics = server.http.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

/// Starts six runs at once on a server whose limit is two calls, follows each to `complete`, and
/// returns the most calls the gauge `waiting` counted meanwhile; checks it counts none after.
async fn six_runs_through_two_slots(server: &ServerProcess, waiting: &str) -> f64 {
    let runs: Vec<_> = (0..6)
        .map(|_| {
            let (http, url) = (server.http.clone(), server.url("/api/v1/flex/run.stream"));
            tokio::spawn(async move {
                let response = http.post(url).json(&envelope()).send().await.unwrap();
                assert_eq!(response.status(), 200);
                read_frames(response, usize::MAX).await
            })
        })
        .collect();
    // The six runs make their call at about the same time: four wait while two are answered.
    let mut most_waiting = 0.0f64;
    for _ in 0..40 {
        most_waiting = most_waiting.max(gauge(server, waiting).await);
        if most_waiting >= 4.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for run in runs {
        let frames = run.await.unwrap();
        let complete = frames.last().expect("frames");
        assert_eq!(complete.kind, "complete");
        assert_eq!(complete.payload["status"], "completed", "{:?}", complete.payload);
    }
    assert_eq!(gauge(server, waiting).await, 0.0, "no call waits once the runs are done");
    most_waiting
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_calls_beyond_the_limit_wait_for_a_free_slot() {
    let in_flight = Arc::new(InFlight::default());
    let model = StandIn::start(counting_model(in_flight.clone())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let env = [("FLEXRUN_LLM_MAX_CONCURRENT_CALLS", "2")];
    let server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &env).await;

    let most_waiting = six_runs_through_two_slots(&server, "flexrun_model_calls_waiting").await;

    assert_eq!(model.calls().len(), 12, "a plan and a step for each of the six runs");
    assert_eq!(in_flight.most.load(Ordering::SeqCst), 2, "never more calls at once than slots, and both used");
    assert!((1.0..=4.0).contains(&most_waiting), "the gauge counted the calls waiting for a slot: {most_waiting}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_capability_calls_beyond_the_limit_wait_for_a_free_slot() {
    let in_flight = Arc::new(InFlight::default());
    let endpoint = counting_endpoint(in_flight.clone());
    let model = StandIn::start(planner_then(&[("draft", "http.writer")], post(0.9))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let schema = serde_json::json!({"type": "object"});
    let writer = http_capability("http.writer", &["brief"], &["post_copy"], schema, &endpoint);
    let env = [("FLEXRUN_HTTP_CAPABILITIES_MAX_CONCURRENT_CALLS", "2")];
    let server = ServerProcess::start(dir.path(), &model.base_url, &[writer], &env).await;

    let most_waiting = six_runs_through_two_slots(&server, "flexrun_http_capability_calls_waiting").await;

    assert_eq!(model.calls().len(), 6, "a plan for each of the six runs, no model call for the steps");
    assert_eq!(in_flight.most.load(Ordering::SeqCst), 2, "never more calls at once than slots, and both used");
    assert!((1.0..=4.0).contains(&most_waiting), "the gauge counted the calls waiting for a slot: {most_waiting}");
}
