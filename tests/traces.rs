//! OpenTelemetry traces: the real server exports its runs' spans over OTLP/HTTP to a real receiver
//! on loopback (tests/otlp/receiver.py, decoding with the official protobuf definitions). The
//! stand-in model reports exact token counts; only the model and `http` capabilities are mocked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::otlp::OtlpReceiver;
use support::process::ServerProcess;
use support::*;

const PATIENCE: Duration = Duration::from_secs(30);
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// Export to `receiver`, in batches sent at once.
fn exporting(receiver: &OtlpReceiver) -> Vec<(&'static str, String)> {
    vec![("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()), ("OTEL_BSP_SCHEDULE_DELAY", "20".into())]
}

/// The repair run, each call reporting its usage: the planner 1,000 in / 100 out (200 cached, 30
/// reasoning), the writer 500 / 50 scoring 0.5, the editor 300 / 30 scoring 0.9.
fn repair_with_usage() -> flexrun::llm::standin::Script {
    script(|call| {
        if call.is_planner() {
            let stages: &[(&str, &str)] = if call.user.contains("### GOAL CONDITION REPAIR") {
                &[("draft", "writer"), ("polish", "editor")]
            } else {
                &[("draft", "writer")]
            };
            return plan(stages).usage(usage_block(1_000, 100, Some(200), Some(30)));
        }
        match call.capability_id() {
            Some("writer") => post(0.5).usage(usage_block(500, 50, None, None)),
            _ => post(0.9).usage(usage_block(300, 30, None, None)),
        }
    })
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn one<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name}: {:?}", names(spans));
    found[0]
}

fn names(spans: &[Value]) -> Vec<&str> {
    spans.iter().map(|s| s["name"].as_str().unwrap()).collect()
}

fn children<'a>(spans: &'a [Value], parent: &Value) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["parentSpanId"] == parent["spanId"]).collect()
}

fn nests(child: &Value, parent: &Value) -> bool {
    let start = |s: &Value| s["startTimeUnixNano"].as_u64().unwrap();
    let end = |s: &Value| s["endTimeUnixNano"].as_u64().unwrap();
    start(child) >= start(parent) && end(child) <= end(parent) && start(child) <= end(child)
}

/// Posts `body` to `path` with a `traceparent` header.
async fn post_traced(server: &TestServer, path: &str, traceparent: &str, body: &Value) -> reqwest::Response {
    let request = server.http.post(server.url(path)).bearer_auth(OPERATOR_KEY).header("traceparent", traceparent);
    request.json(body).send().await.unwrap()
}

async fn root_of(receiver: &OtlpReceiver) -> Vec<Value> {
    receiver.wait_for_spans(|spans| spans.iter().any(|s| s["name"] == "invoke_workflow flexrun"), PATIENCE).await
}

#[tokio::test]
async fn a_repair_run_is_one_trace_of_nested_genai_spans_with_exact_usage() {
    let receiver = OtlpReceiver::start().await;
    let options = Options { env: exporting(&receiver), ..Options::default() };
    let server = TestServer::start_with(repair_with_usage(), options).await;
    let frames = server.run(&envelope()).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
    let run_id = frames[0].run_id.clone();
    let spans = root_of(&receiver).await;

    // One trace, its ids recorded in the run's `start` frame.
    let root = one(&spans, "invoke_workflow flexrun");
    let trace = &frame_of(&frames, "start").payload["trace"];
    assert_eq!((&trace["traceId"], &trace["spanId"]), (&root["traceId"], &root["spanId"]));
    assert!(spans.iter().all(|s| s["traceId"] == root["traceId"]), "one trace");
    assert_eq!(root["parentSpanId"], "", "no caller span: the run's root is the trace's");
    assert_eq!(root["attributes"]["gen_ai.operation.name"], "invoke_workflow");
    assert_eq!(root["attributes"]["gen_ai.conversation.id"], run_id.as_str());
    assert_eq!(root["attributes"]["flexrun.run.status"], "completed");
    assert_eq!(root["attributes"]["gen_ai.usage.input_tokens"], 2_000 + 500 + 300);
    assert_ne!(root["status"]["code"], "STATUS_CODE_ERROR");
    assert_eq!(root["resource"]["service.name"], "flexrun");

    // A plan span per version, each the parent of its planner call.
    let plans = named(&spans, "plan flexrun");
    assert_eq!(plans.len(), 2, "{:?}", names(&spans));
    for (version, plan) in plans.iter().enumerate() {
        assert_eq!(plan["parentSpanId"], root["spanId"]);
        assert_eq!(plan["attributes"]["flexrun.plan.version"], version as u64 + 1);
        assert_eq!(plan["attributes"]["flexrun.plan.drafts"], 1);
        let calls = children(&spans, plan);
        assert_eq!(calls.len(), 1);
        let chat = calls[0];
        assert_eq!(chat["name"], "chat test-model");
        assert_eq!(chat["kind"], "SPAN_KIND_CLIENT");
        let attributes = &chat["attributes"];
        assert_eq!(attributes["gen_ai.operation.name"], "chat");
        assert_eq!(attributes["gen_ai.provider.name"], "openai");
        assert_eq!(attributes["gen_ai.request.model"], "test-model");
        assert_eq!(attributes["gen_ai.response.model"], "test-model");
        assert_eq!(attributes["gen_ai.response.id"], "chatcmpl-standin");
        assert_eq!(attributes["gen_ai.response.finish_reasons"], json!(["stop"]));
        assert_eq!(attributes["gen_ai.usage.input_tokens"], 1_000);
        assert_eq!(attributes["gen_ai.usage.output_tokens"], 100);
        assert_eq!(attributes["gen_ai.usage.cache_read.input_tokens"], 200);
        assert_eq!(attributes["gen_ai.usage.reasoning.output_tokens"], 30);
        assert_eq!(attributes["server.address"], "127.0.0.1");
        assert!(attributes.get("gen_ai.input.messages").is_none(), "no content unless asked for");
        assert!(nests(chat, plan) && nests(plan, root));
    }
    assert!(plans[0]["attributes"].get("flexrun.replan.reason").is_none());
    assert_eq!(plans[1]["attributes"]["flexrun.replan.reason"], "goal_condition_failed");

    // A step attempt's span, the parent of its capability's model call; the repair kept the draft.
    for (capability, input, output) in [("writer", 500, 50), ("editor", 300, 30)] {
        let tool = one(&spans, &format!("execute_tool {capability}"));
        assert_eq!(tool["parentSpanId"], root["spanId"]);
        assert_eq!(tool["attributes"]["gen_ai.tool.name"], capability);
        assert_eq!(tool["attributes"]["flexrun.node.status"], "completed");
        let calls = children(&spans, tool);
        assert_eq!(calls.len(), 1, "{capability}");
        assert_eq!(calls[0]["attributes"]["gen_ai.usage.input_tokens"], input);
        assert_eq!(calls[0]["attributes"]["gen_ai.usage.output_tokens"], output);
        assert!(nests(calls[0], tool) && nests(tool, root));
        assert!(tool["attributes"].get("gen_ai.tool.call.arguments").is_none());
    }

    // A goal round per plan version: the first failed, naming its condition.
    let rounds = named(&spans, "flexrun.goal_conditions");
    assert_eq!(rounds.len(), 2);
    assert_eq!(rounds[0]["attributes"]["flexrun.goal.passed"], false);
    assert_eq!(rounds[0]["attributes"]["flexrun.goal.failed"], json!(["post_copy/quality_score"]));
    assert_eq!(rounds[1]["attributes"]["flexrun.goal.passed"], true);
    assert_eq!(spans.len(), 1 + 2 + 2 + 2 + 2 + 2, "{:?}", names(&spans));

    // Each model request carried its own span's traceparent.
    let chats: Vec<&Value> = spans.iter().filter(|s| s["name"] == "chat test-model").collect();
    let mut sent: Vec<String> = server.llm_calls().into_iter().map(|c| c.traceparent.unwrap()).collect();
    let mut expected: Vec<String> = chats
        .iter()
        .map(|c| format!("00-{}-{}-01", c["traceId"].as_str().unwrap(), c["spanId"].as_str().unwrap()))
        .collect();
    sent.sort();
    expected.sort();
    assert_eq!(sent, expected);
}

#[tokio::test]
async fn a_callers_traceparent_is_the_runs_parent_and_http_steps_carry_their_span() {
    let receiver = OtlpReceiver::start().await;
    let endpoint = HttpCapability::start(200, json!({"text": "from http", "quality_score": 0.9}));
    let schema = json!({"type": "object", "required": ["text"]});
    let writer = http_capability("http.writer", &["brief"], &["post_copy"], schema, &endpoint.url);
    let options = Options { env: exporting(&receiver), capabilities: vec![writer], ..Options::default() };
    let server = TestServer::start_with(planner_then(&[("draft", "http.writer")], post(0.9)), options).await;
    let response =
        post_traced(&server, "/api/v1/flex/run.stream", &format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"), &envelope())
            .await;
    let frames = read_frames(response, 50).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let spans = root_of(&receiver).await;

    let root = one(&spans, "invoke_workflow flexrun");
    assert_eq!((root["traceId"].as_str(), root["parentSpanId"].as_str()), (Some(CALLER_TRACE), Some(CALLER_SPAN)));
    assert!(spans.iter().all(|s| s["traceId"] == CALLER_TRACE));
    let tool = one(&spans, "execute_tool http.writer");
    assert_eq!(tool["attributes"]["gen_ai.tool.type"], "function");
    assert!(children(&spans, tool).is_empty(), "an http step calls no model");
    let expected = format!("00-{CALLER_TRACE}-{}-01", tool["spanId"].as_str().unwrap());
    assert_eq!(*endpoint.traceparents.lock().unwrap(), vec![Some(expected)]);
}

#[tokio::test]
async fn a_header_that_is_no_traceparent_starts_a_trace_of_its_own() {
    let receiver = OtlpReceiver::start().await;
    let options = Options { env: exporting(&receiver), ..Options::default() };
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), options).await;
    let response =
        post_traced(&server, "/api/v1/flex/run.stream", &format!("00-{CALLER_TRACE}-0000000000000000-01"), &envelope())
            .await;
    assert_eq!(response.status(), 200);
    let frames = read_frames(response, 50).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let spans = root_of(&receiver).await;
    let root = one(&spans, "invoke_workflow flexrun");
    assert_ne!(root["traceId"], CALLER_TRACE);
    assert_eq!(root["parentSpanId"], "");
}

/// A dead collector, then one that never answers. One test: the drop counter is the process's,
/// and no other test here drops a span.
#[tokio::test]
async fn a_dead_or_silent_collector_costs_runs_nothing_and_its_drops_are_counted() {
    let dead = format!("http://127.0.0.1:{}", support::process::free_port());
    runs_go_on_and_every_span_is_counted_dropped(dead).await;
    let hanging = OtlpReceiver::start_in_mode("hang").await;
    runs_go_on_and_every_span_is_counted_dropped(hanging.endpoint()).await;
    assert!(hanging.spans().await.is_empty());
}

/// Three repair runs with export to `endpoint`, which takes no span: each completes as it would
/// without export, and all their spans are counted as dropped.
async fn runs_go_on_and_every_span_is_counted_dropped(endpoint: String) {
    let env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_BSP_SCHEDULE_DELAY", "10".into()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "300".into()),
    ];
    let server = TestServer::start_with(repair_with_usage(), Options { env, ..Options::default() }).await;
    let before = dropped(&server).await;
    for _ in 0..3 {
        let frames = server.run(&envelope()).await;
        assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
        assert!(frame_of(&frames, "start").payload["trace"]["traceId"].is_string());
    }
    let mut now = before;
    for _ in 0..100 {
        now = dropped(&server).await;
        if now >= before + 33.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(now - before, 33.0, "three runs of 11 spans each, none delivered");
}

/// The spans the server counted as dropped because export failed.
async fn dropped(server: &TestServer) -> f64 {
    let metrics = server.http.get(server.url("/metrics")).bearer_auth(OPERATOR_KEY).send().await.unwrap();
    let text = metrics.text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with("flexrun_otel_spans_dropped_total{reason=\"export_failed\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn content_is_captured_only_when_asked_and_never_with_a_secret() {
    let receiver = OtlpReceiver::start().await;
    let mut env = exporting(&receiver);
    env.push(("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true".into()));
    let server =
        TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), Options { env, ..Options::default() })
            .await;
    let mut task = envelope();
    task["inputs"]["brief"]["apiToken"] = json!("s3cr3t-value-42");
    let frames = server.run(&task).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
    let spans = root_of(&receiver).await;
    let text = serde_json::to_string(&spans).unwrap();
    assert!(!text.contains("s3cr3t-value-42"), "a secret left the server in a span");

    let planner = children(&spans, one(&spans, "plan flexrun"))[0];
    let messages: Value =
        serde_json::from_str(planner["attributes"]["gen_ai.input.messages"].as_str().unwrap()).unwrap();
    assert_eq!((&messages[0]["role"], &messages[1]["role"]), (&json!("system"), &json!("user")));
    let prompt = messages[1]["parts"][0]["content"].as_str().unwrap();
    assert!(prompt.contains("flexrun") && prompt.contains("[redacted]"), "{prompt}");
    let output: Value =
        serde_json::from_str(planner["attributes"]["gen_ai.output.messages"].as_str().unwrap()).unwrap();
    assert!(output[0]["parts"][0]["content"].as_str().unwrap().contains("writer"));

    let tool = one(&spans, "execute_tool writer");
    let arguments: Value =
        serde_json::from_str(tool["attributes"]["gen_ai.tool.call.arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments["brief"], json!({"topic": "flexrun", "apiToken": "[redacted]"}));
    let result: Value = serde_json::from_str(tool["attributes"]["gen_ai.tool.call.result"].as_str().unwrap()).unwrap();
    assert_eq!(result["quality_score"], 0.9);
}

/// A run killed in the middle of its step and resumed by a new process stays one trace: the new
/// process's spans are under the root the first recorded, and the root is sent once, at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_mid_step_goes_on_in_the_same_trace() {
    let receiver = OtlpReceiver::start().await;
    let hold = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let switch = hold.clone();
    let model = flexrun::llm::standin::StandIn::start(script(move |call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]);
        }
        let reply = post(0.9).usage(usage_block(500, 50, None, None));
        if switch.load(std::sync::atomic::Ordering::SeqCst) { reply.after(Duration::from_secs(600)) } else { reply }
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let endpoint = receiver.endpoint();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "20")];
    let mut server = ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &env).await;
    let (run_id, response) = server.post_run(&envelope()).await;
    let before = read_frames(response, 4).await;
    let trace = before[0].payload["trace"].clone();
    for _ in 0..200 {
        if model.calls().iter().any(|c| !c.is_planner()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // The plan's span was sent before the kill; the step's was cut off with the process.
    receiver.wait_for_spans(|spans| spans.iter().any(|s| s["name"] == "plan flexrun"), PATIENCE).await;
    server.kill();
    hold.store(false, std::sync::atomic::Ordering::SeqCst);
    server.restart().await;
    let after = server.reattach(&run_id, before.last().unwrap().seq).await;
    assert_eq!(after.last().unwrap().payload["status"], "completed");

    let spans = root_of(&receiver).await;
    let root = one(&spans, "invoke_workflow flexrun");
    assert_eq!((&root["traceId"], &root["spanId"]), (&trace["traceId"], &trace["spanId"]));
    assert!(spans.iter().all(|s| s["traceId"] == trace["traceId"]), "{spans:?}");
    let tool = one(&spans, "execute_tool writer");
    assert_eq!(tool["parentSpanId"], root["spanId"]);
    assert_eq!(children(&spans, tool)[0]["attributes"]["gen_ai.usage.input_tokens"], 500);
    assert_eq!(one(&spans, "plan flexrun")["parentSpanId"], root["spanId"]);
    let started = |s: &Value| s["startTimeUnixNano"].as_u64().unwrap();
    assert!(started(root) <= started(one(&spans, "plan flexrun")), "the root starts when the run did");
}

/// An operator's wait is a span from the request to the decision, under the run's root — made by
/// the commit that records the decision, not by a process that watched the wait.
#[tokio::test]
async fn an_operator_wait_is_a_span_from_request_to_decision() {
    let receiver = OtlpReceiver::start().await;
    let options = Options { env: exporting(&receiver), ..Options::default() };
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), options).await;
    let frames = server.run(&gated_envelope()).await;
    let asked = frame_of(&frames, "hitl_request");
    let run_id = frames[0].run_id.clone();
    let request = asked.payload["request"]["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, after, _) = resume(&server, decision(&run_id, &request, true, None)).await;
    assert_eq!(status, 200);
    assert_eq!(after.last().unwrap().payload["status"], "completed");

    let spans = root_of(&receiver).await;
    let root = one(&spans, "invoke_workflow flexrun");
    let wait = one(&spans, "flexrun.operator_wait");
    assert_eq!(wait["parentSpanId"], root["spanId"]);
    assert_eq!(wait["attributes"]["flexrun.operator_wait.kind"], "approval");
    assert_eq!(wait["attributes"]["flexrun.operator_wait.subject"], "plan");
    assert_eq!(wait["attributes"]["flexrun.operator_wait.decision"], "approved");
    let took = wait["endTimeUnixNano"].as_u64().unwrap() - wait["startTimeUnixNano"].as_u64().unwrap();
    assert!(took >= 40_000_000, "the wait spans the 50 ms before the decision: {took} ns");
    assert!(nests(wait, root));
}

/// The LangGraph surface's run endpoints take the caller's `traceparent` as `run.stream` does.
#[tokio::test]
async fn a_langgraph_run_is_a_child_of_the_callers_span() {
    let receiver = OtlpReceiver::start().await;
    let options = Options { env: exporting(&receiver), ..Options::default() };
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), options).await;
    let response = server
        .http
        .post(server.url("/runs/wait"))
        .bearer_auth(OPERATOR_KEY)
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .json(&json!({"assistant_id": "flex", "input": envelope()}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let spans = root_of(&receiver).await;
    let root = one(&spans, "invoke_workflow flexrun");
    assert_eq!((root["traceId"].as_str(), root["parentSpanId"].as_str()), (Some(CALLER_TRACE), Some(CALLER_SPAN)));
    assert_eq!(root["attributes"]["flexrun.run.status"], "completed");
}

/// An MCP tool's step is an `extension` tool span, and its call carries the span in `_meta`.
#[tokio::test]
async fn an_mcp_tool_step_carries_its_span_in_the_calls_meta() {
    let receiver = OtlpReceiver::start().await;
    let py = support::mcp::McpProcess::python().await;
    let plan = json!({"nodes": [{"stage": "first", "capabilityId": "py.add", "arguments": {"a": 2, "b": 3}}]});
    let options = Options { env: exporting(&receiver), capabilities: Vec::new(), ..Options::default() };
    let server = TestServer::start_with(script(move |_| Reply::json(plan.clone())), options).await;
    let registration = json!({"id": "py", "url": py.url(), "outputFacets": {"add": "sum"}});
    let registered = server.http.post(server.url("/api/v1/flex/mcp-servers/register")).json(&registration).send().await;
    assert_eq!(registered.unwrap().status(), 201);
    let task = json!({
        "objective": "Add numbers with a tool",
        "inputs": {},
        "outputContract": {"mode": "facets", "facets": ["sum"]},
        "goal_condition": [{"facet": "sum", "path": "/total", "condition": {"jsonLogic": {"==": [{"var": "total"}, 5]}}}]
    });
    let frames = server.run(&task).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));

    let spans = root_of(&receiver).await;
    let tool = one(&spans, "execute_tool py.add");
    assert_eq!(tool["attributes"]["gen_ai.tool.type"], "extension");
    let calls = py.calls().await;
    let expected = format!("00-{}-{}-01", tool["traceId"].as_str().unwrap(), tool["spanId"].as_str().unwrap());
    assert_eq!(calls[0]["meta"]["traceparent"], json!(expected), "{calls:?}");
}

/// A run that fails is a root span with error status and the failure's code; its log line leads to
/// its trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_is_an_error_trace_and_its_log_names_the_trace() {
    let receiver = OtlpReceiver::start().await;
    let endpoint = HttpCapability::start(400, json!({"error": "no"}));
    let schema = json!({"type": "object", "required": ["text"]});
    let writer = http_capability("http.writer", &["brief"], &["post_copy"], schema, &endpoint.url);
    let model = flexrun::llm::standin::StandIn::start(planner_then(&[("draft", "http.writer")], post(0.9))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let otlp = receiver.endpoint();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "20")];
    let server = ServerProcess::start(dir.path(), &model.base_url, &[writer], &env).await;
    let (_, response) = server.post_run(&envelope()).await;
    let frames = read_frames(response, 50).await;
    let complete = frames.last().unwrap();
    assert_eq!(complete.payload["status"], "failed");
    let code = complete.payload["error"]["code"].as_str().unwrap();

    let spans = root_of(&receiver).await;
    let root = one(&spans, "invoke_workflow flexrun");
    assert_eq!(root["status"]["code"], "STATUS_CODE_ERROR");
    assert_eq!(root["attributes"]["error.type"], code);
    assert_eq!(root["attributes"]["flexrun.run.status"], "failed");
    let tool = one(&spans, "execute_tool http.writer");
    assert_eq!(tool["status"]["code"], "STATUS_CODE_ERROR");
    assert_eq!(tool["attributes"]["flexrun.node.status"], "failed");
    assert!(tool["attributes"]["error.type"].is_string());

    let trace_id = root["traceId"].as_str().unwrap();
    let log = server.log();
    let line = log.lines().find(|l| l.contains("run ended without completing")).expect("the failure is logged");
    assert!(line.contains(&format!("trace_id={trace_id}")), "{line}");
}
