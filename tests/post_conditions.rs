//! Capability post-conditions end to end: a failed post-condition runs the node again with the
//! failures in its prompt; once attempts are spent the `onPostConditionFailed` policy acts
//! (default: the node fails); results are on `node_complete`, persisted and summarised on
//! `complete`; bad registrations are 400.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use serde_json::{Value, json};
use support::*;

fn post_schema() -> Value {
    json!({"type": "object", "required": ["text", "quality_score"],
           "properties": {"text": {"type": "string"}, "quality_score": {"type": "number"}}})
}

/// The writer, with the post-condition `quality_score >= 0.8` on its `post_copy`.
fn checked_writer() -> Value {
    let mut writer = ai_capability("writer", &["brief"], &["post_copy"], post_schema());
    writer["postConditions"] =
        json!([{"facet": "post_copy", "path": "/quality_score", "condition": {"dsl": "quality_score >= 0.8"}}]);
    writer
}

/// Plans `draft` (writer); after a replan, `redo` (editor). The writer scores `first`, and 0.9
/// once told about its failures.
fn script_scoring(first: f64) -> flexrun::llm::standin::Script {
    script(move |call| {
        if call.is_planner() {
            if call.user.contains("### REPLAN REASON") {
                return plan(&[("redo", "editor")]);
            }
            return plan(&[("draft", "writer")]);
        }
        match call.capability_id() {
            Some("writer") if call.user.contains("### PREVIOUS POST-CONDITION FAILURES") => post(0.9),
            Some("writer") => post(first),
            _ => post(0.9),
        }
    })
}

async fn server(first: f64) -> TestServer {
    let editor = ai_capability("editor", &["brief"], &["post_copy"], post_schema());
    let options = Options { capabilities: vec![checked_writer(), editor], ..Options::default() };
    TestServer::start_with(script_scoring(first), options).await
}

fn with_policy(trigger: Value, action: Value) -> Value {
    let mut envelope = envelope();
    envelope["policies"] = json!({"runtime": [{"id": "post", "trigger": trigger, "action": action}]});
    envelope
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_post_condition_runs_the_node_again_with_the_failures() {
    let server = server(0.5).await;
    let frames = server.run(&envelope()).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "plan_generated", "node_start", "policy_update", "node_complete", "complete"]
    );
    let retry = &frames[4].payload;
    assert_eq!(
        (retry["action"].as_str(), retry["triggerKind"].as_str()),
        (Some("retry"), Some("onPostConditionFailed"))
    );
    assert_eq!((retry["attempts"].as_u64(), retry["maxAttempts"].as_u64()), (Some(1), Some(1)));
    assert_eq!(retry["policyId"], "writer.postConditions");
    assert_eq!(retry["postConditionResults"][0]["satisfied"], false);
    assert_eq!(retry["postConditionResults"][0]["observedValue"], 0.5);

    let complete_node = &frames[5].payload;
    assert_eq!(complete_node["output"]["quality_score"], 0.9);
    assert_eq!(complete_node["postConditionResults"][0]["satisfied"], true);
    let summary = &frames[6].payload["post_condition_results"];
    assert_eq!(summary[0]["nodeId"], "draft");
    assert_eq!(summary[0]["results"][0]["expression"], "quality_score >= 0.8");

    let writer: Vec<_> = server.llm_calls().into_iter().filter(|c| c.capability_id() == Some("writer")).collect();
    assert_eq!(writer.len(), 2);
    assert!(!writer[0].user.contains("POST-CONDITION"));
    assert!(writer[1].user.contains("Previous post-condition failures detected."), "{}", writer[1].user);
    assert!(writer[1].user.contains("\"failuresSoFar\":1"));

    let nodes = server.nodes(&frames[0].run_id).await;
    assert_eq!(nodes[0]["postConditionResults"][0]["satisfied"], true);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_conditions_that_keep_failing_fail_the_node_by_default() {
    // The writer never improves: a model that ignores the failures.
    let editor = ai_capability("editor", &["brief"], &["post_copy"], post_schema());
    let options = Options { capabilities: vec![checked_writer(), editor], ..Options::default() };
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], post(0.4)), options).await;
    let frames = server.run(&envelope()).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "plan_generated", "node_start", "policy_update", "node_error", "complete"]
    );
    let error = &frames[5].payload["error"];
    assert_eq!(error["code"], "post_condition_failed");
    assert!(error["message"].as_str().unwrap().contains("after 2 attempt(s): quality_score >= 0.8"), "{error}");
    assert_eq!(frames[6].payload["error"]["cause"], "post_condition_failed");
    assert_eq!(server.capability_calls("writer"), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_post_condition_failed_policy_replans_or_emits() {
    let server = server(0.5).await;
    // No retry; plan again instead.
    let replan = with_policy(
        json!({"kind": "onPostConditionFailed", "selector": {"capabilityId": "writer"}, "maxRetries": 0}),
        json!({"type": "replan"}),
    );
    let frames = server.run(&replan).await;
    let trigger = frames.iter().find(|f| f.kind == "policy_triggered").expect("a replan").payload.clone();
    assert_eq!(trigger["trigger"]["reason"], "post_condition_failed");
    assert_eq!(trigger["trigger"]["details"]["policyId"], "post");
    assert!(trigger["replan"]["policy"]["rationale"].as_str().unwrap().contains("quality_score >= 0.8"));
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    assert_eq!(server.capability_calls("writer"), 1);
    let run = flexrun::store::runs::get(&mut server.db(), &frames[0].run_id).unwrap();
    assert_eq!((run.replans, run.post_condition_replans), (1, 1));

    let emit = with_policy(
        json!({"kind": "onPostConditionFailed", "maxRetries": 0}),
        json!({"type": "emit", "event": "weak_draft"}),
    );
    let frames = server.run(&emit).await;
    let tail: Vec<&str> = kinds(&frames)[4..].to_vec();
    assert_eq!(tail, ["policy_update", "log", "node_error", "complete"]);
    assert_eq!(frames[4].payload["event"], "weak_draft");
    assert_eq!(frames[6].payload["error"]["code"], "post_condition_failed");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_post_conditions_are_400_with_their_pointers() {
    let server = server(0.9).await;
    let register = |registration: Value| {
        let server = &server;
        async move {
            let response = server
                .http
                .post(server.url("/api/v1/flex/capabilities/register"))
                .bearer_auth(OPERATOR_KEY)
                .json(&registration)
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        }
    };
    let mut other_facet = checked_writer();
    other_facet["capabilityId"] = json!("writer2");
    other_facet["postConditions"][0]["facet"] = json!("tags");
    let (status, body) = register(other_facet).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["details"][0]["path"], "/postConditions/0/facet");
    assert_eq!(body["error"]["details"][0]["code"], "undeclared_facet");

    let mut bad_dsl = checked_writer();
    bad_dsl["capabilityId"] = json!("writer3");
    bad_dsl["postConditions"][0]["condition"] = json!({"dsl": "quality_score >="});
    let (status, body) = register(bad_dsl).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["details"][0]["path"], "/postConditions/0/condition/dsl");

    let mut retries = checked_writer();
    retries["capabilityId"] = json!("writer4");
    retries["metadata"] = json!({"postConditionPolicy": {"maxRetries": 11}});
    let (status, body) = register(retries).await;
    assert_eq!(
        (status, body["error"]["details"][0]["path"].as_str()),
        (400, Some("/metadata/postConditionPolicy/maxRetries"))
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_may_accept_an_output_that_failed_its_post_conditions() {
    let options = Options { capabilities: vec![checked_writer()], ..Options::default() };
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], post(0.4)), options).await;
    let mut envelope = with_policy(
        json!({"kind": "onPostConditionFailed", "maxRetries": 0}),
        json!({"type": "hitl", "rationale": "a person decides"}),
    );
    envelope.as_object_mut().unwrap().remove("goal_condition");

    let frames = server.run(&envelope).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "plan_generated", "node_start", "hitl_request", "log"]);
    let request = frames[4].payload["request"].clone();
    assert_eq!((request["subject"].as_str(), request["nodeId"].as_str()), (Some("policy"), Some("draft")));
    assert_eq!(request["context"]["candidateOutput"]["quality_score"], 0.4);
    assert!(request["question"].as_str().unwrap().contains("quality_score >= 0.8"));
    let run_id = frames[0].run_id.clone();
    server.wait_for_status(&run_id, "awaiting_hitl").await;

    let request_id = request["id"].as_str().unwrap();
    let (_, frames, _) = resume(&server, decision(&run_id, request_id, true, None)).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "node_complete", "complete"]);
    assert_eq!(frames[1].payload["output"]["quality_score"], 0.4);
    assert_eq!(frames[1].payload["postConditionResults"][0]["satisfied"], false);
    assert_eq!(frames[2].payload["status"], "completed");
    assert_eq!(server.capability_calls("writer"), 1, "the accepted output is not produced again");

    // Rejected without a rejectAction: the run fails.
    let frames = server.run(&envelope).await;
    let request_id = frames[4].payload["request"]["id"].clone();
    let (_, frames, _) = resume(&server, decision(&frames[0].run_id, request_id.as_str().unwrap(), false, None)).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "complete"]);
    assert_eq!(frames[1].payload["error"]["code"], "operator_rejected");
    server.stop().await;
}
