//! What an MCP server's failures and excesses show: a tool's error text reaches frames, the run's
//! log and the repair prompt bounded and without the registration's secrets (header values, the
//! bearer token, the URL's query string), even when the server quotes them back; a server listing
//! far more tools than are offered — or without end — has a bounded listing; a session that never
//! finishes opening holds neither the server's state nor a call past their deadlines; a result
//! over the response limit fails its step once, as an `http` capability's answer does. Real
//! servers on the official Python SDK (`tests/mcp/server.py`, `tests/mcp/server_modern.py`, some
//! misbehaving on purpose), the model stood in for.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use serde_json::{Value, json};
use support::mcp::McpProcess;
use support::process::ServerProcess;
use support::{Options, Reply, TestServer, frame_of, kinds, read_frames, script};

/// The variable flexrun reads the bearer token from: one the test process already has (setting
/// one would race with other threads reading the environment), its value the token.
const TOKEN_VARIABLE: &str = "PATH";
const HEADER_SECRET: &str = "hdr-secret-4711";
/// A credential in the query string of a registration's URL.
const QUERY_SECRET: &str = "LEAKME-1234";
/// A caller's (not an operator's) API key.
const CALLER_KEY: &str = "caller-test-key";

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
    let env = vec![("FLEXRUN_MCP_TOKEN_VARIABLES", TOKEN_VARIABLE.to_string())];
    let server = TestServer::start_with(planner, Options { capabilities: Vec::new(), env, ..Options::default() }).await;
    let registration = json!({"id": "py", "url": py.url(), "bearerTokenEnv": TOKEN_VARIABLE,
                              "headers": {"X-Team": HEADER_SECRET}, "outputFacets": {"add": "sum"}});
    register(&server, &registration).await;

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
    let server = bare_server().await;
    let registration = json!({"id": "many", "url": py.url()});
    let response = register(&server, &registration).await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["server"]["toolCount"], 500, "at most 500 tools are offered");
    // 1,013 listed (server.py's 13, then the 1,000 extra): the first 500 are read and offered,
    // and one line says where reading stopped.
    let refused = body["server"]["refusedTools"].as_array().unwrap();
    assert_eq!(
        refused,
        &[json!("the server lists more than 500 tools: `extra_487` and the tools after it are not offered")]
    );
    let listed = server.get_json("/api/v1/flex/mcp-servers").await;
    assert_eq!(listed["servers"][0]["refusedTools"], json!(refused));
}

/// A server that lists its tools page after page without end is read no further than the 500
/// tools flexrun offers: it is `ready` at once (not `unreachable` after the listing's deadline),
/// its listing says that there are more, and the 501st tool's name — 300,000 characters — is
/// quoted bounded, if at all, in the listing and not kept in the stored list.
#[tokio::test]
async fn a_server_paging_its_tools_without_end_offers_500_and_a_bounded_listing() {
    a_long_tool_list_is_read_within_bounds("forever").await;
}

/// The same for a list that ends, after 600 tools (twelve pages).
#[tokio::test]
async fn a_server_listing_600_tools_one_named_at_length_has_a_bounded_listing() {
    a_long_tool_list_is_read_within_bounds("12").await;
}

/// What an API answer may hold of the huge name: far less than this.
const HUGE_NAME_PIECE: &str =
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";

async fn a_long_tool_list_is_read_within_bounds(pages: &str) {
    let py = McpProcess::python_with_env(&[("MCP_TOOL_PAGES", pages)]).await;
    let server = bare_server().await;
    let registration = json!({"id": "paged", "url": py.url()});
    let response = register(&server, &registration).await;
    let text = response.text().await.unwrap();
    let shown = &text[..text.len().min(2000)];
    assert!(
        text.len() < 64 * 1024 && !text.contains(HUGE_NAME_PIECE),
        "a bounded answer, {} bytes: {shown}",
        text.len()
    );
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["server"]["state"], "ready", "{shown}");
    assert_eq!(body["server"]["toolCount"], 500, "at most 500 tools are offered");
    let refused = body["server"]["refusedTools"].as_array().unwrap();
    assert!(refused.iter().any(|r| r.as_str().unwrap().contains("more than 500 tools")), "{shown}");

    let listed = server.http.get(server.url("/api/v1/flex/mcp-servers")).send().await.unwrap().text().await.unwrap();
    assert!(listed.len() < 64 * 1024 && !listed.contains(HUGE_NAME_PIECE), "{} bytes", listed.len());
    tools_stored(&server).await;
    let small = server.count("SELECT COUNT(*) AS n FROM mcp_servers WHERE LENGTH(tools) < 200000");
    assert_eq!(small, 1, "the stored list holds no more than the tools offered");
}

/// A query string of a server's URL may hold a credential (registrations allow one; the listing's
/// `url` hides it): a server that cannot be reached shows why in its listing — to any caller —
/// without it.
#[tokio::test]
async fn an_unreachable_servers_error_shows_no_query_string_of_its_url() {
    let env = vec![
        ("FLEXRUN_API_KEYS", format!("caller:{CALLER_KEY}")),
        ("FLEXRUN_OPERATOR_KEYS", format!("ops:{}", support::OPERATOR_KEY)),
    ];
    let server = TestServer::start_with(
        script(|_| Reply::json(json!({"nodes": []}))),
        Options { capabilities: Vec::new(), env, ..Options::default() },
    )
    .await;
    let url = format!("http://127.0.0.1:{}/mcp?token={QUERY_SECRET}", support::process::free_port());
    let registration = json!({"id": "gone", "url": url});
    let response = server
        .http
        .post(server.url("/api/v1/flex/mcp-servers/register"))
        .bearer_auth(support::OPERATOR_KEY)
        .json(&registration)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let registered = response.text().await.unwrap();
    assert!(!registered.contains(QUERY_SECRET), "{registered}");

    let response =
        server.http.get(server.url("/api/v1/flex/mcp-servers")).bearer_auth(CALLER_KEY).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let listed: Value = response.json().await.unwrap();
    assert_eq!(listed["servers"][0]["state"], "unreachable", "{listed}");
    assert!(listed["servers"][0]["error"].as_str().is_some_and(|e| !e.is_empty()), "{listed}");
    assert!(!listed.to_string().contains(QUERY_SECRET), "{listed}");
}

/// A call that cannot reach its server says why in `retry` and `node_error` frames, which the
/// run's caller reads: without the URL's query string.
#[tokio::test]
async fn a_call_that_cannot_reach_its_server_shows_no_query_string_of_its_url() {
    let mut py = McpProcess::python().await;
    let plan = json!({"nodes": [{"stage": "add", "capabilityId": "py.add", "arguments": {"a": 2, "b": 3}}]});
    let server = TestServer::start_with(
        script(move |_| Reply::json(plan.clone())),
        Options { capabilities: Vec::new(), ..Options::default() },
    )
    .await;
    let registration = json!({"id": "py", "url": format!("{}?token={QUERY_SECRET}", py.url()),
                              "outputFacets": {"add": "sum"}});
    register(&server, &registration).await;
    py.kill();

    let frames = server.run(&add_envelope()).await;
    assert!(kinds(&frames).contains(&"retry"), "{:?}", kinds(&frames));
    let streamed: Vec<Value> = frames.iter().map(|f| f.payload.clone()).collect();
    let streamed = json!(streamed).to_string();
    assert!(!streamed.contains(QUERY_SECRET), "{streamed}");
}

/// Opening a session has one deadline, the subscription a 2026-07-28 session holds included: a
/// server that answers `subscriptions/listen` with an event stream and then says nothing is
/// `unreachable` after it, not `connecting` for ever.
#[tokio::test]
async fn a_server_that_never_acknowledges_its_subscription_is_unreachable_within_the_deadline() {
    let py = McpProcess::python_modern().await;
    py.silence_listen().await;
    let server = bare_server().await;
    let registration = json!({"id": "silent", "url": py.url()});
    let response = register(&server, &registration).await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["server"]["state"], "unreachable", "{body}");
    assert_eq!(body["server"]["error"], "no answer within 15s", "{body}");
}

/// A call that has to open a session counts the opening against its own timeout: with a server
/// that never acknowledges the subscription, the call fails as a timeout after `timeoutSecs` (and
/// is retried), not never. The tools are offered from the list stored while the server answered.
#[tokio::test]
async fn a_call_whose_session_never_opens_times_out_within_its_timeout() {
    let py = McpProcess::python_modern().await;
    let plan = json!({"nodes": [{"stage": "add", "capabilityId": "modern.add", "arguments": {"a": 2, "b": 3}}]});
    let options = || Options { capabilities: Vec::new(), ..Options::default() };
    let planner = move || {
        let plan = plan.clone();
        script(move |_| Reply::json(plan.clone()))
    };
    let first = TestServer::start_with(planner(), options()).await;
    let registration = json!({"id": "modern", "url": py.url(), "outputFacets": {"add": "sum"}, "timeoutSecs": 2});
    register(&first, &registration).await;
    tools_stored(&first).await;
    first.stop().await;

    py.silence_listen().await;
    let second = TestServer::start_with(planner(), Options { dir: Some(first.dir.clone()), ..options() }).await;
    let response = second.post_run(&add_envelope()).await;
    let frames = support::try_read_frames_within(response, usize::MAX, std::time::Duration::from_secs(60))
        .await
        .unwrap_or_else(|frames| panic!("the run hangs: {:?}", kinds(&frames)));
    let retry = frame_of(&frames, "retry");
    assert!(retry.payload["error"].as_str().unwrap().contains("timed out after 2s"), "{}", retry.payload);
    assert_eq!(frame_of(&frames, "node_error").payload["error"]["code"], "capability_timeout");
}

/// A run whose goal is `sum.total` = 5.
fn add_envelope() -> Value {
    json!({
        "objective": "Add numbers with a tool", "inputs": {},
        "outputContract": {"mode": "facets", "facets": ["sum"]},
        "goal_condition": [{"facet": "sum", "path": "/total", "condition": {"jsonLogic": {"==": [{"var": "total"}, 5]}}}]
    })
}

/// Header values are secrets: a registration refused for its headers says what is wrong and where
/// without quoting a value (a refused request's message is in the access log too), and a value no
/// HTTP request can carry — a line break — is refused when registered, not stored to fail later.
#[tokio::test]
async fn a_registration_refused_for_its_headers_quotes_no_value() {
    let server = bare_server().await;
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

/// The response limit the size tests run with (`limits.max_capability_response_bytes`).
const RESPONSE_LIMIT: usize = 100_000;
/// What `big`'s text is made of: twice over in a row, it is a piece of the result.
const BIG_PIECE: &str = "big-result-big-result-";

/// A tool's result over `limits.max_capability_response_bytes`, streamed as a server-sent event
/// (the Python SDK's default), fails its step with `capability_response_too_large` without a retry.
#[tokio::test]
async fn a_tool_result_over_the_size_limit_fails_its_step_once_without_a_retry() {
    a_result_over_the_limit_fails_once(McpProcess::python().await).await;
}

/// The same result answered as one JSON body (`application/json`) fails the same way.
#[tokio::test]
async fn a_tool_result_over_the_size_limit_in_one_json_body_fails_its_step_once_without_a_retry() {
    a_result_over_the_limit_fails_once(McpProcess::python_with_env(&[("MCP_JSON_RESPONSE", "1")]).await).await;
}

/// And so does one from a server of the 2026-07-28 revision (no session: each call stands alone).
#[tokio::test]
async fn a_tool_result_over_the_size_limit_over_2026_07_28_fails_its_step_once_without_a_retry() {
    a_result_over_the_limit_fails_once(McpProcess::python_modern().await).await;
}

/// Runs a plan calling `big` on `py` for three times the limit on a `flexrun serve` process, then
/// one calling `add`: the first fails with `capability_response_too_large` as an `http`
/// capability does — the tool called once (a call may have done something: it is not made
/// again), no retry, nothing of the result in a frame, the run's document or the log — and the
/// server's session serves the next run's call.
async fn a_result_over_the_limit_fails_once(py: McpProcess) {
    let big =
        json!({"nodes": [{"stage": "fetch", "capabilityId": "py.big", "arguments": {"size": 3 * RESPONSE_LIMIT}}]});
    let add = json!({"nodes": [{"stage": "add", "capabilityId": "py.add", "arguments": {"a": 2, "b": 3}}]});
    let llm = flexrun::llm::standin::StandIn::start(script(move |call| {
        Reply::json(if call.user.contains("Add numbers") { add.clone() } else { big.clone() })
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("limits.toml");
    std::fs::write(&config, format!("[limits]\nmax_capability_response_bytes = {RESPONSE_LIMIT}\n")).unwrap();
    let config = config.display().to_string();
    let server = ServerProcess::start(dir.path(), &llm.base_url, &[], &[("FLEXRUN_CONFIG", &config)]).await;
    let registration = json!({"id": "py", "url": py.url(), "outputFacets": {"add": "sum", "big": "text"}});
    let response =
        server.http.post(server.url("/api/v1/flex/mcp-servers/register")).json(&registration).send().await.unwrap();
    assert_eq!(response.status(), 201);

    let envelope = json!({"objective": "Fetch a big text with a tool", "inputs": {},
                          "outputContract": {"mode": "facets", "facets": ["text"]}});
    let (run_id, response) = server.post_run(&envelope).await;
    let frames = read_frames(response, usize::MAX).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "failed", "{:?}", kinds(&frames));
    let error = &frame_of(&frames, "node_error").payload["error"];
    assert_eq!(error["code"], "capability_response_too_large", "{error}");
    assert_eq!(error["message"], format!("capability response is larger than {RESPONSE_LIMIT} bytes"));
    assert!(!kinds(&frames).contains(&"retry"), "not retried: {:?}", kinds(&frames));
    let calls = py.calls().await;
    assert_eq!(calls.iter().filter(|c| c["tool"] == "big").count(), 1, "the tool is called once: {calls:?}");

    let streamed: Vec<Value> = frames.iter().map(|f| f.payload.clone()).collect();
    assert!(!json!(streamed).to_string().contains(BIG_PIECE), "nothing of the result in a frame");
    let document = server.http.get(server.url(&format!("/api/v1/flex/runs/{run_id}"))).send().await.unwrap();
    assert!(!document.text().await.unwrap().contains(BIG_PIECE), "nor in the run document");
    let log = server.log();
    assert!(!log.contains(BIG_PIECE), "nor in the log: {}", &log[log.len().saturating_sub(4000)..]);

    let envelope = json!({
        "objective": "Add numbers with a tool", "inputs": {},
        "outputContract": {"mode": "facets", "facets": ["sum"]},
        "goal_condition": [{"facet": "sum", "path": "/total", "condition": {"jsonLogic": {"==": [{"var": "total"}, 5]}}}]
    });
    let (_, response) = server.post_run(&envelope).await;
    let frames = read_frames(response, usize::MAX).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));
    let calls = py.calls().await;
    assert_eq!(calls.iter().filter(|c| c["tool"] == "big").count(), 1, "still called once: {calls:?}");
}

/// A server with no capabilities of its own, whose model plans nothing.
async fn bare_server() -> TestServer {
    TestServer::start_with(
        script(|_| Reply::json(json!({"nodes": []}))),
        Options { capabilities: Vec::new(), ..Options::default() },
    )
    .await
}

/// Registers an MCP server (the tests' client is an operator) and checks that it was taken.
async fn register(server: &TestServer, registration: &Value) -> reqwest::Response {
    let response =
        server.http.post(server.url("/api/v1/flex/mcp-servers/register")).json(registration).send().await.unwrap();
    assert_eq!(response.status(), 201);
    response
}

/// Waits for the server's registration to have its tool list stored (listing is in the background).
async fn tools_stored(server: &TestServer) {
    let mut stored = 0;
    for _ in 0..100 {
        stored = server.count("SELECT COUNT(*) AS n FROM mcp_servers WHERE tools IS NOT NULL");
        if stored == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(stored, 1, "the tool list is stored");
}
