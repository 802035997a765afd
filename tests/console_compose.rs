//! The console's composer and Re-run in a real headless Chromium, against the real server, a real
//! SQLite file and a stand-in model on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use fantoccini::Locator;
use serde_json::{Value, json};
use support::browser::Browser;
use support::*;

/// The envelope of the tests, without goal conditions: the composer's rows add them.
fn bare_envelope() -> Value {
    let mut bare = envelope();
    bare.as_object_mut().unwrap().remove("goal_condition");
    bare
}

/// Launch from the composer: goal-condition rows compile as typed (an error marks its range), the
/// server's 400 details are shown at their fields, and a launched run is followed live to
/// `completed`, its repair replan shown as v2 and the failed condition in v1's round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_launched_from_the_composer_is_followed_live_through_its_repair() {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url("/ui/new")).await.unwrap();
    assert_eq!(browser.text("[data-testid=started-from]").await, "examples/demo-envelope.json");
    browser.set_value("#envelope", &serde_json::to_string_pretty(&bare_envelope()).unwrap()).await;
    browser.wait_for_text("[data-testid=no-conditions]", "No goal conditions").await;

    // A row compiles as it is typed: an error is shown with its range marked, then the fix.
    browser.click_button("form.composer", "Add a condition").await;
    browser.fill("[data-testid=conditions] [name=facet]", "post_copy").await;
    browser.fill("[data-testid=conditions] [name=path]", "/quality_score").await;
    browser.fill("[data-testid=conditions] [name=dsl]", "quality_score >= ").await;
    browser.wait_for_text("[data-testid=compiled]", "quality_score >=").await;
    assert!(client.find(Locator::Css("[data-testid=compiled] mark")).await.is_ok(), "the range is marked");
    browser.fill("[data-testid=conditions] [name=dsl]", "quality_score>=0.8").await;
    browser.wait_for_text("[data-testid=compiled]", "{\">=\":[{\"var\":\"quality_score\"},0.8]}").await;
    assert!(browser.text("[data-testid=compiled]").await.starts_with("quality_score >= 0.8"), "canonical form");
    let written: Value = serde_json::from_str(&envelope_text(&browser).await).unwrap();
    assert_eq!(
        written["goal_condition"],
        json!([{"facet": "post_copy", "path": "/quality_score", "condition": {"dsl": "quality_score>=0.8"}}]),
        "the rows are the envelope's goal_condition"
    );

    // The server's refusals, at their fields: an empty objective, then a condition on an unknown
    // facet (shown at its row too).
    let mut wrong = written.clone();
    wrong["objective"] = json!("");
    browser.set_value("#envelope", &wrong.to_string()).await;
    browser.click_button("form.composer", "Launch").await;
    browser.wait_for_text("[data-testid=problems]", "/objective").await;
    let mut wrong = written.clone();
    wrong["goal_condition"][0]["facet"] = json!("no_such_facet");
    browser.set_value("#envelope", &wrong.to_string()).await;
    browser.click_button("form.composer", "Launch").await;
    browser.wait_for_text("[data-testid=problems]", "/goal_condition/0/facet").await;
    assert!(!browser.text("[data-testid=problems]").await.contains("/objective"), "the earlier refusal is gone");
    browser.wait_for_text("[data-testid=conditions] .field-problem", "no_such_facet").await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0, "no run was created");

    // Launch: the run's page follows it live through the repair.
    browser.set_value("#envelope", &written.to_string()).await;
    browser.click_button("form.composer", "Launch").await;
    browser.wait_until("the run's page opened", "return location.pathname.startsWith('/ui/runs/')").await;
    browser.wait_for_text("[data-testid=status]", "completed").await;
    let run_id = client.current_url().await.unwrap().path().trim_start_matches("/ui/runs/").to_string();
    assert_eq!(server.planner_calls().len(), 2, "the first plan and its repair");
    client.goto(&server.url(&format!("/ui/runs/{run_id}"))).await.unwrap();
    let versions = client.find_all(Locator::Css("nav.versions a")).await.unwrap();
    assert_eq!(versions.len(), 2);
    assert!(browser.text("[data-testid=why]").await.contains("post_copy /quality_score not met"));
    versions[0].click().await.unwrap();
    browser.wait_for_text("[data-testid=checks] caption", "after v1").await;
    let round = browser.text("[data-testid=checks] tbody").await;
    assert!(round.contains("quality_score>=0.8") && round.contains("0.5") && round.contains("fail"), "{round}");

    // The server's refusals are logged by the browser as failed requests; nothing else may be.
    let errors = browser.console_errors().await;
    let refused = |e: &String| (e.contains("run.stream") || e.contains("conditions/compile")) && e.contains("400");
    assert!(errors.iter().all(refused), "console errors: {errors:?}");
    browser.close().await;
}

/// The composer is a form over the envelope: each field writes its part of the JSON, an edit of
/// the JSON fills the fields, every 400 problem is shown at once at its field, and a run launched
/// from the fields carries what they said (here: approval required, a budget, a repair cap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_composer_is_a_form_whose_fields_write_the_envelope_and_show_its_problems() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url("/ui/new")).await.unwrap();
    browser
        .wait_until(
            "the fields are filled",
            "return document.querySelector('#objective').value.startsWith('Write a LinkedIn post')",
        )
        .await;
    assert_eq!(
        client.execute("return document.querySelector('[data-testid=raw]').open", vec![]).await.unwrap(),
        json!(false)
    );
    assert_eq!(field_value(&browser, "#facets").await, "post_copy, review");
    assert_eq!(field_value(&browser, "#max-goal-replans").await, "2");

    // The JSON edited: the fields follow it.
    browser.set_value("#envelope", &serde_json::to_string_pretty(&bare_envelope()).unwrap()).await;
    assert_eq!(field_value(&browser, "#objective").await, "Write a post about flexrun");
    assert_eq!(field_value(&browser, "#facets").await, "post_copy");
    assert_eq!(field_value(&browser, "#max-goal-replans").await, "", "no replan policy");
    let inputs: Value = serde_json::from_str(&field_value(&browser, "#inputs").await).unwrap();
    assert_eq!(inputs, json!({"brief": {"topic": "flexrun"}}));

    // The fields edited: the JSON follows them.
    browser.fill("#objective", "Write a short post").await;
    browser.fill("#facets", "post_copy, summary").await;
    browser.click("#approval").await;
    browser.fill("#max-goal-replans", "1").await;
    browser.fill("#max-calls", "9").await;
    browser.fill("#inputs", "{\"brief\": {\"topic\": \"flexrun\", \"tone\": \"dry\"}}").await;
    let written: Value = serde_json::from_str(&envelope_text(&browser).await).unwrap();
    assert_eq!(written["objective"], "Write a short post");
    assert_eq!(written["outputContract"], json!({"mode": "facets", "facets": ["post_copy", "summary"]}));
    assert_eq!(
        written["policies"],
        json!({"approval": {"plan": "required"}, "replan": {"maxGoalConditionReplans": 1}, "budget": {"maxModelCalls": 9}})
    );
    assert_eq!(written["inputs"]["brief"]["tone"], "dry");
    browser.fill("#max-calls", "").await;
    let written: Value = serde_json::from_str(&envelope_text(&browser).await).unwrap();
    assert!(written["policies"].get("budget").is_none(), "a cleared field leaves nothing behind: {written}");
    browser.fill("#inputs", "{\"brief\": ").await;
    browser.wait_for_text("[data-field='/inputs'] .field-problem", "is not JSON").await;
    browser.fill("#inputs", "{\"brief\": {\"topic\": \"flexrun\"}}").await;
    assert_eq!(client.find_all(Locator::Css("[data-field='/inputs'] .field-problem")).await.unwrap().len(), 0);

    // Four mistakes at once — three of shape, one of meaning (a facet nothing provides): all
    // refused in one answer, each at its field.
    browser.fill("#objective", " ").await;
    browser.fill("#max-cost", "-1").await;
    browser.click_button("form.composer", "Add a condition").await;
    browser.fill("[data-testid=conditions] [name=dsl]", "x > 1").await;
    browser.click_button("form.composer", "Add a condition").await;
    browser.fill("[data-testid=conditions] tr:nth-child(2) [name=facet]", "no_such_facet").await;
    browser.fill("[data-testid=conditions] tr:nth-child(2) [name=dsl]", "x > 1").await;
    browser.click_button("form.composer", "Launch").await;
    browser.wait_for_text("[data-field='/policies/budget/maxCostUsd'] .field-problem", "minimum").await;
    let problems = browser.text("[data-testid=problems]").await;
    for path in ["/objective", "/policies/budget/maxCostUsd", "/goal_condition/0/facet", "/goal_condition/1/facet"] {
        assert!(problems.contains(path), "{path} in {problems}");
    }
    let second = browser.text("[data-testid=conditions] tr:nth-child(2) .field-problem").await;
    assert!(second.contains("no_such_facet"), "{second}");
    assert!(!browser.text("[data-field='/objective'] .field-problem").await.is_empty(), "at the objective");
    assert!(!browser.text("[data-testid=conditions] .field-problem").await.is_empty(), "at its row");
    assert_eq!(
        client
            .execute("return document.querySelector('#max-cost').getAttribute('aria-invalid')", vec![])
            .await
            .unwrap(),
        json!("true")
    );
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0, "no run was created");
    browser.screenshot("composer-problems").await;

    // Fixed in the fields, launched: the run is as the fields said.
    browser.click("[aria-label='Remove condition 2']").await;
    browser.fill("#objective", "Write a short post").await;
    browser.fill("#facets", "post_copy").await;
    browser.fill("#max-cost", "").await;
    browser.fill("[data-testid=conditions] [name=facet]", "post_copy").await;
    browser.fill("[data-testid=conditions] [name=dsl]", "quality_score >= 0.8").await;
    browser.click_button("form.composer", "Launch").await;
    browser.wait_until("the run's page opened", "return location.pathname.startsWith('/ui/runs/')").await;
    browser.wait_for_text("[data-testid=status]", "awaiting").await;
    let run_id = client.current_url().await.unwrap().path().trim_start_matches("/ui/runs/").to_string();
    let stored = flexrun::store::runs::get(&mut server.db(), &run_id).unwrap();
    let envelope: Value = serde_json::from_str(&stored.envelope).unwrap();
    assert_eq!(envelope["objective"], "Write a short post");
    assert_eq!(envelope["policies"]["approval"], json!({"plan": "required"}));
    assert_eq!(envelope["outputContract"]["facets"], json!(["post_copy"]));
    assert_eq!(envelope["policies"]["replan"], json!({"maxGoalConditionReplans": 1}));
    let errors = browser.console_errors().await;
    assert!(errors.iter().all(|e| e.contains("run.stream") && e.contains("400")), "console errors: {errors:?}");
    browser.close().await;
}

/// Re-run opens the composer with the run's envelope; the new run, launched with an edited
/// objective, records its parent, and each page links to the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_run_starts_a_new_run_from_an_edited_envelope_and_links_both_ways() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let parent = server.run(&envelope()).await[0].run_id.clone();
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/runs/{parent}"))).await.unwrap();
    client.find(Locator::Css("[data-testid=rerun]")).await.unwrap().click().await.unwrap();
    browser.wait_for_text("[data-testid=started-from]", &format!("run {parent}")).await;
    let mut again: Value = serde_json::from_str(&envelope_text(&browser).await).unwrap();
    assert_eq!(again["metadata"]["rerunOf"], json!(parent));
    assert_eq!(again["goal_condition"], envelope()["goal_condition"], "the conditions as they were posted");
    assert_eq!(
        browser.text("[data-testid=conditions] [data-testid=compiled]").await,
        "",
        "JSON-Logic needs no compile"
    );
    again["objective"] = json!("Write a shorter post about flexrun");
    browser.set_value("#envelope", &again.to_string()).await;
    browser.click_button("form.composer", "Launch").await;
    browser.wait_until("the new run's page opened", "return location.pathname.startsWith('/ui/runs/')").await;
    browser.wait_for_text("[data-testid=status]", "completed").await;
    let child = client.current_url().await.unwrap().path().trim_start_matches("/ui/runs/").to_string();
    assert_ne!(child, parent);
    assert_eq!(browser.text("h1").await, "Write a shorter post about flexrun");
    assert_eq!(browser.text("[data-testid=parent]").await, parent);
    let stored = flexrun::store::runs::get(&mut server.db(), &child).unwrap();
    assert_eq!(stored.parent_run_id.as_deref(), Some(parent.as_str()));

    browser.click("[data-testid=parent]").await;
    browser.wait_for_text("[data-testid=reruns]", &child).await;
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// Re-run from a run with secrets: the composer shows them redacted, as the API does, says which
/// they were, and does not launch while one still reads `[redacted]`; typed again, they are the
/// new run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_run_hides_secrets_and_does_not_launch_until_they_are_typed_again() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let mut secret = envelope();
    secret["inputs"]["brief"]["password"] = json!("hunter2-parent");
    secret["inputs"]["brief"]["api_key"] = json!("sk-parent");
    let parent = server.run(&secret).await[0].run_id.clone();
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/new?from={parent}"))).await.unwrap();
    browser.wait_for_text("[data-testid=hidden-values]", "/inputs/brief/api_key").await;
    assert!(browser.text("[data-testid=hidden-values]").await.contains("/inputs/brief/password"));
    let source = client.source().await.unwrap();
    assert!(!source.contains("hunter2") && !source.contains("sk-parent"), "a secret reached the page");
    let mut again: Value = serde_json::from_str(&envelope_text(&browser).await).unwrap();
    assert_eq!(again["inputs"]["brief"]["password"], "[redacted]");

    // Launch refuses the marker, at its paths, and starts nothing.
    browser.click_button("form.composer", "Launch").await;
    browser.wait_for_text("[data-testid=problems]", "/inputs/brief/api_key").await;
    let problems = browser.text("[data-testid=problems]").await;
    assert!(problems.contains("/inputs/brief/password") && problems.contains("still reads [redacted]"), "{problems}");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 1, "nothing was launched");

    // Typed again, they are the new run's.
    again["inputs"]["brief"]["password"] = json!("hunter2-child");
    again["inputs"]["brief"]["api_key"] = json!("sk-child");
    browser.set_value("#envelope", &again.to_string()).await;
    browser.click_button("form.composer", "Launch").await;
    browser.wait_until("the new run's page opened", "return location.pathname.startsWith('/ui/runs/')").await;
    let child = client.current_url().await.unwrap().path().trim_start_matches("/ui/runs/").to_string();
    let stored = flexrun::store::runs::get(&mut server.db(), &child).unwrap();
    let envelope: Value = serde_json::from_str(&stored.envelope).unwrap();
    assert_eq!(envelope["inputs"]["brief"]["password"], "hunter2-child");
    assert_eq!(envelope["inputs"]["brief"]["api_key"], "sk-child");
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

async fn envelope_text(browser: &Browser) -> String {
    let value = browser.client.execute("return document.querySelector('#envelope').value", vec![]).await.unwrap();
    value.as_str().unwrap().to_string()
}

async fn field_value(browser: &Browser, css: &str) -> String {
    let script = "return document.querySelector(arguments[0]).value";
    let value = browser.client.execute(script, vec![json!(css)]).await.unwrap();
    value.as_str().unwrap().to_string()
}
