//! MCP tools as capabilities, against real MCP servers on loopback: the npm reference server
//! (`@modelcontextprotocol/server-everything`) and a server written with the official Python SDK
//! (`tests/mcp/server.py`). `scripts/test` installs both.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::mcp::McpProcess;
use support::{Options, Reply, TestServer, frame_of, kinds, script};

/// The variable flexrun reads the bearer token from: one the test process already has (setting
/// one would race with other threads reading the environment), its value the token.
const TOKEN_VARIABLE: &str = "PATH";
const HEADER_SECRET: &str = "hdr-secret-0815";

/// The setting that lets registrations name [`TOKEN_VARIABLE`] (and the default `*_MCP_TOKEN`).
const TOKEN_VARIABLES: (&str, &str) = ("FLEXRUN_MCP_TOKEN_VARIABLES", "PATH, *_MCP_TOKEN");

/// A flexrun server with no capability of its own, whose planner always answers `plan`.
async fn flexrun(plan: Value) -> TestServer {
    let env = vec![(TOKEN_VARIABLES.0, TOKEN_VARIABLES.1.to_string())];
    let options = Options { capabilities: Vec::new(), env, ..Options::default() };
    TestServer::start_with(script(move |_| Reply::json(plan.clone())), options).await
}

async fn register(server: &TestServer, registration: Value) -> (u16, Value) {
    let response =
        server.http.post(server.url("/api/v1/flex/mcp-servers/register")).json(&registration).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

fn python_registration(py: &McpProcess) -> Value {
    json!({"id": "py", "url": py.url(), "bearerTokenEnv": TOKEN_VARIABLE, "headers": {"X-Team": HEADER_SECRET},
           "outputFacets": {"add": "sum", "auth_ok": "verified"}, "tools": {"deny": ["hold"]}, "timeoutSecs": 2})
}

fn token() -> String {
    std::env::var(TOKEN_VARIABLE).expect("the test process has a PATH")
}

async fn python_server() -> McpProcess {
    let token = token();
    McpProcess::python_with_env(&[("MCP_EXPECTED_TOKEN", token.as_str())]).await
}

fn envelope(goal_total: u64) -> Value {
    json!({
        "objective": "Add numbers with a tool",
        "inputs": {},
        "outputContract": {"mode": "facets", "facets": ["sum"]},
        "goal_condition": [{"facet": "sum", "path": "/total",
                            "condition": {"jsonLogic": {"==": [{"var": "total"}, goal_total]}}}]
    })
}

#[tokio::test]
async fn an_mcp_servers_tools_are_capabilities_listed_with_their_state_and_no_secret() {
    let everything = McpProcess::everything().await;
    let py = python_server().await;
    let server = flexrun(json!({"nodes": []})).await;

    let (status, body) = register(
        &server,
        json!({"id": "everything", "url": everything.url(), "tools": {"allow": ["echo", "get-sum"]}}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!((body["server"]["state"].as_str(), body["server"]["toolCount"].as_u64()), (Some("ready"), Some(2)));
    let (status, body) = register(&server, python_registration(&py)).await;
    assert_eq!((status, body["server"]["state"].as_str()), (201, Some("ready")), "{body}");

    let listed = server.get_json("/api/v1/flex/capabilities").await;
    let ids: Vec<&str> =
        listed["capabilities"].as_array().unwrap().iter().filter_map(|c| c["capabilityId"].as_str()).collect();
    assert!(
        ids.contains(&"everything.echo") && ids.contains(&"everything.get-sum") && ids.contains(&"py.add"),
        "{ids:?}"
    );
    assert!(!ids.contains(&"py.hold") && !ids.contains(&"everything.get-tiny-image"), "denied or not allowed: {ids:?}");
    let add = listed["capabilities"].as_array().unwrap().iter().find(|c| c["capabilityId"] == "py.add").unwrap();
    assert_eq!((add["agentType"].as_str(), add["outputFacets"].clone()), (Some("mcp"), json!(["sum"])));
    assert_eq!(add["registration"]["inputSchema"]["required"], json!(["a", "b"]));
    assert_eq!(add["registration"]["mcp"]["annotations"]["readOnlyHint"], true);

    let servers = server.get_json("/api/v1/flex/mcp-servers").await;
    let text = servers.to_string();
    assert!(!text.contains(&token()) && !text.contains(HEADER_SECRET), "{text}");
    let py_listing = servers["servers"].as_array().unwrap().iter().find(|s| s["id"] == "py").unwrap();
    assert_eq!(
        (py_listing["headers"].clone(), py_listing["bearerTokenEnv"].clone()),
        (json!(["X-Team"]), json!(TOKEN_VARIABLE))
    );
    assert_eq!(py_listing["protocol"], "2025-11-25");

    let page = server.http.get(server.url("/ui/capabilities")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"data-server-id="py""#) && page.contains("protocol 2025-11-25"), "{page}");
    assert!(page.contains(r#"data-capability-id="py.add""#));
    assert!(!page.contains(&token()) && !page.contains(HEADER_SECRET), "no secret on the console");
}

#[tokio::test]
async fn a_plan_calls_two_tools_one_reading_the_others_output_and_the_goal_holds() {
    let py = python_server().await;
    let plan = json!({"nodes": [
        {"stage": "first", "capabilityId": "py.add", "arguments": {"a": 2, "b": 3}},
        {"stage": "second", "capabilityId": "py.add", "arguments": {"a": {"$facet": "sum", "pointer": "/total"}, "b": 10}},
        {"stage": "auth", "capabilityId": "py.auth_ok"},
    ]});
    let server = flexrun(plan).await;
    assert_eq!(register(&server, python_registration(&py)).await.0, 201);

    let frames = server.run(&envelope(15)).await;
    let complete = frame_of(&frames, "complete");
    assert_eq!(complete.payload["status"], "completed", "{:?}", kinds(&frames));
    let outputs: Vec<(Option<&str>, &Value)> = frames
        .iter()
        .filter(|f| f.kind == "node_complete")
        .map(|f| (f.node_id.as_deref(), &f.payload["output"]))
        .collect();
    assert!(outputs.contains(&(Some("first"), &json!({"sum": {"total": 5}}))), "{outputs:?}");
    assert!(outputs.contains(&(Some("second"), &json!({"sum": {"total": 15}}))), "{outputs:?}");
    assert!(outputs.contains(&(Some("auth"), &json!({"verified": true}))), "the bearer token arrived: {outputs:?}");

    let calls = py.calls().await;
    let adds: Vec<&Value> = calls.iter().filter(|c| c["tool"] == "add").collect();
    assert_eq!(adds.len(), 2, "{calls:?}");
    assert_eq!(
        (adds[0]["arguments"].clone(), adds[1]["arguments"].clone()),
        (json!({"a": 2, "b": 3}), json!({"a": 5, "b": 10}))
    );
    let run_id = complete.run_id.as_str();
    let meta = &adds[1]["meta"];
    let sent = (&meta["flexrun/runId"], &meta["flexrun/nodeId"], &meta["flexrun/attempt"]);
    assert_eq!(sent, (&json!(run_id), &json!("second"), &json!(1)), "{meta}");

    let planner = &server.planner_calls()[0];
    assert!(planner.user.contains("TOOL ARGUMENTS") && planner.user.contains("- py.add: {"), "{}", planner.user);
    let log = server.event_log_text(run_id).join("\n");
    assert!(!log.contains(&token()) && !log.contains(HEADER_SECRET));
}

/// The planner answers `first` until a node's failure is in its prompt, then `repaired`.
async fn flexrun_repairing(first: Value, repaired: Value) -> TestServer {
    let env = vec![(TOKEN_VARIABLES.0, TOKEN_VARIABLES.1.to_string())];
    let options = Options { capabilities: Vec::new(), env, ..Options::default() };
    let planner = script(move |call| {
        Reply::json(if call.user.contains("### NODE ERROR REPAIR") { repaired.clone() } else { first.clone() })
    });
    TestServer::start_with(planner, options).await
}

#[tokio::test]
async fn a_tools_error_result_asks_for_a_repair_plan_that_reaches_the_goal() {
    let py = python_server().await;
    let first = json!({"nodes": [
        {"stage": "break", "capabilityId": "py.fail", "arguments": {"reason": "disk full"}},
        {"stage": "add", "capabilityId": "py.add", "arguments": {"a": 1, "b": 1}, "dependsOn": ["break"]},
    ]});
    let repaired = json!({"nodes": [{"stage": "add", "capabilityId": "py.add", "arguments": {"a": 2, "b": 3}}]});
    let server = flexrun_repairing(first, repaired).await;
    assert_eq!(register(&server, python_registration(&py)).await.0, 201);

    let frames = server.run(&envelope(5)).await;
    let error = frame_of(&frames, "node_error");
    assert_eq!(
        (error.node_id.as_deref(), error.payload["error"]["code"].as_str()),
        (Some("break"), Some("tool_error"))
    );
    assert!(error.payload["error"]["message"].as_str().unwrap().contains("disk full"), "{}", error.payload);
    let trigger = frame_of(&frames, "policy_triggered");
    assert_eq!(trigger.payload["trigger"]["reason"], "node_error");
    assert_eq!(trigger.payload["trigger"]["details"]["nodeId"], "break");
    let replan = frames.iter().filter(|f| f.kind == "plan_requested").nth(1).expect("a second plan_requested");
    assert_eq!(
        (replan.payload["replan"]["reason"].as_str(), replan.payload["replan"]["nodeError"]["code"].as_str()),
        (Some("node_error"), Some("tool_error"))
    );
    let complete = frame_of(&frames, "complete");
    assert_eq!(complete.payload["status"], "completed", "{:?}", kinds(&frames));
    assert_eq!(complete.payload["output"]["sum"]["total"], 5);

    let planner = server.planner_calls();
    assert_eq!(planner.len(), 2, "one plan, one repair");
    let repair = planner[1].user.split("### NODE ERROR REPAIR\n").nth(1).unwrap();
    assert!(
        repair.starts_with("Node break (capability py.fail) failed with `tool_error`:") && repair.contains("disk full")
    );
    let tools: Vec<String> = py.calls().await.iter().map(|c| c["tool"].as_str().unwrap().to_string()).collect();
    assert_eq!(tools, ["fail", "add"], "the failed tool was not retried; the first plan's add never ran");
    let run = server.get_json(&format!("/api/v1/flex/runs/{}", complete.run_id)).await;
    assert_eq!(
        (run["run"]["replans"]["nodeError"].as_u64(), run["run"]["replans"]["total"].as_u64()),
        (Some(1), Some(1))
    );

    // Without replans left, the same failure fails the run and says why no repair was tried.
    let mut no_replans = envelope(5);
    no_replans["policies"] = json!({"replan": {"enabled": false}});
    let frames = server.run(&no_replans).await;
    let complete = frame_of(&frames, "complete");
    assert_eq!(
        (complete.payload["status"].as_str(), complete.payload["error"]["cause"].as_str()),
        (Some("failed"), Some("tool_error"))
    );
    assert!(complete.payload["error"]["replanRefused"].is_string(), "{}", complete.payload);
    assert_eq!(server.planner_calls().len(), 3, "no repair plan asked for");
}

#[tokio::test]
async fn a_step_whose_tool_went_away_fails_as_tool_unavailable_and_is_repaired() {
    let py = python_server().await;
    let first = json!({"nodes": [
        {"stage": "remove", "capabilityId": "py.remove_tool", "arguments": {"name": "wipe"}},
        {"stage": "wipe", "capabilityId": "py.wipe", "arguments": {"target": "staging"}, "dependsOn": ["remove"]},
        {"stage": "add", "capabilityId": "py.add", "arguments": {"a": 1, "b": 1}, "dependsOn": ["wipe"]},
    ]});
    let repaired = json!({"nodes": [
        {"stage": "remove", "capabilityId": "py.remove_tool", "arguments": {"name": "wipe"}},
        {"stage": "add", "capabilityId": "py.add", "arguments": {"a": 2, "b": 3}, "dependsOn": ["remove"]},
    ]});
    let server = flexrun_repairing(first, repaired).await;
    assert_eq!(register(&server, python_registration(&py)).await.0, 201);
    let mut gated = envelope(5);
    gated["policies"] = json!({"approval": {"destructiveTools": "required"}});

    // Both tools are destructive (the Python SDK's default): `remove` waits for an operator, then
    // `wipe` does; meanwhile `wipe` leaves the server's list.
    let frames = server.run(&gated).await;
    let asked = frame_of(&frames, "hitl_request");
    assert_eq!(asked.payload["request"]["nodeId"], "remove");
    let run_id = asked.run_id.clone();
    let approve = |asked: &flexrun::events::ReceivedFrame| {
        support::decision(&run_id, asked.payload["request"]["id"].as_str().unwrap(), true, None)
    };
    let (status, frames, _) = support::resume(&server, approve(asked)).await;
    assert_eq!(status, 200);
    let asked = frame_of(&frames, "hitl_request");
    assert_eq!(asked.payload["request"]["nodeId"], "wipe");
    let offered = || async {
        let listed = server.get_json("/api/v1/flex/capabilities").await;
        listed["capabilities"].as_array().unwrap().iter().any(|c| c["capabilityId"] == "py.wipe")
    };
    for _ in 0..100 {
        if !offered().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!offered().await, "the server said its list changed: py.wipe is no longer offered");

    let (status, after, _) = support::resume(&server, approve(asked)).await;
    assert_eq!(status, 200);
    let error = frame_of(&after, "node_error");
    assert_eq!(
        (error.node_id.as_deref(), error.payload["error"]["code"].as_str()),
        (Some("wipe"), Some("tool_unavailable"))
    );
    let complete = frame_of(&after, "complete");
    assert_eq!(complete.payload["status"], "completed", "{:?}", kinds(&after));
    assert_eq!(complete.payload["output"]["sum"]["total"], 5);
    let tools: Vec<String> = py.calls().await.iter().map(|c| c["tool"].as_str().unwrap().to_string()).collect();
    assert_eq!(tools, ["remove_tool", "add"], "the completed step was kept, the vanished tool never called");
}

#[tokio::test]
async fn a_destructive_tools_step_runs_only_once_an_operator_approves_it() {
    let py = python_server().await;
    let plan = json!({"nodes": [
        {"stage": "first", "capabilityId": "py.add", "arguments": {"a": 2, "b": 3}},
        {"stage": "wipe", "capabilityId": "py.wipe", "arguments": {"target": "staging"}, "dependsOn": ["first"]},
    ]});
    let server = flexrun(plan).await;
    assert_eq!(register(&server, python_registration(&py)).await.0, 201);
    let mut gated = envelope(5);
    gated["policies"] = json!({"approval": {"destructiveTools": "required"}});

    let frames = server.run(&gated).await;
    let asked = frame_of(&frames, "hitl_request");
    let request = &asked.payload["request"];
    assert_eq!((request["kind"].as_str(), request["subject"].as_str()), (Some("approval"), Some("node")));
    assert_eq!((request["nodeId"].as_str(), request["context"]["tool"].as_str()), (Some("wipe"), Some("wipe")));
    assert_eq!(request["context"]["arguments"], json!({"target": "staging"}));
    let tools = |calls: Vec<Value>| calls.iter().map(|c| c["tool"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(tools(py.calls().await), ["add"], "the read-only step ran, the destructive one did not");
    let run_id = asked.run_id.clone();
    server.wait_for_status(&run_id, "awaiting_hitl").await;

    let request_id = request["id"].as_str().unwrap();
    let (status, after, _) = support::resume(&server, support::decision(&run_id, request_id, true, None)).await;
    assert_eq!(status, 200);
    assert_eq!(frame_of(&after, "complete").payload["status"], "completed", "{:?}", kinds(&after));
    assert_eq!(tools(py.calls().await), ["add", "wipe"]);

    // A fork that runs the step again asks again: the approval was given in the parent.
    let url = server.url(&format!("/api/v1/flex/runs/{run_id}/fork"));
    let forked = server.http.post(url).json(&json!({"fromNode": "wipe"})).send().await.unwrap();
    assert_eq!(forked.status(), 200);
    let frames = support::read_frames(forked, usize::MAX).await;
    let asked = frame_of(&frames, "hitl_request");
    let request = &asked.payload["request"];
    assert_eq!((request["subject"].as_str(), request["nodeId"].as_str()), (Some("node"), Some("wipe")));
    assert_eq!(tools(py.calls().await), ["add", "wipe"], "the fork's wipe waits for an operator");
}

#[tokio::test]
async fn arguments_that_break_the_tools_schema_are_a_rejected_draft() {
    let py = python_server().await;
    let plan = json!({"nodes": [{"stage": "first", "capabilityId": "py.add", "arguments": {"a": "two", "b": 3}}]});
    let server = flexrun(plan).await;
    assert_eq!(register(&server, python_registration(&py)).await.0, 201);

    let frames = server.run(&envelope(15)).await;
    let rejected = frame_of(&frames, "plan_rejected");
    let text = rejected.payload.to_string();
    assert!(text.contains("INVALID_ARGUMENTS") && text.contains("`/a`"), "{text}");
    assert!(py.calls().await.is_empty(), "nothing was called");
}

#[tokio::test]
async fn a_call_that_times_out_is_retried_and_the_retry_says_which_attempt_it_is() {
    let py = python_server().await;
    let plan = json!({"nodes": [
        {"stage": "first", "capabilityId": "py.slow_once", "arguments": {"key": "k1", "seconds": 6}},
        {"stage": "total", "capabilityId": "py.add", "arguments": {"a": 7, "b": 8}},
    ]});
    let server = flexrun(plan).await;
    assert_eq!(register(&server, python_registration(&py)).await.0, 201);

    let frames = server.run(&envelope(15)).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));
    let retry = frame_of(&frames, "retry");
    assert!(retry.payload["error"].as_str().unwrap().contains("timed out after 2s"), "{}", retry.payload);
    let attempts: Vec<Value> = py
        .calls()
        .await
        .iter()
        .filter(|c| c["tool"] == "slow_once")
        .map(|c| c["meta"]["flexrun/attempt"].clone())
        .collect();
    assert_eq!(attempts, [json!(1), json!(2)]);
}

#[tokio::test]
async fn a_server_down_when_registered_offers_its_tools_once_it_answers() {
    let mut py = python_server().await;
    py.kill();
    let server = flexrun(json!({"nodes": []})).await;
    let (status, body) = register(&server, python_registration(&py)).await;
    assert_eq!((status, body["server"]["state"].as_str()), (201, Some("unreachable")), "{body}");
    assert!(body["server"]["error"].as_str().is_some_and(|e| !e.is_empty()));

    py.restart().await;
    let mut listed = Value::Null;
    for _ in 0..100 {
        listed = server.get_json("/api/v1/flex/mcp-servers").await;
        if listed["servers"][0]["state"] == "ready" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(listed["servers"][0]["state"], "ready", "{listed}");
    let capabilities = server.get_json("/api/v1/flex/capabilities").await.to_string();
    assert!(capabilities.contains("py.add"));
}

#[tokio::test]
async fn bad_registrations_are_refused_with_their_pointer_and_nothing_is_stored() {
    let server = flexrun(json!({"nodes": []})).await;
    for (registration, at) in [
        (json!({"id": "x", "url": "http://169.254.169.254/mcp"}), "/url"),
        (json!({"id": "x", "url": "not a url"}), "/url"),
        (json!({"id": "x", "url": "http://127.0.0.1:1/mcp", "extra": true}), "/extra"),
        (json!({"id": "x y", "url": "http://127.0.0.1:1/mcp"}), "/id"),
        // The token is read from flexrun's environment and sent to the URL: only a variable the
        // configuration lists may be named, never the one holding the callers' keys.
        (json!({"id": "x", "url": "http://127.0.0.1:1/mcp", "bearerTokenEnv": "FLEXRUN_API_KEYS"}), "/bearerTokenEnv"),
        (json!({"id": "x", "url": "http://127.0.0.1:1/mcp", "bearerTokenEnv": "OPENAI_API_KEY"}), "/bearerTokenEnv"),
    ] {
        let (status, body) = register(&server, registration.clone()).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_mcp_server")),
            "{registration}: {body}"
        );
        assert!(body.to_string().contains(at), "{registration}: {body}");
    }
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM mcp_servers"), 0);
    assert_eq!(server.get_json("/api/v1/flex/mcp-servers").await["count"], 0);
}

/// A server that speaks the 2026-07-28 revision (no `initialize`): its tools listed and called, and
/// a change of its list heard through a `subscriptions/listen` stream.
#[tokio::test]
async fn a_server_of_the_2026_07_28_revision_is_listed_called_and_heard() {
    let modern = McpProcess::python_modern().await;
    let plan = json!({"nodes": [
        {"stage": "first", "capabilityId": "modern.add", "arguments": {"a": 2, "b": 3}},
        {"stage": "grow", "capabilityId": "modern.add_tool", "arguments": {"name": "fresh"}, "dependsOn": ["first"]},
    ]});
    let server = flexrun(plan).await;
    let registration = json!({"id": "modern", "url": modern.url(), "outputFacets": {"add": "sum"}});
    let (status, body) = register(&server, registration).await;
    assert_eq!((status, body["server"]["state"].as_str()), (201, Some("ready")), "{body}");
    assert_eq!(body["server"]["protocol"], "2026-07-28", "{body}");

    let frames = server.run(&envelope(5)).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));
    let first = frames.iter().find(|f| f.kind == "node_complete" && f.node_id.as_deref() == Some("first")).unwrap();
    assert_eq!(first.payload["output"], json!({"sum": {"total": 5}}));
    let mut offered = false;
    for _ in 0..100 {
        offered = server.get_json("/api/v1/flex/capabilities").await.to_string().contains("modern.fresh");
        if offered {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(offered, "modern.fresh is offered after the list changed");
}

#[tokio::test]
async fn a_tool_the_server_adds_is_offered_once_it_says_its_list_changed() {
    let py = python_server().await;
    let plan = json!({"nodes": [{"stage": "grow", "capabilityId": "py.add_tool", "arguments": {"name": "fresh"}}]});
    let server = flexrun(plan).await;
    assert_eq!(register(&server, python_registration(&py)).await.0, 201);
    let before = server.get_json("/api/v1/flex/capabilities").await.to_string();
    assert!(!before.contains("py.fresh"));

    let grow = json!({"objective": "Grow", "inputs": {}, "outputContract": {"mode": "facets", "facets": ["add_tool"]}});
    let frames = server.run(&grow).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));
    // The refresh period is 300 s: only the server's notification can bring the tool this soon.
    let mut offered = false;
    for _ in 0..100 {
        offered = server.get_json("/api/v1/flex/capabilities").await.to_string().contains("py.fresh");
        if offered {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(offered, "py.fresh is offered after the list changed");
}

/// flexrun killed with SIGKILL while a tool call is in flight, the MCP server down when flexrun
/// starts again: the stored tool list is offered at once, the run goes on when the server is back,
/// and the step completed before the kill is not called again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_call_the_run_finishes_without_calling_completed_steps_again() {
    let mut py = python_server().await;
    let plan = json!({"nodes": [
        {"stage": "first", "capabilityId": "py.add", "arguments": {"a": 2, "b": 3}},
        {"stage": "wait", "capabilityId": "py.hold", "arguments": {"key": "k"}, "dependsOn": ["first"]},
    ]});
    let model = flexrun::llm::standin::StandIn::start(script(move |_| Reply::json(plan.clone()))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut server = support::process::ServerProcess::start(dir.path(), &model.base_url, &[], &[TOKEN_VARIABLES]).await;
    let mut registration = python_registration(&py);
    registration["tools"] = json!({});
    let registered =
        server.http.post(server.url("/api/v1/flex/mcp-servers/register")).json(&registration).send().await.unwrap();
    assert_eq!(registered.status().as_u16(), 201);

    let (run_id, response) = server.post_run(&envelope(5)).await;
    let before = support::read_frames(response, 6).await;
    for _ in 0..200 {
        if py.calls().await.iter().any(|c| c["tool"] == "hold") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let first_life = py.calls().await;
    assert_eq!(first_life.iter().map(|c| c["tool"].as_str().unwrap()).collect::<Vec<_>>(), ["add", "hold"]);

    server.kill();
    py.kill();
    server.restart().await;
    let servers: Value =
        server.http.get(server.url("/api/v1/flex/mcp-servers")).send().await.unwrap().json().await.unwrap();
    assert!(servers["servers"][0]["tools"].to_string().contains("py.hold"), "offered from the stored list: {servers}");
    assert_ne!(servers["servers"][0]["state"], "ready", "the server is down: {servers}");

    py.restart().await;
    for _ in 0..400 {
        if py.calls().await.iter().any(|c| c["tool"] == "hold") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    py.release("k").await;
    let after = server.reattach(&run_id, before.last().unwrap().seq).await;
    let complete = after.iter().find(|f| f.kind == "complete").expect("the run completes");
    assert_eq!(complete.payload["status"], "completed", "{:?}", kinds(&after));
    let second_life: Vec<String> = py.calls().await.iter().map(|c| c["tool"].as_str().unwrap().to_string()).collect();
    assert_eq!(second_life, ["hold"], "the completed add is not called again");
    let log = server.log();
    assert!(!log.contains(&token()) && !log.contains(HEADER_SECRET), "no secret in the log");
}

/// Two nodes on one PostgreSQL database: a server registered through one is offered by the other
/// (which reads the stored registrations again every 10 s) without a restart.
#[tokio::test]
async fn a_server_registered_through_one_node_is_offered_by_the_others() {
    let py = python_server().await;
    let database = support::database::fresh_postgres();
    let node = |id: &'static str| Options {
        capabilities: Vec::new(),
        env: vec![
            ("FLEXRUN_DATABASE_URL", database.clone()),
            ("FLEXRUN_NODE_ID", id.to_string()),
            (TOKEN_VARIABLES.0, TOKEN_VARIABLES.1.to_string()),
        ],
        ..Options::default()
    };
    let first = TestServer::start_with(script(|_| Reply::json(json!({"nodes": []}))), node("node-a")).await;
    let second = TestServer::start_with(script(|_| Reply::json(json!({"nodes": []}))), node("node-b")).await;
    assert_eq!(register(&first, python_registration(&py)).await.0, 201);

    // Offered from the stored list at once, then listed by the second node itself.
    let (mut offered, mut state) = (false, Value::Null);
    for _ in 0..150 {
        offered = second.get_json("/api/v1/flex/capabilities").await.to_string().contains("py.add");
        state = second.get_json("/api/v1/flex/mcp-servers").await["servers"][0]["state"].clone();
        if offered && state == "ready" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(offered, "the second node offers the tools of a server registered through the first");
    assert_eq!(state, "ready", "the second node has its own session with the server");
}

/// A 2026-07-28 tool that asks for input before it finishes (an `input_required` result): the run
/// pauses on an operator question carrying the tool's message and schema; the question survives
/// flexrun being killed; an answer that does not fit the schema is refused and changes nothing;
/// the operator's answer goes back to the tool in its next call, which finishes the step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_asks_for_input_pauses_the_run_until_an_operator_answers_it() {
    let shop = McpProcess::python_modern().await;
    let plan = json!({"nodes": [{"stage": "confirm", "capabilityId": "shop.confirm_order",
                                 "arguments": {"item": "widget", "quantity": 3}}]});
    let model = flexrun::llm::standin::StandIn::start(script(move |_| Reply::json(plan.clone()))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut server = support::process::ServerProcess::start(dir.path(), &model.base_url, &[], &[]).await;
    let registration = json!({"id": "shop", "url": shop.url()});
    let registered =
        server.http.post(server.url("/api/v1/flex/mcp-servers/register")).json(&registration).send().await.unwrap();
    assert_eq!(registered.status().as_u16(), 201);
    let envelope = json!({
        "objective": "Ship an order", "inputs": {},
        "outputContract": {"mode": "facets", "facets": ["confirm_order"]},
        "goal_condition": [{"facet": "confirm_order", "path": "/warehouse",
                            "condition": {"jsonLogic": {"==": [{"var": "warehouse"}, "north"]}}}]
    });

    let (run_id, response) = server.post_run(&envelope).await;
    let frames = support::read_frames(response, usize::MAX).await;
    let asked = frame_of(&frames, "hitl_request");
    let request = &asked.payload["request"];
    assert_eq!((request["kind"].as_str(), request["subject"].as_str()), (Some("clarify"), Some("node")));
    assert_eq!(request["question"], "Ship 3 x widget? Which warehouse?");
    assert_eq!(request["context"]["context"]["mcp"]["requestedSchema"]["required"], json!(["warehouse"]));
    let stages = |calls: Vec<Value>| calls.iter().map(|c| c["stage"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(stages(shop.calls().await), ["entered"], "asked, not finished");

    server.kill();
    server.restart().await;
    let resume = |text: &str| {
        let body = json!({"runId": run_id, "operator": {"id": "op-7"},
                          "decision": {"requestId": request["id"], "approved": true, "freeformText": text}});
        server.http.post(server.url("/api/v1/flex/run.resume")).json(&body).send()
    };
    let unfit = resume(r#"{"warehouse": 7}"#).await.unwrap();
    assert_eq!(unfit.status().as_u16(), 400);
    let body: Value = unfit.json().await.unwrap();
    assert_eq!(body["error"]["code"], "answer_invalid", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("/warehouse"), "{body}");
    assert_eq!(support::event_log(dir.path(), &run_id).len(), frames.len(), "a refused answer records nothing");

    let answered = resume("north").await.unwrap();
    assert_eq!(answered.status().as_u16(), 200);
    let after = support::read_frames(answered, usize::MAX).await;
    let complete = frame_of(&after, "complete");
    assert_eq!(complete.payload["status"], "completed", "{:?}", kinds(&after));
    assert_eq!(
        complete.payload["output"]["confirm_order"],
        json!({"item": "widget", "quantity": 3, "warehouse": "north"})
    );
    assert_eq!(stages(shop.calls().await), ["entered", "entered", "finished"], "one more call, with the answer");
}

/// A tool's question quoting what flexrun sent its server (here a header's value, which the
/// planner happened to pass as an argument the question repeats) shows it nowhere: not in the
/// operator's request, nor in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_question_quoting_the_registrations_secret_shows_it_nowhere() {
    let shop = McpProcess::python_modern().await;
    let plan = json!({"nodes": [{"stage": "confirm", "capabilityId": "shop.confirm_order",
                                 "arguments": {"item": format!("crate {HEADER_SECRET}"), "quantity": 3}}]});
    let server = flexrun(plan).await;
    let registration = json!({"id": "shop", "url": shop.url(), "headers": {"X-Team": HEADER_SECRET}});
    assert_eq!(register(&server, registration).await.0, 201);
    let envelope = json!({"objective": "Ship an order", "inputs": {},
                          "outputContract": {"mode": "facets", "facets": ["confirm_order"]}});

    let frames = server.run(&envelope).await;
    let asked = &frame_of(&frames, "hitl_request").payload;
    assert_eq!(asked["request"]["question"], "Ship 3 x crate [redacted]? Which warehouse?");
    assert!(!asked.to_string().contains(HEADER_SECRET), "{asked}");
    // As stored (the plan's arguments hold it: the planner wrote it there, not the server).
    let stored = format!(
        "SELECT COUNT(*) AS n FROM run_events WHERE event_type = 'hitl_request' AND frame LIKE '%{HEADER_SECRET}%'"
    );
    assert_eq!(server.count(&stored), 0);
    let request = format!(
        "SELECT COUNT(*) AS n FROM hitl_requests WHERE question LIKE '%[redacted]%' \
         AND details NOT LIKE '%{HEADER_SECRET}%'"
    );
    assert_eq!(server.count(&request), 1);
}

/// Under 2025-11-25 a tool asks in the middle of its call, which cannot wait for an operator across
/// restarts: flexrun declares no elicitation there, and such a tool's step fails saying so.
#[tokio::test]
async fn a_tool_asking_for_input_over_2025_11_25_fails_its_step_clearly() {
    let py = python_server().await;
    let plan = json!({"nodes": [{"stage": "ask", "capabilityId": "py.ask", "arguments": {"question": "Which?"}}]});
    let server = flexrun(plan).await;
    assert_eq!(register(&server, python_registration(&py)).await.0, 201);
    let frames = server
        .run(&json!({"objective": "Ask", "inputs": {}, "outputContract": {"mode": "facets", "facets": ["ask"]},
                     "policies": {"replan": {"enabled": false}}}))
        .await;
    let error = frame_of(&frames, "node_error");
    assert_eq!(error.payload["error"]["code"], "tool_error", "{}", error.payload);
    let message = error.payload["error"]["message"].as_str().unwrap();
    assert!(message.contains("cannot answer a question in the middle of a call"), "{message}");
    assert_eq!(frame_of(&frames, "complete").payload["status"], "failed");
    assert_eq!(py.calls().await.len(), 1);
}
