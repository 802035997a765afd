//! Capability signals end to end: a CLARIFY question pauses the run until an operator answers it
//! (and the answer reaches the node that asked); a REPLAN signal replans within the budget.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::*;

fn post_schema() -> Value {
    json!({"type": "object", "required": ["text", "quality_score"],
           "properties": {"text": {"type": "string"}, "quality_score": {"type": "number"}}})
}

fn clarify(question: &str) -> Value {
    json!({"signal": "CLARIFY", "question": question})
}

fn good_post() -> Value {
    json!({"text": "EU post", "quality_score": 0.9})
}

/// A server whose `draft` step is an `http` capability answering `replies` in turn, with
/// `config` (TOML) layered over the defaults.
async fn server_with(endpoint: &HttpCapability, config: Option<&str>) -> TestServer {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let mut env = Vec::new();
    if let Some(config) = config {
        let path = dir.path().join("flexrun.toml");
        std::fs::write(&path, config).unwrap();
        env.push(("FLEXRUN_CONFIG", path.display().to_string()));
    }
    let writer = http_capability("http.writer", &["brief"], &["post_copy"], post_schema(), &endpoint.url);
    let options = Options { capabilities: vec![writer], env, dir: Some(dir), ..Options::default() };
    TestServer::start_with(planner_then(&[("draft", "http.writer")], post(0.9)), options).await
}

async fn node_status(server: &TestServer, run_id: &str, node_id: &str) -> String {
    let nodes = server.nodes(run_id).await;
    nodes.into_iter().rfind(|n| n["nodeId"] == node_id).and_then(|n| n["status"].as_str().map(String::from)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_pauses_the_run_and_its_answer_reaches_the_node_that_asked() {
    let endpoint = HttpCapability::sequence(vec![(200, clarify("Which market?")), (200, good_post())]);
    let server = server_with(&endpoint, None).await;
    let frames = server.run(&envelope()).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "plan_generated", "node_start", "hitl_request", "log"]);
    let run_id = frames[0].run_id.clone();
    let request = &frames[4].payload["request"];
    assert_eq!((request["kind"].as_str(), request["subject"].as_str()), (Some("clarify"), Some("node")));
    assert_eq!((request["nodeId"].as_str(), request["question"].as_str()), (Some("draft"), Some("Which market?")));
    assert_eq!(frames[5].message.as_deref(), Some("awaiting_clarification"));
    server.wait_for_status(&run_id, "awaiting_hitl").await;
    assert_eq!(node_status(&server, &run_id, "draft").await, "awaiting_hitl");
    let request_id = request["id"].as_str().unwrap();

    // An approval without an answer is not an answer.
    let (status, _, body) = resume(&server, decision(&run_id, request_id, true, None)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("answer_required")), "{body}");

    let (status, frames, _) = resume(&server, decision(&run_id, request_id, true, Some("EU only"))).await;
    assert_eq!(status, 200);
    assert_eq!(kinds(&frames), ["hitl_resolved", "node_start", "node_complete", "complete"]);
    assert_eq!(frames[0].payload["decision"]["decision"], "answered");
    assert_eq!(frames[0].payload["decision"]["answer"], "EU only");
    assert_eq!(frames[3].payload["status"], "completed");

    let bodies = endpoint.received();
    assert_eq!(bodies.len(), 2, "the node ran once more, with the answer");
    assert!(bodies[0].get("clarifications").is_none());
    let asked = &bodies[1]["clarifications"][0];
    assert_eq!((asked["question"].as_str(), asked["answer"].as_str()), (Some("Which market?"), Some("EU only")));
    assert_eq!(asked["requestId"], request_id);
    assert_eq!(server.planner_calls().len(), 1, "a question is no reason to plan again");

    let url = server.url(&format!("/api/v1/flex/runs/{run_id}"));
    let run: Value = server.http.get(url).bearer_auth(OPERATOR_KEY).send().await.unwrap().json().await.unwrap();
    let requests = run["hitlRequests"].as_array().unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!((requests[0]["kind"].as_str(), requests[0]["status"].as_str()), (Some("clarify"), Some("resolved")));
    assert_eq!(requests[0]["decision"]["decision"], "answered");
    assert_eq!(requests[0]["decision"]["operator"]["id"], "op-7");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ai_capability_asks_through_its_structured_output() {
    let server = TestServer::start(script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]);
        }
        if call.user.contains("### CLARIFICATIONS") {
            return post(0.9);
        }
        Reply::json(clarify("Formal or casual?"))
    }))
    .await;
    let frames = server.run(&envelope()).await;
    let run_id = frames[0].run_id.clone();
    let request_id = frames.iter().find(|f| f.kind == "hitl_request").unwrap().payload["request"]["id"].clone();
    let (status, frames, _) =
        resume(&server, decision(&run_id, request_id.as_str().unwrap(), true, Some("casual"))).await;
    assert_eq!(status, 200);
    assert_eq!(frames.last().unwrap().payload["status"], "completed");

    let calls: Vec<_> = server.llm_calls().into_iter().filter(|c| !c.is_planner()).collect();
    assert_eq!(calls.len(), 2);
    // The model may answer with its output or a signal, and is told how.
    let format = &calls[0].body["response_format"]["json_schema"]["schema"]["anyOf"];
    assert_eq!(format[1]["properties"]["signal"]["enum"], json!(["CLARIFY", "REPLAN"]));
    assert!(calls[0].system.contains("\"signal\":\"CLARIFY\""));
    assert!(calls[1].user.contains("- Question: Formal or casual?\n  Answer: casual"), "{}", calls[1].user);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_beyond_the_allowance_fail_the_node_and_a_declined_one_fails_the_run() {
    let endpoint = HttpCapability::start(200, clarify("Which market?"));
    let server = server_with(&endpoint, Some("[limits]\nmax_clarifications_per_run = 1\n")).await;

    let frames = server.run(&envelope()).await;
    let run_id = frames[0].run_id.clone();
    let request_id = frames[4].payload["request"]["id"].as_str().unwrap().to_string();
    let (_, frames, _) = resume(&server, decision(&run_id, &request_id, true, Some("EU"))).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "node_start", "node_error", "complete"]);
    assert_eq!(frames[2].payload["error"]["code"], "clarification_limit");
    assert_eq!(frames[3].payload["error"]["cause"], "clarification_limit");
    assert_eq!(endpoint.received().len(), 2);

    let frames = server.run(&envelope()).await;
    let run_id = frames[0].run_id.clone();
    let request_id = frames[4].payload["request"]["id"].as_str().unwrap().to_string();
    let (_, frames, _) = resume(&server, decision(&run_id, &request_id, false, Some("out of scope"))).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "node_error", "complete"]);
    assert_eq!(
        frames[1].payload["error"],
        json!({"code": "clarification_declined", "message": frames[1].payload["error"]["message"], "reason": "out of scope"})
    );
    assert_eq!(frames[2].payload["error"]["code"], "clarification_declined");
    server.wait_for_status(&run_id, "failed").await;
    assert_eq!(node_status(&server, &run_id, "draft").await, "failed");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions WHERE decision = 'declined'"), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_signal_fails_the_node_with_a_clear_error() {
    let endpoint = HttpCapability::start(200, json!({"signal": "CLARIFY", "question": "?", "text": "half output"}));
    let server = server_with(&endpoint, None).await;
    let frames = server.run(&envelope()).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "plan_generated", "node_start", "node_error", "complete"]);
    assert_eq!(frames[4].payload["error"]["code"], "capability_signal_invalid");
    let message = frames[4].payload["error"]["message"].as_str().unwrap();
    assert!(message.contains("unexpected key `text`"), "{message}");
    assert_eq!(endpoint.received().len(), 1, "content errors are not retried");
    server.stop().await;
}

fn replan_signal(reason: &str) -> Value {
    json!({"signal": "REPLAN", "reason": reason, "details": {"url": "https://example.test/p/1"}})
}

/// Plans `draft` (ai writer) then `publish` (an `http` capability calling `endpoint`).
async fn publishing_server(endpoint: &HttpCapability) -> TestServer {
    let publisher = http_capability(
        "http.publisher",
        &["post_copy"],
        &["publication"],
        json!({"type": "object", "required": ["url"]}),
        &endpoint.url,
    );
    let mut capabilities = default_capabilities();
    capabilities.push(publisher);
    let script = planner_then(&[("draft", "writer"), ("publish", "http.publisher")], post(0.9));
    TestServer::start_with(script, Options { capabilities, ..Options::default() }).await
}

fn with_replan_policy(policy: Value) -> Value {
    let mut envelope = envelope();
    envelope["policies"] = json!({"replan": policy});
    envelope
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replan_signal_replans_around_the_completed_work() {
    let endpoint = HttpCapability::sequence(vec![
        (200, replan_signal("the post is already published")),
        (200, json!({"url": "https://example.test/p/2"})),
    ]);
    let server = publishing_server(&endpoint).await;
    let frames = server.run(&envelope()).await;
    assert_eq!(
        kinds(&frames),
        [
            "start",
            "plan_requested",
            "plan_generated",
            "node_start",
            "node_complete",
            "node_start",
            "policy_triggered",
            "plan_requested",
            "plan_generated",
            "plan_updated",
            "node_start",
            "node_complete",
            "complete"
        ]
    );
    let trigger = &frames[6].payload["trigger"];
    assert_eq!(trigger["reason"], "capability_signal");
    assert_eq!(trigger["details"]["nodeId"], "publish");
    assert_eq!(trigger["details"]["reason"], "the post is already published");
    assert_eq!(frames[7].payload["phase"], "replan");
    assert_eq!(frames[7].payload["replan"]["reason"], "capability_signal");
    assert_eq!(frames[10].node_id.as_deref(), Some("publish"), "only the unfinished step runs again");
    assert_eq!(frames[12].payload["status"], "completed");

    let planner = server.planner_calls();
    assert_eq!(planner.len(), 2);
    let prompt = &planner[1].user;
    assert!(prompt.contains("### CAPABILITY SIGNAL\nCapability http.publisher (node publish) found the remaining plan invalid: the post is already published"), "{prompt}");
    assert!(prompt.contains("https://example.test/p/1"), "the signal's details reach the planner");
    let completed = prompt.split("### COMPLETED NODES\n").nth(1).unwrap();
    assert!(completed.starts_with("- stage \"draft\""), "{completed}");
    assert_eq!(server.capability_calls("writer"), 1, "completed work is not done again");
    assert_eq!(endpoint.received().len(), 2);

    let run_id = &frames[0].run_id;
    let run = flexrun::store::runs::get(&mut server.db(), run_id).unwrap();
    assert_eq!((run.replans, run.goal_condition_replans, run.signal_replans), (1, 0, 1));
    assert_eq!(frames[7].payload["budget"]["used"]["capabilitySignal"], 1);
    let nodes = server.nodes(run_id).await;
    let first_publish = nodes.iter().find(|n| n["planVersion"] == 1 && n["nodeId"] == "publish").unwrap();
    assert_eq!(first_publish["status"], "discarded");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_that_always_signals_fails_the_run_after_max_replans() {
    let endpoint = HttpCapability::start(200, replan_signal("never right"));
    let server = publishing_server(&endpoint).await;
    let frames = server.run(&with_replan_policy(json!({"maxReplans": 2}))).await;
    assert_eq!(kinds(&frames).iter().filter(|k| **k == "policy_triggered").count(), 2);
    assert_eq!(server.planner_calls().len(), 3);
    let error = frames.iter().rfind(|f| f.kind == "node_error").unwrap();
    assert_eq!(error.payload["error"]["code"], "replan_signal_refused");
    let message = error.payload["error"]["message"].as_str().unwrap();
    assert!(message.contains("\"never right\"") && message.contains("all 2 replans"), "{message}");
    let complete = &frames.last().unwrap().payload;
    assert_eq!(
        (complete["status"].as_str(), complete["error"]["cause"].as_str()),
        (Some("failed"), Some("replan_signal_refused"))
    );
    assert_eq!(complete["error"]["signal"]["reason"], "never right");
    assert_eq!(endpoint.received().len(), 3);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replanning_disabled_a_signal_fails_its_node_without_a_replan() {
    let endpoint = HttpCapability::start(200, replan_signal("stale plan"));
    let server = publishing_server(&endpoint).await;
    let frames = server.run(&with_replan_policy(json!({"enabled": false}))).await;
    assert!(!kinds(&frames).contains(&"policy_triggered"));
    assert_eq!(server.planner_calls().len(), 1);
    let error = frames.iter().find(|f| f.kind == "node_error").unwrap();
    assert!(error.payload["error"]["message"].as_str().unwrap().contains("Replanning is disabled"));
    assert_eq!(frames.last().unwrap().payload["status"], "failed");
    server.stop().await;
}
