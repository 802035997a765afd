//! The condition DSL over HTTP: the compile endpoint, DSL goal conditions in envelopes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use serde_json::{Value, json};
use support::*;

async fn compile(server: &TestServer, body: Value) -> (u16, Value) {
    let response = server.http.post(server.url("/api/v1/flex/conditions/compile")).json(&body).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compile_endpoint_uses_the_registered_capabilities_catalog() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let (status, body) = compile(&server, json!({"dsl": "facets.post_copy.value.quality_score >= 0.8"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["canonicalDsl"], "facets.post_copy.quality_score >= 0.8");
    assert_eq!(
        body["jsonLogic"],
        json!({">=": [{"var": "metadata.runContextSnapshot.facets.post_copy.value.quality_score"}, 0.8]})
    );
    assert_eq!(body["variables"], json!(["metadata.runContextSnapshot.facets.post_copy.value.quality_score"]));
    assert_eq!(body["warnings"], json!([]));

    let (status, body) =
        compile(&server, json!({"dsl": "facets.post_copy.quality_scor >= 0.8 && facets.post_copy.text > 1"})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_condition_dsl");
    let details = body["error"]["details"].as_array().unwrap();
    assert_eq!(details.len(), 2);
    assert_eq!(details[0]["code"], "unknown_variable");
    assert!(details[0]["message"].as_str().unwrap().contains("did you mean `facets.post_copy.quality_score`"));
    assert_eq!(details[0]["range"]["start"]["offset"], 0);
    assert_eq!(details[0]["range"]["end"]["offset"], 29);
    assert_eq!(details[1]["code"], "operator_not_allowed");

    let (status, body) = compile(&server, json!({"dsl": "status == \"approved\"", "relative": true})).await;
    assert_eq!((status, body["jsonLogic"].clone()), (200, json!({"==": [{"var": "status"}, "approved"]})));
    let (status, body) = compile(&server, json!({"expr": "x"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")));
    // A body of the wrong shape says which field is wrong.
    let (status, body) = compile(&server, json!({"dsl": 5})).await;
    assert_eq!((status, body["error"]["details"][0]["path"].as_str()), (400, Some("/dsl")), "{body}");
    let variables: Value =
        server.http.get(server.url("/api/v1/flex/conditions/variables")).send().await.unwrap().json().await.unwrap();
    let names: Vec<&str> =
        variables["variables"].as_array().unwrap().iter().filter_map(|v| v["dslPath"].as_str()).collect();
    assert!(names.contains(&"facets.post_copy.quality_score") && names.contains(&"run.latencyMs"), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_dsl_goal_condition_drives_a_run_to_completion() {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let mut envelope = envelope();
    envelope["goal_condition"] = json!([
        {"facet": "post_copy", "path": "", "condition": {"dsl": "quality_score >= 0.8 && text != \"\""}}
    ]);
    let frames = server.run(&envelope).await;
    let complete = &frames.last().unwrap().payload;
    assert_eq!(complete["status"], "completed", "{:?}", kinds(&frames));
    let result = &complete["goal_condition_results"][0];
    assert_eq!(result["expression"], "quality_score >= 0.8 && text != \"\"");
    assert_eq!(result["dsl"], "quality_score >= 0.8 && text != \"\"");
    assert_eq!(result["jsonLogic"]["and"][0], json!({">=": [{"var": "quality_score"}, 0.8]}));
    let failed = frames.iter().find(|f| f.kind == "goal_condition_failed").unwrap();
    assert_eq!(failed.payload["failedGoalConditions"][0]["expression"], "quality_score >= 0.8 && text != \"\"");
    let repair_prompt = &server.planner_calls()[1].user;
    assert!(repair_prompt.contains("quality_score >= 0.8 && text != \"\""), "{repair_prompt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_dsl_goal_condition_gets_400_with_its_range_and_no_run() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let mut envelope = envelope();
    envelope["goal_condition"] = json!([
        {"facet": "post_copy", "path": "", "condition": {"dsl": "quality_score >= 0.8"}},
        {"facet": "post_copy", "path": "", "condition": {"dsl": "qualty_score >= 0.8 && text > 3"}}
    ]);
    let response = server.post_run(&envelope).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_condition_dsl");
    let details = body["error"]["details"].as_array().unwrap();
    assert_eq!(details[0]["path"], "/goal_condition/1/condition/dsl");
    assert_eq!(details[0]["code"], "unknown_variable");
    assert_eq!(details[0]["message"], "Variable `qualty_score` is not registered (did you mean `quality_score`?).");
    assert_eq!(details[0]["range"]["start"]["column"], 1);
    assert_eq!(details[0]["range"]["end"]["offset"], 12);
    assert_eq!(details[1]["code"], "operator_not_allowed");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0);
}

/// A goal condition whose evaluation over the run's data could take more than a bounded number
/// of steps is reported as failed to evaluate, not evaluated: four `some`s nested over arrays of
/// a thousand elements would evaluate their predicate 10¹² times, holding a worker of the
/// coordinators' runtime for hours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_condition_that_would_take_too_long_is_refused_not_evaluated() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let a = Value::Array(vec![json!(1); 1000]);
    let rule = json!({"some": [a, {"some": [a, {"some": [a, {"some": [a, false]}]}]}]});
    let mut envelope = envelope();
    envelope["goal_condition"] = json!([{"facet": "post_copy", "path": "", "condition": {"jsonLogic": rule}}]);
    // Evaluated, the condition would hold the runtime's workers, this test's timers with them: a
    // thread of its own ends the test if the run has not ended in time.
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watched = ended.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(120));
        if !watched.load(std::sync::atomic::Ordering::SeqCst) {
            eprintln!("the run did not end in 120 s: its goal condition is being evaluated");
            std::process::exit(101);
        }
    });
    let frames = server.run(&envelope).await;
    ended.store(true, std::sync::atomic::Ordering::SeqCst);
    let failed = frames.iter().find(|f| f.kind == "goal_condition_failed").expect("the goal fails");
    let error = failed.payload["failedGoalConditions"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("more than 20000000 steps"), "{error}");
    let health = server.http.get(server.url("/api/v1/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

/// A goal condition with a quantifier nested in another reads the outer item from inside the
/// inner one: the run completes when every ordered line is in stock, and its goal fails when one
/// is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_quantifier_goal_condition_reads_the_outer_item() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let run = |have: i64| {
        let mut envelope = envelope();
        envelope["inputs"]["orders"] = json!({"items": [{"sku": "A", "qty": 5}],
                                              "stock": [{"sku": "B", "have": 9}, {"sku": "A", "have": have}]});
        envelope["goal_condition"] = json!([{"facet": "orders", "path": "", "condition": {
            "dsl": "all(items as i, some(stock as s, s.sku == i.sku && s.have >= i.qty))"}}]);
        envelope
    };
    let frames = server.run(&run(5)).await;
    let complete = &frames.last().unwrap().payload;
    assert_eq!(complete["status"], "completed", "{:?}", kinds(&frames));
    assert_eq!(complete["goal_condition_results"][0]["satisfied"], true);
    let frames = server.run(&run(4)).await;
    let failed = frames.iter().find(|f| f.kind == "goal_condition_failed").expect("the goal fails: 4 of 5 in stock");
    assert_eq!(failed.payload["failedGoalConditions"][0]["satisfied"], false);
    assert!(failed.payload["failedGoalConditions"][0]["error"].is_null(), "{}", failed.payload);
}

/// The JSON-Logic the compile endpoint (and a run's document) shows for a DSL condition, posted
/// back as `jsonLogic`, holds as the DSL does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shown_json_logic_posted_back_holds_as_its_dsl() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let dsl = "some(items as i, i.qty > 1)";
    let (status, compiled) = compile(&server, json!({"dsl": dsl, "relative": true})).await;
    assert_eq!(status, 200, "{compiled}");
    let mut envelope = envelope();
    envelope["inputs"]["orders"] = json!({"items": [{"qty": 5}]});
    envelope["goal_condition"] =
        json!([{"facet": "orders", "path": "", "condition": {"jsonLogic": compiled["jsonLogic"].clone()}}]);
    let frames = server.run(&envelope).await;
    let complete = &frames.last().unwrap().payload;
    assert_eq!(complete["status"], "completed", "{:?}", kinds(&frames));
    let result = &complete["goal_condition_results"][0];
    assert_eq!((result["satisfied"].clone(), result["expression"].clone()), (json!(true), json!(dsl)), "{result}");
}
