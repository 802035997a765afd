//! Operator control end to end: the plan approval gate, run.resume (approve, reject, reject with
//! feedback), operator replans, completion approval, human tasks, cancel, and racing operators.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::time::Duration;

use flexrun::events::ReceivedFrame;
use serde_json::{Value, json};
use support::*;

fn with_plan_approval(mut envelope: Value) -> Value {
    envelope["policies"] = json!({"approval": {"plan": "required"}});
    envelope
}

async fn post_json(server: &TestServer, path: &str, body: Value) -> reqwest::Response {
    server.http.post(server.url(path)).bearer_auth(OPERATOR_KEY).json(&body).send().await.expect(path)
}

/// The run's frames after `after`, until the stream ends (the run ends or pauses).
async fn follow(server: &TestServer, run_id: &str, after: u64) -> Vec<ReceivedFrame> {
    let url = server.url(&format!("/api/v1/flex/runs/{run_id}/stream?after={after}"));
    let response = server.http.get(url).bearer_auth(OPERATOR_KEY).send().await.unwrap();
    read_frames(response, usize::MAX).await
}

async fn get_run(server: &TestServer, run_id: &str) -> Value {
    let url = server.url(&format!("/api/v1/flex/runs/{run_id}"));
    server.http.get(url).bearer_auth(OPERATOR_KEY).send().await.unwrap().json().await.unwrap()
}

fn approve(run_id: &str, request_id: &str) -> Value {
    json!({"runId": run_id, "operator": {"id": "op-1", "displayName": "Ada"}, "note": "looks fine",
           "decision": {"requestId": request_id, "approved": true}})
}

fn request_id(frame: &ReceivedFrame) -> String {
    assert_eq!(frame.kind, "hitl_request");
    frame.payload["request"]["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_lifecycle_with_an_operator_replan() {
    let server = TestServer::start(feedback_replan_script()).await;
    let frames = server.run(&with_plan_approval(envelope())).await;
    assert_eq!(kinds(&frames), ["start", "plan_requested", "plan_generated", "hitl_request"]);
    let run_id = frames[0].run_id.clone();
    let first_request = request_id(&frames[3]);
    assert_eq!(frames[3].payload["request"]["kind"], "approval");
    assert_eq!(frames[3].payload["request"]["subject"], "plan");
    assert_eq!(frames[3].payload["request"]["planVersion"], 1);
    server.wait_for_status(&run_id, "awaiting_hitl").await;

    // Replan while waiting: the pending approval is superseded and the plan made again.
    let response = post_json(
        &server,
        &format!("/api/v1/flex/runs/{run_id}/replan"),
        json!({"feedback": "add a polish step", "operator": {"id": "op-2"}}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({"runId": run_id, "status": "planning"}));
    let replanned = follow(&server, &run_id, 4).await;
    assert_eq!(
        kinds(&replanned),
        ["hitl_resolved", "policy_triggered", "plan_requested", "plan_generated", "plan_updated", "hitl_request"]
    );
    assert_eq!(replanned[0].payload["request"]["status"], "superseded");
    assert_eq!(replanned[1].payload["trigger"]["reason"], "operator_replan");
    assert_eq!(replanned[2].payload["replan"]["reason"], "operator_replan");
    assert_eq!(replanned[3].plan_version, Some(2));
    let planner = server.planner_calls();
    assert_eq!(planner.len(), 2);
    assert!(planner[1].user.contains("### OPERATOR FEEDBACK\nAn operator asked for a new plan: add a polish step"));
    let second_request = request_id(&replanned[5]);
    assert_ne!(first_request, second_request);
    assert_eq!(replanned[5].payload["request"]["planVersion"], 2);
    // The old plan is kept as history; its unfinished node is discarded, not run.
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM run_events WHERE event_type = 'plan_generated'"), 2);
    let discarded =
        server.nodes(&run_id).await.into_iter().filter(|n| n["planVersion"] == 1 && n["status"] == "discarded");
    assert_eq!(discarded.count(), 1);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_requests WHERE status = 'superseded'"), 1);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_requests WHERE status = 'pending'"), 1);
    assert_eq!(server.capability_calls("writer"), 0, "nothing ran before the approval");

    // The stale version — however the number is written — and the superseded request are
    // refused; nothing changes.
    for stale in [json!(1), json!(1.0), json!(3.0), json!(1e30)] {
        let (status, _, body) =
            resume(&server, json!({"runId": run_id, "expectedPlanVersion": stale, "decision": {"approved": true}}))
                .await;
        assert_eq!((status, body["error"]["code"].as_str()), (409, Some("stale_plan_version")), "{stale}");
    }
    let (status, _, body) = resume(&server, approve(&run_id, &first_request)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("stale_request")));

    // Approving the new plan runs it to the end.
    let mut body = approve(&run_id, &second_request);
    body["expectedPlanVersion"] = json!(2.0);
    let (status, resumed, _) = resume(&server, body).await;
    assert_eq!(status, 200);
    assert_eq!(
        kinds(&resumed),
        ["hitl_resolved", "node_start", "node_complete", "node_start", "node_complete", "complete"]
    );
    assert_eq!(resumed[0].seq, 11, "the resume stream continues the run's sequence");
    assert_eq!(resumed[0].payload["decision"]["decision"], "approved");
    assert_eq!(resumed[5].payload["status"], "completed");
    let run = get_run(&server, &run_id).await;
    assert_eq!(run["run"]["status"], "completed");
    let requests = run["hitlRequests"].as_array().unwrap();
    assert_eq!(requests.len(), 2);
    assert_eq!((requests[0]["status"].as_str(), &requests[0]["decision"]), (Some("superseded"), &Value::Null));
    assert_eq!(requests[1]["decision"]["decision"], "approved");
    assert_eq!(requests[1]["decision"]["operator"]["displayName"], "Ada");
    assert_eq!(requests[1]["decision"]["note"], "looks fine");
    assert_eq!(run["run"]["replans"]["total"], 1, "an operator replan counts toward maxReplans");
    assert_eq!(run["run"]["replans"]["operator"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replan_answers_200_404_409_and_422() {
    let server = TestServer::start(script(|call| {
        if call.is_planner() {
            // The second run's planner is slow, so it can be caught while planning.
            let slow = call.user.contains("slow");
            let reply = plan(&[("draft", "writer")]);
            return if slow { reply.after(Duration::from_millis(1500)) } else { reply };
        }
        post(0.9)
    }))
    .await;
    let replan = |id: String| {
        let server = &server;
        async move { post_json(server, &format!("/api/v1/flex/runs/{id}/replan"), json!({})).await }
    };
    let response = replan("no-such-run".into()).await;
    assert_eq!(response.status(), 404);
    assert_eq!(response.json::<Value>().await.unwrap()["error"]["code"], "run_not_found");

    let completed = server.run(&envelope()).await;
    let response = replan(completed[0].run_id.clone()).await;
    assert_eq!(response.status(), 422);
    assert_eq!(response.json::<Value>().await.unwrap()["error"]["code"], "invalid_run_state");

    let mut slow = envelope();
    slow["objective"] = json!("slow planning");
    let planning = read_frames(server.post_run(&slow).await, 2).await;
    assert_eq!(kinds(&planning), ["start", "plan_requested"]);
    let response = replan(planning[0].run_id.clone()).await;
    assert_eq!(response.status(), 409);
    assert_eq!(response.json::<Value>().await.unwrap()["error"]["code"], "replan_in_progress");

    let paused = server.run(&with_plan_approval(envelope())).await;
    let response = replan(paused[0].run_id.clone()).await;
    assert_eq!(response.status(), 200);
    // The new plan needs approval again.
    server.wait_for_status(&paused[0].run_id, "awaiting_hitl").await;
    assert_eq!(server.planner_calls().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejection_fails_the_run_or_replans_with_the_feedback() {
    let server = TestServer::start(feedback_replan_script()).await;
    let paused = server.run(&with_plan_approval(envelope())).await;
    let run_id = paused[0].run_id.clone();
    let body = json!({"runId": run_id, "decision": {"requestId": request_id(&paused[3]), "approved": false}});
    let (status, frames, _) = resume(&server, body).await;
    assert_eq!(status, 200);
    assert_eq!(kinds(&frames), ["hitl_resolved", "complete"]);
    assert_eq!(frames[1].payload["status"], "failed");
    assert_eq!(frames[1].payload["error"]["code"], "operator_rejected");
    server.wait_for_status(&run_id, "failed").await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions WHERE decision = 'rejected'"), 1);

    let paused = server.run(&with_plan_approval(envelope())).await;
    let run_id = paused[0].run_id.clone();
    let body = json!({"runId": run_id, "decision": {"approved": false, "freeformText": "needs a polish step"}});
    let (status, frames, _) = resume(&server, body).await;
    assert_eq!(status, 200);
    assert_eq!(kinds(&frames), ["hitl_resolved", "plan_requested", "plan_generated", "plan_updated", "hitl_request"]);
    assert_eq!(frames[0].payload["replan"]["reason"], "operator_rejected");
    assert_eq!(frames[1].payload["replan"]["feedback"], "needs a polish step");
    let last_prompt = server.planner_calls().last().unwrap().user.clone();
    assert!(last_prompt.contains("### REPLAN REASON\noperator_rejected"));
    assert!(last_prompt.contains("An operator asked for a new plan: needs a polish step"));
    let run = flexrun::store::runs::get(&mut server.db(), &run_id).unwrap();
    assert_eq!((run.status.as_str(), run.replans, run.plan_version), ("awaiting_hitl", 1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_plan_whose_goal_still_fails_is_replanned_not_completed() {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let paused = server.run(&with_plan_approval(envelope())).await;
    let run_id = paused[0].run_id.clone();
    let (_, frames, _) = resume(&server, approve(&run_id, &request_id(&paused[3]))).await;
    assert_eq!(
        kinds(&frames),
        [
            "hitl_resolved",
            "node_start",
            "node_complete",
            "goal_condition_failed",
            "plan_requested",
            "plan_generated",
            "plan_updated",
            "hitl_request"
        ]
    );
    let (_, frames, _) = resume(&server, approve(&run_id, &request_id(&frames[7]))).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "node_start", "node_complete", "complete"]);
    assert_eq!(frames[3].payload["status"], "completed");
    assert_eq!(frames[3].payload["goal_condition_results"][0]["satisfied"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_approval_is_asked_once() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let mut envelope = envelope();
    envelope["constraints"] = json!({"requiresHitlApproval": true});
    let paused = server.run(&envelope).await;
    assert_eq!(
        kinds(&paused),
        ["start", "plan_requested", "plan_generated", "node_start", "node_complete", "hitl_request"]
    );
    let request = &paused[5].payload["request"];
    assert_eq!(request["subject"], "completion");
    assert_eq!(request["context"]["output"]["post_copy"]["quality_score"], 0.9);
    let run_id = paused[0].run_id.clone();
    let (_, frames, _) = resume(&server, approve(&run_id, &request_id(&paused[5]))).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "complete"]);
    assert_eq!(frames[1].payload["status"], "completed");
    assert_eq!(server.capability_calls("writer"), 1, "the approved work is not redone");
}

fn human_reviewer() -> Value {
    json!({
        "capabilityId": "reviewer", "version": "1.0", "displayName": "Reviewer", "summary": "A person reviews the post",
        "kind": "validation", "agentType": "human", "inputFacets": ["post_copy"], "outputFacets": ["review"],
        "instructions": "Read the post and approve it or not.",
        "outputContract": {"mode": "json_schema", "schema": {"type": "object", "required": ["approved"],
            "properties": {"approved": {"type": "boolean"}}}}
    })
}

async fn human_server() -> TestServer {
    let mut capabilities = default_capabilities();
    capabilities.push(human_reviewer());
    let options = Options { capabilities, ..Options::default() };
    TestServer::start_with(planner_then(&[("draft", "writer"), ("review", "reviewer")], post(0.9)), options).await
}

async fn open_tasks(server: &TestServer) -> Vec<Value> {
    let response = server.http.get(server.url("/api/v1/flex/tasks")).bearer_auth(OPERATOR_KEY).send().await.unwrap();
    response.json::<Value>().await.unwrap()["tasks"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_task_output_is_checked_then_accepted() {
    let server = human_server().await;
    let paused = server.run(&envelope()).await;
    assert_eq!(
        kinds(&paused),
        ["start", "plan_requested", "plan_generated", "node_start", "node_complete", "node_start", "log"]
    );
    let run_id = paused[0].run_id.clone();
    assert_eq!(paused[5].payload["executorType"], "human");
    assert_eq!(paused[5].payload["assignment"]["nodeId"], "review");
    assert_eq!(paused[5].payload["assignment"]["inputs"]["post_copy"]["quality_score"], 0.9);
    assert_eq!(paused[6].message.as_deref(), Some("awaiting_human_assignment"));
    server.wait_for_status(&run_id, "awaiting_human").await;
    let tasks = open_tasks(&server).await;
    assert_eq!(tasks.len(), 1);
    assert_eq!((tasks[0]["runId"].as_str(), tasks[0]["nodeId"].as_str()), (Some(run_id.as_str()), Some("review")));

    // An output that breaks the contract keeps the run waiting.
    let invalid = json!({"runId": run_id, "payload": {"nodeId": "review", "output": {"approved": "yes"}}});
    let (status, frames, _) = resume(&server, invalid).await;
    assert_eq!(status, 200);
    assert_eq!(kinds(&frames), ["validation_error", "node_error"]);
    assert_eq!(frames[1].payload["error"]["code"], "human_output_invalid");
    assert_eq!(flexrun::store::runs::get(&mut server.db(), &run_id).unwrap().status.as_str(), "awaiting_human");
    assert_eq!(open_tasks(&server).await.len(), 1);

    // An approval is not what the run waits for.
    let (status, _, body) = resume(&server, json!({"runId": run_id, "decision": {"approved": true}})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("human_payload_required")));

    // An output for another request (a page open on a task a replan replaced) is refused.
    let task_id = tasks[0]["taskId"].as_str().unwrap();
    let elsewhere = json!({"runId": run_id,
                           "payload": {"requestId": "an-earlier-task", "nodeId": "review", "output": {"approved": true}}});
    let (status, _, body) = resume(&server, elsewhere).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("stale_request")), "{body}");

    let valid =
        json!({"runId": run_id, "payload": {"requestId": task_id, "nodeId": "review", "output": {"approved": true}}});
    let (_, frames, _) = resume(&server, valid).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "node_complete", "complete"]);
    assert_eq!(frames[1].payload["executorType"], "human");
    assert_eq!(frames[2].payload["status"], "completed");
    assert!(open_tasks(&server).await.is_empty());
    let reviewed =
        server.nodes(&run_id).await.into_iter().filter(|n| n["nodeId"] == "review" && n["status"] == "completed");
    assert_eq!(reviewed.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_human_task_fails_the_run() {
    let server = human_server().await;
    let paused = server.run(&envelope()).await;
    let run_id = paused[0].run_id.clone();
    let task_id = open_tasks(&server).await[0]["taskId"].as_str().unwrap().to_string();
    let path = format!("/api/v1/flex/tasks/{task_id}/decline");
    let response = post_json(&server, &path, json!({})).await;
    assert_eq!(response.status(), 400, "a reason is required");
    let response = post_json(&server, &path, json!({"reason": "off-brand", "operator": {"id": "op"}})).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!((body["status"].as_str(), body["nodeId"].as_str()), (Some("failed"), Some("review")));
    let log = server.event_log(&run_id);
    let last = &log.last().unwrap().2;
    assert_eq!((last["type"].as_str(), last["payload"]["status"].as_str()), (Some("complete"), Some("failed")));
    assert_eq!(last["payload"]["error"]["code"], "human_task_declined");
    // The node shows the refusal's reason, from its `node_error` frame.
    let refused = &log[log.len() - 2].2;
    assert_eq!(
        (refused["type"].as_str(), refused["payload"]["error"]["reason"].as_str()),
        (Some("node_error"), Some("off-brand"))
    );
    let review = server.nodes(&run_id).await.into_iter().rfind(|n| n["nodeId"] == "review").unwrap();
    assert_eq!((review["status"].as_str(), review["error"]["reason"].as_str()), (Some("failed"), Some("off-brand")));
    assert_eq!(review["error"]["code"], "human_task_declined");
    assert_eq!(post_json(&server, &path, json!({"reason": "again"})).await.status(), 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_running_and_paused_runs_and_refuses_ended_ones() {
    let server = TestServer::start(script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer"), ("polish", "editor")]);
        }
        post(0.9).after(Duration::from_secs(20))
    }))
    .await;
    let response = server.post_run(&envelope()).await;
    let mut stream = Box::pin(read_frames(response, usize::MAX));
    // The stream is read on; meanwhile the run is cancelled once its first node has started.
    let run_id = loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = server.count("SELECT COUNT(*) AS n FROM run_events WHERE event_type = 'node_start'");
        if started == 1 {
            break flexrun::store::runs::page(&mut server.db(), Default::default(), None, 1).unwrap()[0].run_id.clone();
        }
    };
    let response =
        post_json(&server, &format!("/api/v1/flex/runs/{run_id}/cancel"), json!({"note": "wrong brief"})).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({"runId": run_id, "status": "cancelled"}));
    let frames = tokio::time::timeout(Duration::from_secs(10), &mut stream).await.expect("the stream ends");
    assert_eq!(kinds(&frames), ["start", "plan_requested", "plan_generated", "node_start", "node_error", "complete"]);
    assert_eq!(frames[4].payload["error"]["code"], "cancelled");
    assert_eq!(frames[5].payload["status"], "cancelled");
    assert_eq!(frames[5].payload["error"]["note"], "wrong brief");
    assert_eq!(server.nodes_with_status(&run_id, "cancelled").await, 1);
    assert_eq!(server.capability_calls("editor"), 0, "no node starts after a cancel");

    let cancel = |id: String| {
        let server = &server;
        async move { post_json(server, &format!("/api/v1/flex/runs/{id}/cancel"), json!({})).await }
    };
    let response = cancel(run_id.clone()).await;
    assert_eq!(response.status(), 409, "a cancelled run is terminal");
    assert_eq!(cancel("nope".into()).await.status(), 404);

    let paused = server.run(&with_plan_approval(envelope())).await;
    let paused_id = paused[0].run_id.clone();
    let response = cancel(paused_id.clone()).await;
    assert_eq!(response.status(), 200);
    let frames = follow(&server, &paused_id, 4).await;
    assert_eq!(kinds(&frames), ["hitl_resolved", "complete"]);
    assert_eq!(frames[0].payload["request"]["status"], "cancelled");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_requests WHERE status = 'cancelled'"), 1);
}

/// A run cancelled while a human task waits ends that node as it ends a running one: the run's
/// document and its console page show it `cancelled`, with the cancel's code, not still
/// `awaiting_human` in a run that ended; the frames are a cancel's usual ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_ends_the_human_task_the_run_waited_on() {
    let server = human_server().await;
    let run_id = server.run(&envelope()).await[0].run_id.clone();
    server.wait_for_status(&run_id, "awaiting_human").await;
    let review = |nodes: Vec<Value>| nodes.into_iter().rfind(|n| n["nodeId"] == "review").unwrap();
    assert_eq!(review(server.nodes(&run_id).await)["status"], "awaiting_human");

    let response = post_json(&server, &format!("/api/v1/flex/runs/{run_id}/cancel"), json!({})).await;
    assert_eq!(response.status(), 200);
    let log = server.event_log(&run_id);
    let kinds: Vec<&str> = log.iter().rev().take(2).map(|(_, kind, _)| kind.as_str()).collect();
    assert_eq!(kinds, ["complete", "hitl_resolved"], "no frame beyond a cancel's usual ones");
    let node = review(server.nodes(&run_id).await);
    assert_eq!((node["status"].as_str(), node["error"]["code"].as_str()), (Some("cancelled"), Some("cancelled")));
    assert!(node["completedAt"].is_string(), "{node}");
    let page = server.http.get(server.url(&format!("/ui/runs/{run_id}"))).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"data-node-id="review" data-status="cancelled""#), "{page}");
    assert!(!page.contains(r#"data-status="awaiting_human""#), "no node of the ended run waits: {page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_completed_run_is_a_conflict() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let frames = server.run(&envelope()).await;
    let run_id = &frames[0].run_id;
    let response = post_json(&server, &format!("/api/v1/flex/runs/{run_id}/cancel"), json!({})).await;
    assert_eq!(response.status(), 409);
    assert_eq!(response.json::<Value>().await.unwrap()["error"]["code"], "invalid_run_state");
    assert_eq!(flexrun::store::runs::get(&mut server.db(), run_id).unwrap().status.as_str(), "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_concurrent_approvals_exactly_one_wins() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    for _ in 0..5 {
        let paused = server.run(&with_plan_approval(envelope())).await;
        let body = approve(&paused[0].run_id, &request_id(&paused[3]));
        let (a, b) = tokio::join!(
            post_json(&server, "/api/v1/flex/run.resume", body.clone()),
            post_json(&server, "/api/v1/flex/run.resume", body)
        );
        let mut statuses = [a.status().as_u16(), b.status().as_u16()];
        statuses.sort();
        assert_eq!(statuses, [200, 409]);
        let loser = if a.status() == 409 { a } else { b };
        let code = loser.json::<Value>().await.unwrap()["error"]["code"].clone();
        assert!(code == "invalid_run_state" || code == "stale_request", "{code}");
    }
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions"), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_resume_bodies_are_400_and_change_nothing() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let paused = server.run(&with_plan_approval(envelope())).await;
    let run_id = paused[0].run_id.clone();
    for (body, path) in [
        (json!({"decision": {"approved": true}}), "/runId"),
        (json!({"runId": run_id, "decision": {"approved": "yes"}}), "/decision/approved"),
        (json!({"runId": run_id, "decison": {"approved": true}}), "/decison"),
        (json!({"runId": run_id}), ""),
    ] {
        let (status, _, error) = resume(&server, body).await;
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["error"]["details"][0]["path"], path, "{error}");
    }
    let (status, _, error) = resume(&server, json!({"runId": "nope", "decision": {"approved": true}})).await;
    assert_eq!((status, error["error"]["code"].as_str()), (404, Some("run_not_found")));
    assert_eq!(flexrun::store::runs::get(&mut server.db(), &run_id).unwrap().status.as_str(), "awaiting_hitl");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_listed_newest_first_a_page_at_a_time() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(server.run(&envelope()).await[0].run_id.clone());
    }
    let paused = server.run(&with_plan_approval(envelope())).await[0].run_id.clone();
    let page = |query: String| {
        let server = &server;
        async move {
            let url = server.url(&format!("/api/v1/flex/runs?{query}"));
            let response = server.http.get(url).bearer_auth(OPERATOR_KEY).send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        }
    };
    let listed = |body: &Value| -> Vec<String> {
        body["runs"].as_array().unwrap().iter().map(|r| r["runId"].as_str().unwrap().to_string()).collect()
    };
    let (_, first) = page("limit=2".into()).await;
    assert_eq!(listed(&first), [paused.clone(), ids[2].clone()]);
    let cursor = first["nextCursor"].as_str().unwrap();
    let (_, second) = page(format!("limit=2&cursor={cursor}")).await;
    assert_eq!(listed(&second), [ids[1].clone(), ids[0].clone()]);
    assert_eq!(second["nextCursor"], Value::Null);
    let (_, waiting) = page("status=awaiting_hitl".into()).await;
    assert_eq!(listed(&waiting), [paused]);
    let (status, error) = page("status=paused".into()).await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_query")));
}
