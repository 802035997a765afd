//! What an MCP server's failures and excesses show: a tool's error text reaches frames, the run's
//! log and the repair prompt bounded and without the registration's secrets (header values, the
//! bearer token), even when the server quotes them back; a server listing far more tools than are
//! offered has a bounded listing. A real server on the official Python SDK (`tests/mcp/server.py`),
//! the model stood in for.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use serde_json::{Value, json};
use support::mcp::McpProcess;
use support::{Options, Reply, TestServer, frame_of, kinds, script};

/// The variable flexrun reads the bearer token from: one the test process already has (setting
/// one would race with other threads reading the environment), its value the token.
const TOKEN_VARIABLE: &str = "PATH";
const HEADER_SECRET: &str = "hdr-secret-4711";

#[tokio::test]
async fn a_tools_error_quoting_the_callers_credentials_shows_them_nowhere() {
    let py = McpProcess::python().await;
    let token = std::env::var(TOKEN_VARIABLE).expect("the test process has a PATH");
    let first = json!({"nodes": [
        {"stage": "check", "capabilityId": "py.refuse"},
        {"stage": "add", "capabilityId": "py.add", "arguments": {"a": 1, "b": 1}, "dependsOn": ["check"]},
    ]});
    let repaired = json!({"nodes": [{"stage": "add", "capabilityId": "py.add", "arguments": {"a": 2, "b": 3}}]});
    let planner = script(move |call| {
        Reply::json(if call.user.contains("### NODE ERROR REPAIR") { repaired.clone() } else { first.clone() })
    });
    let server = TestServer::start_with(planner, Options { capabilities: Vec::new(), ..Options::default() }).await;
    let registration = json!({"id": "py", "url": py.url(), "bearerTokenEnv": TOKEN_VARIABLE,
                              "headers": {"X-Team": HEADER_SECRET}, "outputFacets": {"add": "sum"}});
    let response =
        server.http.post(server.url("/api/v1/flex/mcp-servers/register")).json(&registration).send().await.unwrap();
    assert_eq!(response.status(), 201);

    let envelope = json!({
        "objective": "Add numbers with a tool", "inputs": {},
        "outputContract": {"mode": "facets", "facets": ["sum"]},
        "goal_condition": [{"facet": "sum", "path": "/total", "condition": {"jsonLogic": {"==": [{"var": "total"}, 5]}}}]
    });
    let frames = server.run(&envelope).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));
    let error = &frame_of(&frames, "node_error").payload["error"];
    assert_eq!(error["code"], "tool_error");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("not allowed: authorization=Bearer [redacted] x-team=[redacted]"), "{message}");

    let secret_in = |text: &str| text.contains(&token) || text.contains(HEADER_SECRET);
    let streamed: Vec<Value> = frames.iter().map(|f| f.payload.clone()).collect();
    assert!(!secret_in(&json!(streamed).to_string()), "no secret in a frame");
    assert!(!server.event_log_text(&frames[0].run_id).iter().any(|f| secret_in(f)), "nor in the run's log");
    let repair = &server.planner_calls()[1].user;
    assert!(repair.contains("### NODE ERROR REPAIR") && !secret_in(repair), "nor in the repair prompt: {repair}");
    let document = server.get_json(&format!("/api/v1/flex/runs/{}", frames[0].run_id)).await;
    assert!(!secret_in(&document.to_string()), "nor in the run document");
}

#[tokio::test]
async fn a_server_listing_a_thousand_tools_too_many_has_a_bounded_listing() {
    let py = McpProcess::python_with_env(&[("MCP_EXTRA_TOOLS", "1000")]).await;
    let server = TestServer::start_with(
        script(|_| Reply::json(json!({"nodes": []}))),
        Options { capabilities: Vec::new(), ..Options::default() },
    )
    .await;
    let registration = json!({"id": "many", "url": py.url()});
    let response =
        server.http.post(server.url("/api/v1/flex/mcp-servers/register")).json(&registration).send().await.unwrap();
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["server"]["toolCount"], 500, "at most 500 tools are offered");
    let refused = body["server"]["refusedTools"].as_array().unwrap();
    assert_eq!(refused.len(), 21, "twenty reasons, then how many more: {:?}", &refused[..3]);
    assert!(refused[0].as_str().unwrap().contains("more than 500 tools"), "{}", refused[0]);
    assert_eq!(refused[20], "… and 492 more tools not offered");
    let listed = server.get_json("/api/v1/flex/mcp-servers").await;
    assert_eq!(listed["servers"][0]["refusedTools"].as_array().unwrap().len(), 21);
}

/// Header values are secrets: a registration refused for its headers says what is wrong and where
/// without quoting a value (a refused request's message is in the access log too), and a value no
/// HTTP request can carry — a line break — is refused when registered, not stored to fail later.
#[tokio::test]
async fn a_registration_refused_for_its_headers_quotes_no_value() {
    let server = TestServer::start_with(
        script(|_| Reply::json(json!({"nodes": []}))),
        Options { capabilities: Vec::new(), ..Options::default() },
    )
    .await;
    let secret = "sk-mcp-secret-31337";
    let many: serde_json::Map<String, Value> = (0..40).map(|i| (format!("X-H{i}"), json!(secret))).collect();
    for (headers, at) in [
        (json!(many), "/headers"),
        (json!({"X-Token": [secret]}), "/headers/X-Token"),
        (json!({"X-Token": format!("{secret}\r\nX-Injected: 1")}), "/headers/X-Token"),
    ] {
        let registration = json!({"id": "s", "url": "http://127.0.0.1:9/mcp", "headers": headers});
        let response =
            server.http.post(server.url("/api/v1/flex/mcp-servers/register")).json(&registration).send().await.unwrap();
        assert_eq!(response.status(), 400, "{at}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["details"][0]["path"], at, "{body}");
        assert!(!body.to_string().contains(secret), "no header value in the answer: {body}");
    }
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM mcp_servers"), 0, "nothing stored");
}
