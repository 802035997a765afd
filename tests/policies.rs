//! Runtime policies end to end: `onNodeComplete` (selector + condition) with each action,
//! `onStart` replans, `goto` bounded by `maxAttempts`, and envelopes asking for what flexrun does
//! not run rejected at the boundary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

fn with_policies(policies: Value) -> Value {
    let mut envelope = envelope();
    envelope["policies"] = json!({"runtime": policies});
    envelope
}

/// After the writer, when the draft scores below 0.8, do `action`.
fn low_score(action: Value) -> Value {
    with_policies(json!([{
        "id": "low-score",
        "trigger": {"kind": "onNodeComplete", "selector": {"capabilityId": "writer"},
                    "condition": {"dsl": "quality_score < 0.8"}},
        "action": action
    }]))
}

/// Plans `draft` (writer scoring `score`); asked again by a policy, `draft` then `polish` (0.9).
fn writer_scoring(score: f64) -> flexrun::llm::standin::Script {
    script(move |call| {
        if call.is_planner() {
            if call.user.contains("### RUNTIME POLICY") {
                return plan(&[("draft", "writer"), ("polish", "editor")]);
            }
            return plan(&[("draft", "writer")]);
        }
        match call.capability_id() {
            Some("writer") => post(score),
            _ => post(0.9),
        }
    })
}

fn frames_of<'a>(frames: &'a [flexrun::events::ReceivedFrame], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f.kind == kind).map(|f| &f.payload).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matching_node_complete_policy_replans_and_one_that_does_not_match_does_nothing() {
    let server = TestServer::start(writer_scoring(0.5)).await;
    let action = json!({"type": "replan", "rationale": "the draft scores too low"});
    let frames = server.run(&low_score(action.clone())).await;
    assert_eq!(
        kinds(&frames),
        [
            "start",
            "plan_requested",
            "plan_generated",
            "node_start",
            "node_complete",
            "policy_triggered",
            "plan_requested",
            "plan_generated",
            "plan_updated",
            "node_start",
            "node_complete",
            "complete"
        ]
    );
    let trigger = &frames[5].payload["trigger"];
    assert_eq!(trigger["reason"], "policy_runtime_replan");
    assert_eq!(
        (trigger["details"]["policyId"].as_str(), trigger["details"]["triggerKind"].as_str()),
        (Some("low-score"), Some("onNodeComplete"))
    );
    assert_eq!(frames[6].payload["replan"]["policy"]["nodeId"], "draft");
    assert_eq!(frames[9].node_id.as_deref(), Some("polish"), "the completed draft is kept");
    assert_eq!(frames[11].payload["status"], "completed");
    let planner = server.planner_calls();
    assert_eq!(planner.len(), 2);
    assert!(planner[1].user.contains(
        "### RUNTIME POLICY\nRuntime policy \"low-score\" (onNodeComplete) asked for a new plan after node draft. \
         Rationale: the draft scores too low"
    ));
    // One budget view: counted by reason and in total, persisted, shown on plan_requested and
    // in GET /runs/{id}.
    assert_eq!(frames[1].payload["budget"]["used"]["total"], 0);
    assert_eq!(
        frames[6].payload["budget"]["used"],
        json!({"total": 1, "goalCondition": 0, "capabilitySignal": 0, "runtimePolicy": 1, "operator": 0, "postCondition": 0, "nodeError": 0})
    );
    assert_eq!(frames[6].payload["budget"]["maxReplans"], 4);
    let run = flexrun::store::runs::get(&mut server.db(), &frames[0].run_id).unwrap();
    assert_eq!((run.replans, run.policy_replans, run.signal_replans), (1, 1, 0));
    let url = server.url(&format!("/api/v1/flex/runs/{}", frames[0].run_id));
    let shown: Value = server.http.get(url).bearer_auth(OPERATOR_KEY).send().await.unwrap().json().await.unwrap();
    assert_eq!(shown["run"]["replans"]["runtimePolicy"], 1);
    assert_eq!(shown["run"]["replanBudget"]["used"]["total"], 1);
    assert_eq!(shown["run"]["replanBudget"]["maxGoalConditionReplans"], 2);
    server.stop().await;

    let server = TestServer::start(writer_scoring(0.9)).await;
    let frames = server.run(&low_score(action)).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "plan_generated", "node_start", "node_complete", "complete"]
    );
    assert_eq!(server.planner_calls().len(), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_and_emit_actions() {
    let server = TestServer::start(writer_scoring(0.5)).await;
    let frames = server.run(&low_score(json!({"type": "fail", "message": "drafts below 0.8 are refused"}))).await;
    assert_eq!(
        kinds(&frames),
        ["start", "plan_requested", "plan_generated", "node_start", "node_complete", "complete"]
    );
    let error = &frames[5].payload["error"];
    assert_eq!(frames[5].payload["status"], "failed");
    assert_eq!(
        (error["code"].as_str(), error["message"].as_str()),
        (Some("policy_failed"), Some("drafts below 0.8 are refused"))
    );
    assert_eq!((error["policyId"].as_str(), error["nodeId"].as_str()), (Some("low-score"), Some("draft")));

    // emit: announced, and the run goes on (here to its goal-repair replan, where the editor helps).
    let frames = server.run(&low_score(json!({"type": "emit", "event": "low_draft", "payload": {"min": 0.8}}))).await;
    let updates = frames_of(&frames, "policy_update");
    assert_eq!(updates.len(), 1);
    assert_eq!((updates[0]["action"].as_str(), updates[0]["event"].as_str()), (Some("emit"), Some("low_draft")));
    assert_eq!(updates[0]["payload"], json!({"min": 0.8}));
    let update_at = frames.iter().position(|f| f.kind == "policy_update").unwrap();
    assert_eq!(frames[update_at + 1].kind, "log");
    assert_eq!(frames[update_at + 1].message.as_deref(), Some("low_draft"));
    assert_eq!(frames[update_at + 2].kind, "goal_condition_failed");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goto_runs_the_step_again_at_most_max_attempts_times() {
    let server = TestServer::start(planner_then(&[("draft", "writer"), ("polish", "editor")], post(0.9))).await;
    let envelope = with_policies(json!([{
        "id": "again",
        "trigger": {"kind": "onNodeComplete", "selector": {"nodeId": "polish"}},
        "action": {"type": "goto", "next": "draft", "maxAttempts": 2}
    }]));
    let frames = server.run(&envelope).await;
    let updates = frames_of(&frames, "policy_update");
    let attempts: Vec<u64> = updates.iter().map(|u| u["attempts"].as_u64().unwrap()).collect();
    assert_eq!(attempts, [1, 2]);
    assert_eq!(updates[0]["resetNodes"], json!(["draft", "polish"]));
    assert_eq!(updates[0]["maxAttempts"], 2);
    assert_eq!(server.capability_calls("writer"), 3);
    assert_eq!(server.capability_calls("editor"), 3);
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let run_id = &frames[0].run_id;
    let nodes = server.nodes(run_id).await;
    assert!(nodes.iter().all(|n| n["status"] == "completed"), "{nodes:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_start_policy_replans_before_any_node_runs() {
    let server = TestServer::start(writer_scoring(0.9)).await;
    let envelope = with_policies(json!([
        {"id": "rethink", "trigger": {"kind": "onStart"}, "action": {"type": "replan", "rationale": "plan twice"}}
    ]));
    let frames = server.run(&envelope).await;
    assert_eq!(
        &kinds(&frames)[..7],
        [
            "start",
            "plan_requested",
            "plan_generated",
            "policy_triggered",
            "plan_requested",
            "plan_generated",
            "plan_updated"
        ]
    );
    assert_eq!(frames[3].payload["trigger"]["details"]["triggerKind"], "onStart");
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    assert_eq!(server.planner_calls().len(), 2, "onStart fires once per run");
    assert_eq!(server.capability_calls("writer"), 1, "no node of the first plan ran");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_and_actions_flexrun_does_not_run_are_400_with_their_pointers() {
    let server = TestServer::start(writer_scoring(0.9)).await;
    let cases = [
        (
            json!({"kind": "onValidationFail"}),
            json!({"type": "fail"}),
            "/policies/runtime/0/trigger/kind",
            "unsupported",
        ),
        (
            json!({"kind": "onTimeout", "ms": 10}),
            json!({"type": "fail"}),
            "/policies/runtime/0/trigger/kind",
            "unsupported",
        ),
        (
            json!({"kind": "onMetricBelow", "metric": "m", "threshold": 1}),
            json!({"type": "fail"}),
            "/policies/runtime/0/trigger/kind",
            "unsupported",
        ),
        (json!({"kind": "onStart"}), json!({"type": "replan_run"}), "/policies/runtime/0/action/type", "legacy_action"),
        (
            json!({"kind": "onPostConditionFailed"}),
            json!({"type": "pause"}),
            "/policies/runtime/0/action/type",
            "unsupported",
        ),
        (
            json!({"kind": "onStart"}),
            json!({"type": "hitl", "rejectAction": {"type": "hitl"}}),
            "/policies/runtime/0/action/rejectAction/type",
            "unsupported",
        ),
    ];
    for (trigger, action, path, code) in cases {
        let body = with_policies(json!([{"id": "p", "trigger": trigger, "action": action}]));
        let response = server.post_run(&body).await;
        assert_eq!(response.status(), 400, "{trigger} {action}");
        let error: Value = response.json().await.unwrap();
        let detail = &error["error"]["details"][0];
        assert_eq!((detail["path"].as_str(), detail["code"].as_str()), (Some(path), Some(code)), "{error}");
    }
    let body = with_policies(json!([{"id": "p", "trigger": {"kind": "onStart"}, "action": {"type": "fail_run"}}]));
    let error: Value = server.post_run(&body).await.json().await.unwrap();
    assert_eq!(
        error["error"]["details"][0]["message"],
        "Legacy runtime policy action \"fail_run\" detected. Update the policy to use canonical action \"fail\"."
    );
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_waits_for_an_operator_and_approval_goes_on() {
    let server = TestServer::start(writer_scoring(0.9)).await;
    let envelope = with_policies(json!([
        {"id": "look", "trigger": {"kind": "onNodeComplete", "selector": {"nodeId": "draft"}},
         "action": {"type": "pause", "reason": "check the draft"}}
    ]));
    let frames = server.run(&envelope).await;
    assert_eq!(
        kinds(&frames),
        [
            "start",
            "plan_requested",
            "plan_generated",
            "node_start",
            "node_complete",
            "policy_update",
            "hitl_request",
            "log"
        ]
    );
    assert_eq!(
        (frames[5].payload["action"].as_str(), frames[5].payload["reason"].as_str()),
        (Some("pause"), Some("check the draft"))
    );
    let request = &frames[6].payload["request"];
    assert_eq!((request["kind"].as_str(), request["subject"].as_str()), (Some("approval"), Some("policy")));
    assert_eq!(request["question"], "Runtime policy \"look\" paused the run: check the draft. Approve to go on.");
    assert_eq!(request["context"]["policyId"], "look");
    assert_eq!(frames[7].message.as_deref(), Some("awaiting_policy_decision"));
    let run_id = frames[0].run_id.clone();
    server.wait_for_status(&run_id, "awaiting_hitl").await;

    let frames = resume(&server, decision(&run_id, request["id"].as_str().unwrap(), true, None)).await.1;
    assert_eq!(kinds(&frames), ["hitl_resolved", "complete"]);
    assert_eq!(frames[1].payload["status"], "completed");
    assert_eq!(server.capability_calls("writer"), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hitl_runs_the_approve_or_reject_action_the_operator_chose() {
    let server = TestServer::start(writer_scoring(0.9)).await;
    let envelope = with_policies(json!([
        {"id": "review", "trigger": {"kind": "onNodeComplete", "selector": {"nodeId": "draft"}},
         "action": {"type": "hitl", "rationale": "is the draft on brand?",
                    "approveAction": {"type": "emit", "event": "on_brand"},
                    "rejectAction": {"type": "replan", "rationale": "off brand"}}}
    ]));

    // Approved: the approve action (emit), then the run goes on.
    let frames = server.run(&envelope).await;
    let run_id = frames[0].run_id.clone();
    let request = frames.iter().find(|f| f.kind == "hitl_request").unwrap().payload["request"].clone();
    assert_eq!(request["context"]["approveAction"], "emit");
    assert_eq!(request["context"]["rejectAction"], "replan");
    let frames = resume(&server, decision(&run_id, request["id"].as_str().unwrap(), true, None)).await.1;
    assert_eq!(kinds(&frames), ["hitl_resolved", "policy_update", "log", "complete"]);
    assert_eq!(frames[1].payload["event"], "on_brand");
    assert_eq!(frames[1].payload["requestId"], request["id"]);
    assert_eq!(frames[3].payload["status"], "completed");

    // Rejected: the reject action (a replan), not a failed run.
    let frames = server.run(&envelope).await;
    let run_id = frames[0].run_id.clone();
    let request_id = frames.iter().find(|f| f.kind == "hitl_request").unwrap().payload["request"]["id"].clone();
    let frames = resume(&server, decision(&run_id, request_id.as_str().unwrap(), false, None)).await.1;
    assert_eq!(&kinds(&frames)[..3], ["hitl_resolved", "policy_triggered", "plan_requested"]);
    assert_eq!(frames[1].payload["trigger"]["reason"], "policy_runtime_replan");
    assert_eq!(frames[1].payload["trigger"]["details"]["rationale"], "off brand");
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let run = flexrun::store::runs::get(&mut server.db(), &run_id).unwrap();
    assert_eq!((run.replans, run.policy_replans), (1, 1));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_start_hitl_without_a_reject_action_fails_the_run_when_rejected() {
    let server = TestServer::start(writer_scoring(0.9)).await;
    let envelope = with_policies(json!([
        {"id": "gate", "trigger": {"kind": "onStart"}, "action": {"type": "hitl", "rationale": "go?"}}
    ]));
    let frames = server.run(&envelope).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "plan_generated", "hitl_request", "log"]);
    let request_id = frames[3].payload["request"]["id"].as_str().unwrap().to_string();
    let frames = resume(&server, decision(&frames[0].run_id, &request_id, false, None)).await.1;
    assert_eq!(kinds(&frames), ["hitl_resolved", "complete"]);
    assert_eq!(frames[1].payload["error"]["code"], "operator_rejected");
    assert_eq!(server.capability_calls("writer"), 0, "no node ran before the gate");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replan_while_a_policy_waits_supersedes_the_wait() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let tagger_calls = std::sync::Arc::new(AtomicUsize::new(0));
    let calls = tagger_calls.clone();
    let server = TestServer::start(script(move |call| {
        if call.is_planner() {
            return plan(&[("draft", "writer"), ("tags", "tagger")]);
        }
        match call.capability_id() {
            // The tagger runs alongside the draft and, the first time, finds the plan wrong.
            Some("tagger") if calls.fetch_add(1, Ordering::SeqCst) == 0 => {
                Reply::json(json!({"signal": "REPLAN", "reason": "tags exist already"}))
                    .after(Duration::from_millis(300))
            }
            Some("tagger") => Reply::json(json!({"tags": ["rust"]})),
            _ => post(0.9),
        }
    }))
    .await;
    let envelope = with_policies(json!([
        {"id": "look", "trigger": {"kind": "onNodeComplete", "selector": {"nodeId": "draft"}}, "action": {"type": "pause"}}
    ]));
    let frames = server.run(&envelope).await;
    let kinds = kinds(&frames);
    let asked = kinds.iter().position(|k| *k == "hitl_request").expect("the draft's policy asked");
    let replanned = kinds.iter().position(|k| *k == "policy_triggered").expect("the signal replanned");
    assert!(asked < replanned, "{kinds:?}");
    assert_eq!(frames.last().unwrap().payload["status"], "completed", "{kinds:?}");
    let run_id = &frames[0].run_id;
    let superseded = server
        .count(&format!("SELECT COUNT(*) AS n FROM hitl_requests WHERE run_id = '{run_id}' AND status = 'superseded'"));
    assert_eq!(superseded, 1);
    server.stop().await;
}
