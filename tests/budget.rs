//! Budgets: a run that reaches a limit of `policies.budget` starts no further model call; it fails
//! with `budget_exceeded`, or pauses for an operator who raises the limit (and the run goes on
//! from where it stopped, nothing run twice) or rejects (and it fails). Real server, real SQLite,
//! the stand-in model answering with `usage` blocks whose counts the limits are checked against.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use flexrun::events::ReceivedFrame;
use serde_json::{Value, json};
use support::*;

/// `extra` TOML after fast retries and prices for `test-model` ($2 in, $8 out per million).
fn config(dir: &tempfile::TempDir, extra: &str) -> Vec<(&'static str, String)> {
    let config = dir.path().join("budget.toml");
    let text = format!(
        "[retry]\nbase_delay_secs = 0.001\n\
         [llm.prices.\"test-model\"]\ninput_per_mtok = 2.0\noutput_per_mtok = 8.0\n{extra}"
    );
    std::fs::write(&config, text).unwrap();
    vec![("FLEXRUN_CONFIG", config.display().to_string())]
}

/// Plans `draft` (writer) then `polish` (editor); for a repair, `polish` alone. Every call
/// reports its usage: the planner 1,000 in + 100 out ($0.0028), each step 500 + 50 ($0.0014).
/// The writer scores `writer_score`, the editor 0.9.
fn two_steps(writer_score: f64) -> flexrun::llm::standin::Script {
    script(move |call| {
        let planner = usage_block(1_000, 100, None, None);
        if call.is_planner() && call.user.contains("### GOAL CONDITION REPAIR") {
            return plan(&[("polish", "editor")]).usage(planner);
        }
        if call.is_planner() {
            return plan(&[("draft", "writer"), ("polish", "editor")]).usage(planner);
        }
        let score = if call.capability_id() == Some("writer") { writer_score } else { 0.9 };
        post(score).usage(usage_block(500, 50, None, None))
    })
}

fn with_budget(budget: Value) -> Value {
    let mut envelope = envelope();
    envelope["policies"] = json!({"budget": budget});
    envelope
}

async fn server_with(script: flexrun::llm::standin::Script, extra_config: &str) -> TestServer {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let options = Options { env: config(&dir, extra_config), dir: Some(dir), ..Options::default() };
    TestServer::start_with(script, options).await
}

/// The `usage` of every frame that records calls (not `complete`, which adds them up).
fn recorded_calls(frames: &[ReceivedFrame]) -> u64 {
    frames.iter().filter(|f| f.kind != "complete").filter_map(|f| f.payload["usage"]["calls"].as_u64()).sum()
}

#[tokio::test]
async fn each_limit_stops_the_next_call_and_fails_the_run_with_fail() {
    // After the plan and the writer: 2 calls, 1,650 tokens, $0.0042.
    let limits = [
        ("modelCalls", json!({"maxModelCalls": 2}), json!(2), json!(2)),
        ("tokens", json!({"maxTokens": 1_500}), json!(1_500), json!(1_650)),
        ("costUsd", json!({"maxCostUsd": 0.003}), json!(0.003), json!(0.0042)),
    ];
    let server = server_with(two_steps(0.9), "").await;
    for (limit, mut budget, max, spent) in limits {
        budget["onExceeded"] = json!("fail");
        let before = server.llm_calls().len();
        let frames = server.run(&with_budget(budget)).await;
        assert_eq!(
            kinds(&frames)[kinds(&frames).len() - 3..],
            ["node_complete", "budget_exceeded", "complete"],
            "{limit}: the editor never started"
        );
        let exceeded = &frame_of(&frames, "budget_exceeded").payload;
        assert_eq!(
            (&exceeded["limit"], &exceeded["max"], &exceeded["spent"], &exceeded["action"]),
            (&json!(limit), &max, &spent, &json!("fail")),
            "{limit}"
        );
        let error = &frame_of(&frames, "complete").payload["error"];
        assert_eq!((&error["code"], &error["limit"]), (&json!("budget_exceeded"), &json!(limit)));
        assert_eq!(server.llm_calls().len() - before, 2, "{limit}: the plan and the writer, nothing after");
        assert_eq!(frame_of(&frames, "complete").payload["status"], "failed");
    }
    assert_eq!(server.capability_calls("editor"), 0);
}

#[tokio::test]
async fn a_paused_run_goes_on_once_an_operator_raises_the_limit_and_runs_no_step_twice() {
    let server = server_with(two_steps(0.9), "").await;
    let frames = server.run(&with_budget(json!({"maxModelCalls": 2}))).await;
    let run_id = frames[0].run_id.clone();
    assert_eq!(kinds(&frames)[kinds(&frames).len() - 2..], ["budget_exceeded", "hitl_request"]);
    let request = &frame_of(&frames, "hitl_request").payload["request"];
    assert_eq!((&request["kind"], &request["subject"]), (&json!("budget"), &json!("budget")));
    assert_eq!(request["context"]["phase"], "execution");
    let spent = json!({"modelCalls": 2, "totalTokens": 1_650, "costUsd": 0.0042});
    assert_eq!(request["context"]["spentSoFar"], spent, "shown whole, not redacted");
    let request_id = request["id"].as_str().unwrap().to_string();
    server.wait_for_status(&run_id, "awaiting_hitl").await;
    let doc = server.get_json(&format!("/api/v1/flex/runs/{run_id}")).await;
    assert_eq!(doc["run"]["budget"]["maxModelCalls"], 2);
    assert_eq!(doc["run"]["budget"]["spent"], spent);
    let pending: Vec<&Value> =
        doc["hitlRequests"].as_array().unwrap().iter().filter(|r| r["status"] == "pending").collect();
    assert_eq!(pending.len(), 1, "{doc}");
    assert_eq!((&pending[0]["id"], &pending[0]["kind"]), (&json!(request_id), &json!("budget")));

    // Refused, and nothing stored: no budget, one that does not raise the limit, one of the wrong type.
    let logged = server.event_log(&run_id).len();
    let raise = |budget: Value| {
        let mut body = decision(&run_id, &request_id, true, None);
        body["decision"]["budget"] = budget;
        body
    };
    let (status, _, error) = resume(&server, decision(&run_id, &request_id, true, None)).await;
    assert_eq!((status, error["error"]["code"].as_str()), (422, Some("budget_not_raised")), "{error}");
    let (status, _, error) = resume(&server, raise(json!({"maxModelCalls": 2}))).await;
    assert_eq!((status, error["error"]["code"].as_str()), (422, Some("budget_not_raised")), "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("modelCalls"), "{error}");
    let (status, _, error) = resume(&server, raise(json!({"maxModelCalls": "more"}))).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(server.event_log(&run_id).len(), logged, "a refused answer records nothing");

    let (status, resumed, _) = resume(&server, raise(json!({"maxModelCalls": 5}))).await;
    assert_eq!(status, 200);
    assert_eq!(kinds(&resumed), ["hitl_resolved", "node_start", "node_complete", "complete"]);
    assert_eq!(resumed[0].payload["budget"]["maxModelCalls"], 5);
    assert_eq!(resumed[1].node_id.as_deref(), Some("polish"), "the step that was not started starts now");
    assert_eq!(resumed.last().unwrap().payload["status"], "completed");
    assert_eq!((server.capability_calls("writer"), server.capability_calls("editor")), (1, 1));
    assert_eq!(resumed.last().unwrap().payload["usage"]["calls"], 3);
}

/// The wait-for-an-operator lines of the run page's timeline (its text list), as shown.
async fn timeline_waits(server: &TestServer, run_id: &str) -> Vec<String> {
    let page = server.http.get(server.url(&format!("/ui/runs/{run_id}"))).send().await.unwrap().text().await.unwrap();
    page.split(r#"<li data-kind="wait">"#).skip(1).map(|rest| rest.split("</li>").next().unwrap().to_string()).collect()
}

/// The run page's timeline says in words what a run paused on its budget waited for — once, not
/// "budget of the budget" — while it waits and once an operator raised it.
#[tokio::test]
async fn the_timeline_says_the_run_waited_for_a_raise_of_its_budget() {
    let server = server_with(two_steps(0.9), "").await;
    let frames = server.run(&with_budget(json!({"maxModelCalls": 2}))).await;
    let run_id = frames[0].run_id.clone();
    let request_id = frame_of(&frames, "hitl_request").payload["request"]["id"].as_str().unwrap().to_string();
    server.wait_for_status(&run_id, "awaiting_hitl").await;
    let waits = timeline_waits(&server, &run_id).await;
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert!(waits[0].starts_with("operator: a raise of the budget, pending ("), "{waits:?}");

    let mut raise = decision(&run_id, &request_id, true, None);
    raise["decision"]["budget"] = json!({"maxModelCalls": 5});
    assert_eq!(resume(&server, raise).await.0, 200);
    let waits = timeline_waits(&server, &run_id).await;
    assert!(waits[0].starts_with("operator: a raise of the budget, approved ("), "{waits:?}");
}

#[tokio::test]
async fn each_limit_pauses_a_run_and_raising_that_limit_lets_it_finish() {
    // Reached after the plan and the writer (1,650 tokens, $0.0042); raised, the editor runs.
    let limits = [
        ("tokens", json!({"maxTokens": 1_500}), json!({"maxTokens": 5_000})),
        ("costUsd", json!({"maxCostUsd": 0.003}), json!({"maxCostUsd": 0.01})),
        ("modelCalls", json!({"maxModelCalls": 2}), json!({"maxModelCalls": 3})),
    ];
    let server = server_with(two_steps(0.9), "").await;
    for (limit, budget, raised) in limits {
        let frames = server.run(&with_budget(budget)).await;
        let run_id = frames[0].run_id.clone();
        let exceeded = &frame_of(&frames, "budget_exceeded").payload;
        assert_eq!((&exceeded["limit"], &exceeded["action"]), (&json!(limit), &json!("pause")), "{limit}");
        let request = &frame_of(&frames, "hitl_request").payload["request"];
        assert_eq!(request["context"]["limit"], limit);
        let request_id = request["id"].as_str().unwrap().to_string();
        server.wait_for_status(&run_id, "awaiting_hitl").await;
        let mut body = decision(&run_id, &request_id, true, None);
        body["decision"]["budget"] = raised;
        let (status, resumed, error) = resume(&server, body).await;
        assert_eq!(status, 200, "{limit}: {error}");
        assert_eq!(kinds(&resumed), ["hitl_resolved", "node_start", "node_complete", "complete"], "{limit}");
        assert_eq!(resumed.last().unwrap().payload["status"], "completed");
    }
    assert_eq!((server.capability_calls("writer"), server.capability_calls("editor")), (3, 3));
}

#[tokio::test]
async fn a_repair_waits_for_its_budget_and_the_planner_is_told_what_is_left() {
    // One step, whose 0.5 fails the goal: the repair's draft would be the third call.
    let script = script(|call| {
        let planner = usage_block(1_000, 100, None, None);
        if call.is_planner() && call.user.contains("### GOAL CONDITION REPAIR") {
            return plan(&[("polish", "editor")]).usage(planner);
        }
        if call.is_planner() {
            return plan(&[("draft", "writer")]).usage(planner);
        }
        let score = if call.capability_id() == Some("writer") { 0.5 } else { 0.9 };
        post(score).usage(usage_block(500, 50, None, None))
    });
    let server = server_with(script, "").await;
    let budget = json!({"maxModelCalls": 2, "maxCostUsd": 1.0});
    let frames = server.run(&with_budget(budget.clone())).await;
    let run_id = frames[0].run_id.clone();
    let tail = &kinds(&frames)[kinds(&frames).len() - 4..];
    assert_eq!(tail, ["node_complete", "goal_condition_failed", "budget_exceeded", "hitl_request"]);
    assert_eq!(frame_of(&frames, "hitl_request").payload["request"]["context"]["phase"], "planning");
    assert_eq!(server.planner_calls().len(), 1, "the repair's draft was not asked for");
    let request_id = hitl_request_id(&frames);

    server.wait_for_status(&run_id, "awaiting_hitl").await;
    let mut body = decision(&run_id, &request_id, true, None);
    body["decision"]["budget"] = json!({"maxModelCalls": 6});
    let (status, resumed, _) = resume(&server, body).await;
    assert_eq!(status, 200);
    assert_eq!(resumed.last().unwrap().payload["status"], "completed", "{:?}", kinds(&resumed));
    assert_eq!(kinds(&resumed)[..3], ["hitl_resolved", "plan_requested", "plan_generated"]);
    // The first prompt had the budget untouched; the repair's says what is spent and left.
    let prompts: Vec<String> = server.planner_calls().into_iter().map(|c| c.user).collect();
    assert!(prompts[0].contains("### BUDGET\n"), "{}", prompts[0]);
    assert!(prompts[0].contains("- modelCalls: 0 spent of 2, 2 left"), "{}", prompts[0]);
    assert!(prompts[1].contains("- modelCalls: 2 spent of 6, 4 left"), "{}", prompts[1]);
    assert!(prompts[1].contains("- costUsd: $0.0042 spent of $1, $0.9958 left"), "{}", prompts[1]);
    assert_eq!((server.capability_calls("writer"), server.capability_calls("editor")), (1, 1));

    // The same run rejected instead: it fails with budget_exceeded.
    let frames = server.run(&with_budget(budget)).await;
    let run_id = frames[0].run_id.clone();
    let request_id = hitl_request_id(&frames);
    server.wait_for_status(&run_id, "awaiting_hitl").await;
    let (status, ended, _) = resume(&server, decision(&run_id, &request_id, false, Some("too dear"))).await;
    assert_eq!(status, 200);
    assert_eq!(kinds(&ended), ["hitl_resolved", "complete"]);
    let error = &ended[1].payload["error"];
    assert_eq!(
        (&error["code"], &error["limit"], &error["feedback"]),
        (&json!("budget_exceeded"), &json!("modelCalls"), &json!("too dear"))
    );
}

#[tokio::test]
async fn a_retry_held_back_runs_once_raised_and_its_earlier_attempt_is_recorded() {
    // The writer's first output fails its post-condition: its retry would be the third call.
    let post_condition = json!({"type": "object", "required": ["text", "quality_score"],
                                "properties": {"text": {"type": "string"}, "quality_score": {"type": "number"}}});
    let mut writer = ai_capability("writer", &["brief"], &["post_copy"], post_condition);
    writer["postConditions"] =
        json!([{"facet": "post_copy", "path": "/quality_score", "condition": {"dsl": "quality_score >= 0.5"}}]);
    writer["metadata"] = json!({"postConditionPolicy": {"maxRetries": 1}});
    let attempts = Arc::new(AtomicUsize::new(0));
    let counted = attempts.clone();
    let script = script(move |call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]).usage(usage_block(1_000, 100, None, None));
        }
        let score = if counted.fetch_add(1, Ordering::SeqCst) == 0 { 0.3 } else { 0.9 };
        post(score).usage(usage_block(500, 50, None, None))
    });
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let options = Options { env: config(&dir, ""), dir: Some(dir), capabilities: vec![writer], ..Options::default() };
    let server = TestServer::start_with(script, options).await;
    let frames = server.run(&with_budget(json!({"maxModelCalls": 2}))).await;
    let run_id = frames[0].run_id.clone();
    let exceeded = &frame_of(&frames, "budget_exceeded").payload;
    assert_eq!(exceeded["heldNodes"], json!(["draft"]));
    assert_eq!(exceeded["usage"]["calls"], 1, "the failed attempt is recorded with the hold");
    assert!(!kinds(&frames).contains(&"node_complete"));
    let request_id = hitl_request_id(&frames);

    server.wait_for_status(&run_id, "awaiting_hitl").await;
    let mut body = decision(&run_id, &request_id, true, None);
    body["decision"]["budget"] = json!({"maxModelCalls": 3});
    let (_, resumed, _) = resume(&server, body).await;
    assert_eq!(kinds(&resumed), ["hitl_resolved", "node_start", "node_complete", "complete"]);
    assert_eq!(attempts.load(Ordering::SeqCst), 2, "the held attempt ran once");
    let complete = &resumed.last().unwrap().payload;
    assert_eq!(complete["status"], "completed");
    // Every call is recorded once: the frames' usage adds up to the run's total.
    let all: Vec<ReceivedFrame> = frames.into_iter().chain(resumed.clone()).collect();
    assert_eq!(recorded_calls(&all), 3);
    assert_eq!(complete["usage"]["calls"], 3);
    assert_eq!(complete["usage"]["costUsd"], 0.0056);
}

#[tokio::test]
async fn configured_defaults_apply_and_a_budget_above_the_ceiling_is_refused_with_its_pointer() {
    let extra = "[budget]\ndefault_max_model_calls = 7\nceiling_max_cost_usd = 1.0\n";
    let server = server_with(two_steps(0.9), extra).await;
    let frames = server.run(&envelope()).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
    assert_eq!(
        frame_of(&frames, "start").payload["budget"],
        json!({"maxCostUsd": 1.0, "maxModelCalls": 7, "onExceeded": "pause"}),
        "the defaults and the ceiling, recorded with the run"
    );

    for (budget, code) in [
        (json!({"maxCostUsd": 2.5}), "above_ceiling"),
        (json!({"maxCostUsd": -1}), "minimum"),
        (json!({"maxTokens": 0}), "minimum"),
        (json!({"maxCostUsd": 1e-9}), "invalid_amount"),
    ] {
        let response = server.post_run(&with_budget(budget.clone())).await;
        assert_eq!(response.status(), 400, "{budget}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "invalid_envelope", "{budget}: {error}");
        let detail = &error["error"]["details"][0];
        assert!(detail["path"].as_str().unwrap().starts_with("/policies/budget/"), "{error}");
        assert!(detail["code"].as_str().unwrap().to_lowercase().contains(code), "{budget}: {error}");
    }
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 1, "no refused run was stored");
}
