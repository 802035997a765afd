//! The MCP test servers themselves (tests/support/mcp.rs): each starts on loopback and answers
//! MCP over Streamable HTTP, checked with a bare JSON-RPC client over reqwest — not the client
//! flexrun uses — so what these tests pin (the tool lists, how `_meta` reaches the Python server,
//! a restart forgetting the session) is the servers' behaviour, not flexrun's.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code states what it expects.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use support::mcp::McpProcess;

const PROTOCOL: &str = "2025-11-25";

/// An MCP session as a client opens it by hand: `initialize`, its `Mcp-Session-Id`, then
/// `notifications/initialized`.
struct Session {
    http: reqwest::Client,
    url: String,
    id: String,
    next_id: AtomicU64,
}

impl Session {
    async fn open(url: &str) -> Self {
        let http = support::http_client();
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "flexrun-tests", "version": "0"}}});
        let response = post(&http, url, None, &initialize).await;
        assert_eq!(response.status(), 200, "initialize");
        let id = response.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let answer = answer_to(response, 0).await;
        assert_eq!(answer["result"]["protocolVersion"], PROTOCOL, "{answer}");
        let session = Self { http, url: url.to_string(), id, next_id: AtomicU64::new(1) };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = post(&session.http, url, Some(&session.id), &initialized).await;
        assert_eq!(response.status(), 202, "notifications/initialized");
        session
    }

    /// Sends a request in this session: its result (panics on a JSON-RPC error).
    async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = post(&self.http, &self.url, Some(&self.id), &body).await;
        assert_eq!(response.status(), 200, "{method}");
        let answer = answer_to(response, id).await;
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }
}

async fn post(http: &reqwest::Client, url: &str, session: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = http.post(url).header("accept", "application/json, text/event-stream").json(body);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session).header("mcp-protocol-version", PROTOCOL);
    }
    request.send().await.expect("POST to the MCP server")
}

/// The JSON-RPC response with `id` in an answer: a JSON body, or one SSE `data:` event among
/// others on a stream — notifications, requests to the client, and the npm server's first event,
/// an id with empty data (a point to resume the stream from).
async fn answer_to(response: reqwest::Response, id: u64) -> Value {
    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
    if content_type.starts_with("application/json") {
        return response.json().await.unwrap();
    }
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    let mut events = response.bytes_stream().eventsource();
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            let event = event.unwrap();
            if event.data.is_empty() {
                continue;
            }
            let message: Value = serde_json::from_str(&event.data).unwrap();
            if message["id"] == id {
                return message;
            }
        }
        panic!("the stream ended without the answer to {id}");
    });
    found.await.expect("the answer within 10 s")
}

/// The tools of tests/mcp/server.py.
const PYTHON_TOOLS: [&str; 13] = [
    "add",
    "fail",
    "refuse",
    "wipe",
    "slow",
    "slow_once",
    "hold",
    "bad_output",
    "auth_ok",
    "add_tool",
    "remove_tool",
    "ask",
    "big",
];

fn tool_names(list: &Value) -> Vec<&str> {
    list["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect()
}

fn sorted(mut names: Vec<&str>) -> Vec<&str> {
    names.sort_unstable();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everything_server_lists_its_tools_and_dies_with_its_handle() {
    let server = McpProcess::everything().await;
    let session = Session::open(&server.url()).await;
    let list = session.request("tools/list", json!({})).await;
    let names = tool_names(&list);
    for name in ["echo", "get-sum", "get-structured-content"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let port = server.port();
    drop(server);
    let connect = tokio::net::TcpStream::connect(("127.0.0.1", port)).await;
    assert!(connect.is_err(), "nothing listens on {port} once the server is dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_server_records_calls_with_their_meta_and_restarts_afresh() {
    let mut server = McpProcess::python().await;
    let session = Arc::new(Session::open(&server.url()).await);
    let list = session.request("tools/list", json!({})).await;
    assert_eq!(sorted(tool_names(&list)), sorted(PYTHON_TOOLS.to_vec()));

    let params = json!({"name": "add", "arguments": {"a": 2, "b": 3}, "_meta": {"flexrun/runId": "r1"}});
    let result = session.request("tools/call", params).await;
    assert_eq!(result["structuredContent"], json!({"total": 5}), "{result}");
    assert_ne!(result["isError"], true, "{result}");
    // `_meta` arrives as sent, keys and all, and nothing else is added to it.
    let add = json!({"tool": "add", "arguments": {"a": 2, "b": 3}, "meta": {"flexrun/runId": "r1"}});
    assert_eq!(server.calls().await, [add]);

    // A held call ends when released.
    let held = tokio::spawn({
        let session = session.clone();
        async move { session.request("tools/call", json!({"name": "hold", "arguments": {"key": "k1"}})).await }
    });
    while server.calls().await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!held.is_finished(), "hold waits for its release");
    server.release("k1").await;
    let result = held.await.unwrap();
    assert_eq!(result["content"][0]["text"], "released k1", "{result}");

    // A restarted server has forgotten its sessions (HTTP 404, the cue to initialize again) and
    // its calls.
    server.restart().await;
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list", "params": {}});
    let stale = post(&session.http, &server.url(), Some(&session.id), &body).await;
    assert_eq!(stale.status(), 404, "a session of the previous process");
    assert_eq!(server.calls().await, Vec::<Value>::new());
    let list = Session::open(&server.url()).await.request("tools/list", json!({})).await;
    assert_eq!(sorted(tool_names(&list)), sorted(PYTHON_TOOLS.to_vec()));
}
