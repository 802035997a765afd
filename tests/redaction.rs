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

/// The keys the policy names that the console and the API once showed, and two it always hid.
const SECRET_KEYS: [&str; 8] =
    ["key", "jwt", "clientId", "client_secret", "refresh_token", "x-api-key", "api_key", "password"];

/// An object with a value under each of [`SECRET_KEYS`], each value `<place>-hidden-<n>`.
fn secrets(place: &str) -> serde_json::Map<String, serde_json::Value> {
    SECRET_KEYS.iter().enumerate().map(|(n, key)| (key.to_string(), json!(format!("{place}-hidden-{n}")))).collect()
}

/// Each of [`SECRET_KEYS`], in a run's input, its output and its metadata, is hidden on the API,
/// its streams and every console page — the Re-run composer included, which says where values
/// were hidden. A key where `key` is not the last word (`key_points`) is shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_secret_key_is_hidden_on_the_api_its_streams_and_the_console() {
    let mut output = json!({"text": "a post", "quality_score": 0.9});
    output.as_object_mut().unwrap().extend(secrets("output"));
    let server = TestServer::start(planner_then(&[("draft", "writer")], Reply::json(output))).await;
    let mut envelope = envelope();
    envelope["inputs"]["brief"].as_object_mut().unwrap().extend(secrets("input"));
    envelope["inputs"]["brief"]["key_points"] = json!(["shown-point"]);
    envelope["metadata"] = json!(secrets("metadata"));

    let response = server.post_run(&envelope).await;
    let run_id = response.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
    let live = raw_stream(response).await;
    let stored: String = server.event_log_text(&run_id).concat();
    assert!(stored.contains("output-hidden-0") && stored.contains("output-hidden-7"), "the frames carry them");
    let reattached =
        raw_stream(server.http.get(server.url(&format!("/api/v1/flex/runs/{run_id}/stream"))).send().await.unwrap())
            .await;
    let mut read = vec![("run.stream".to_string(), live), ("stream".into(), reattached)];
    for path in [
        format!("/api/v1/flex/runs/{run_id}"),
        format!("/api/v1/flex/runs/{run_id}/events"),
        format!("/ui/runs/{run_id}"),
        format!("/ui/runs/{run_id}/events?before=100"),
        format!("/ui/new?from={run_id}"),
    ] {
        read.push((path.clone(), get_text(&server, &path).await));
    }
    for (path, text) in &read {
        assert!(!text.contains("-hidden-"), "{path} shows a secret: {text}");
        assert!(text.contains("[redacted]"), "{path} marks what it hid");
    }
    let (document, composer) = (&read[2].1, &read[6].1);
    assert!(document.contains("shown-point") && composer.contains("shown-point"), "key_points is no secret");
    // The composer says which values were hidden: they are typed again before Launch.
    assert!(composer.contains(r#"data-testid="hidden-values""#), "{composer}");
    for key in SECRET_KEYS {
        assert!(composer.contains(&format!("<code>/inputs/brief/{key}</code>")), "{key} listed: {composer}");
        assert!(composer.contains(&format!("<code>/metadata/{key}</code>")), "{key} listed: {composer}");
    }
}
