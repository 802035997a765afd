//! One redaction policy on every read path: a run's secrets are in its log (the run needs them)
//! but not in its stream, its re-attached stream, its events page, its document, and a capability's
//! endpoint credentials and query string are not in the capability list.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use futures::StreamExt;
use serde_json::json;
use support::*;

const INPUT_SECRET: &str = "sk-input-secret-4711";
const OUTPUT_SECRET: &str = "sk-output-secret-0815";
const OPERATOR_MARKED: &str = "tenant-secret-2024";

/// Every SSE `data:` text of a response, as sent.
async fn raw_stream(response: reqwest::Response) -> String {
    let mut text = String::new();
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    text
}

async fn get_text(server: &TestServer, path: &str) -> String {
    server.http.get(server.url(path)).bearer_auth(OPERATOR_KEY).send().await.unwrap().text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_read_path_shows_a_secret() {
    let output = json!({"text": "a post", "quality_score": 0.9, "accessToken": OUTPUT_SECRET,
                        "tenantId": OPERATOR_MARKED});
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("redaction.toml");
    std::fs::write(&config, "[redaction]\nextra_keys = [\"tenant\"]\n").unwrap();
    let options = Options { env: vec![("FLEXRUN_CONFIG", config.display().to_string())], ..Options::default() };
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], Reply::json(output)), options).await;
    let mut envelope = envelope();
    envelope["inputs"]["credentials"] = json!({"apiKey": INPUT_SECRET});

    let response = server.post_run(&envelope).await;
    let run_id = response.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
    let live = raw_stream(response).await;
    assert!(live.contains("event: complete"), "{live}");

    let stored: String = server.event_log_text(&run_id).concat();
    assert!(stored.contains(OUTPUT_SECRET), "the log keeps the value the run needed");

    let reattached = raw_stream(
        server
            .http
            .get(server.url(&format!("/api/v1/flex/runs/{run_id}/stream")))
            .bearer_auth(OPERATOR_KEY)
            .send()
            .await
            .unwrap(),
    )
    .await;
    let page = get_text(&server, &format!("/api/v1/flex/runs/{run_id}/events")).await;
    let document = get_text(&server, &format!("/api/v1/flex/runs/{run_id}")).await;
    for (path, text) in [("run.stream", &live), ("stream", &reattached), ("events", &page), ("run", &document)] {
        for secret in [INPUT_SECRET, OUTPUT_SECRET, OPERATOR_MARKED] {
            assert!(!text.contains(secret), "{path} shows {secret}");
        }
        assert!(text.contains("[redacted]"), "{path} marks what it hid");
    }
    assert!(page.contains("a post") && document.contains("a post"), "what is not secret is shown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capability_endpoints_are_listed_without_credentials_or_query() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let mut capability = http_capability(
        "http.lookup",
        &["brief"],
        &["facts"],
        json!({"type": "object"}),
        "http://127.0.0.1:9/lookup?token=qs-secret-9911",
    );
    capability["metadata"] = json!({"apiKey": "meta-secret-5566", "owner": "team-a"});
    let registered = server
        .http
        .post(server.url("/api/v1/flex/capabilities/register"))
        .bearer_auth(OPERATOR_KEY)
        .json(&capability)
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 201, "{:?}", registered.text().await);
    let list = get_text(&server, "/api/v1/flex/capabilities").await;
    for secret in ["qs-secret-9911", "meta-secret-5566"] {
        assert!(!list.contains(secret), "the list shows {secret}");
    }
    assert!(list.contains("http://127.0.0.1:9/lookup") && list.contains("team-a"), "{list}");
}
