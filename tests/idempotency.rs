//! `Idempotency-Key` on `run.stream`: one run per key and caller, its stream replayed for repeats.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::*;

const CALLER_A: &str = "caller-a";
const CALLER_B: &str = "caller-b";

fn keyed_options(dir: Option<Arc<tempfile::TempDir>>) -> Options {
    Options {
        env: vec![
            ("FLEXRUN_API_KEYS", format!("{CALLER_A},{CALLER_B}")),
            ("FLEXRUN_OPERATOR_KEYS", OPERATOR_KEY.into()),
        ],
        dir,
        ..Options::default()
    }
}

async fn post_keyed(server: &TestServer, caller: &str, key: &str, body: String) -> reqwest::Response {
    server
        .http
        .post(server.url("/api/v1/flex/run.stream"))
        .bearer_auth(caller)
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

fn run_id(response: &reqwest::Response) -> String {
    response.headers()["x-flexrun-run-id"].to_str().unwrap().to_string()
}

fn runs(server: &TestServer) -> i64 {
    server.count("SELECT COUNT(*) AS n FROM runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_key_replays_the_first_run_and_survives_a_restart() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let server =
        TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), keyed_options(Some(dir.clone()))).await;
    let first = post_keyed(&server, CALLER_A, "order-1", envelope().to_string()).await;
    assert_eq!(first.status(), 200);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let id = run_id(&first);
    let first = read_frames(first, usize::MAX).await;

    // The same content, serialised differently, is the same request.
    let again = post_keyed(&server, CALLER_A, "order-1", serde_json::to_string_pretty(&envelope()).unwrap()).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(run_id(&again), id);
    let replayed = read_frames(again, usize::MAX).await;
    assert_eq!(
        replayed.iter().map(|f| (f.seq, &f.kind)).collect::<Vec<_>>(),
        first.iter().map(|f| (f.seq, &f.kind)).collect::<Vec<_>>()
    );
    assert_eq!(runs(&server), 1);
    assert_eq!(server.planner_calls().len(), 1, "one run, planned once");
    server.stop().await;

    let restarted =
        TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), keyed_options(Some(dir))).await;
    let after_restart = post_keyed(&restarted, CALLER_A, "order-1", envelope().to_string()).await;
    assert_eq!(run_id(&after_restart), id);
    assert_eq!(read_frames(after_restart, usize::MAX).await.len(), first.len());
    assert_eq!(runs(&restarted), 1);
    assert_eq!(restarted.llm_calls().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reused_with_another_body_is_refused() {
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), keyed_options(None)).await;
    let first = post_keyed(&server, CALLER_A, "order-2", envelope().to_string()).await;
    let id = run_id(&first);
    let mut other = envelope();
    other["objective"] = json!("Something else entirely");
    let refused = post_keyed(&server, CALLER_A, "order-2", other.to_string()).await;
    assert_eq!(refused.status(), 422);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["code"], "idempotency_key_reused");
    assert!(error["error"]["message"].as_str().unwrap().contains(&id), "{error}");
    assert_eq!(runs(&server), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_belong_to_their_caller() {
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), keyed_options(None)).await;
    let a = post_keyed(&server, CALLER_A, "shared-key", envelope().to_string()).await;
    let b = post_keyed(&server, CALLER_B, "shared-key", envelope().to_string()).await;
    assert_eq!((a.status(), b.status()), (reqwest::StatusCode::OK, reqwest::StatusCode::OK));
    assert_ne!(run_id(&a), run_id(&b));
    assert_eq!(runs(&server), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_with_one_key_make_one_run() {
    let server =
        Arc::new(TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), keyed_options(None)).await);
    let requests = (0..8).map(|_| {
        let server = server.clone();
        tokio::spawn(async move {
            let response = post_keyed(&server, CALLER_A, "burst", envelope().to_string()).await;
            assert_eq!(response.status(), 200);
            let id = run_id(&response);
            let frames = read_frames(response, usize::MAX).await;
            assert_eq!(frames.last().unwrap().kind, "complete");
            id
        })
    });
    let ids: Vec<String> = futures::future::join_all(requests).await.into_iter().map(Result::unwrap).collect();
    assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
    assert_eq!(runs(&server), 1);
    assert_eq!(server.planner_calls().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_keys_are_rejected_and_create_nothing() {
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), keyed_options(None)).await;
    for key in ["", &"k".repeat(256), "two words"] {
        let response = post_keyed(&server, CALLER_A, key, envelope().to_string()).await;
        assert_eq!(response.status(), 400, "key {key:?}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "invalid_idempotency_key");
    }
    assert_eq!(runs(&server), 0);
}
