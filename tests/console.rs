//! The operator console in a real headless Chromium, against the real server, a real SQLite file
//! and a stand-in model on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use fantoccini::Locator;
use serde_json::json;
use support::browser::Browser;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_list_shows_runs_newest_first_filters_them_and_opens_a_run_that_streams_its_events() {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let repaired = server.run(&envelope()).await;
    let mut paused = envelope();
    paused["objective"] = json!("Needs <b>an</b> approval");
    paused["policies"] = json!({"approval": {"plan": "required"}});
    let waiting = server.run(&paused).await;
    let browser = Browser::start(1280).await;
    let client = &browser.client;

    // `/` is the run list: newest first, statuses, who a run waits for; markup in an objective
    // is shown as text.
    client.goto(&server.url("/")).await.unwrap();
    assert_eq!(client.current_url().await.unwrap().path(), "/ui/runs");
    let rows = client.find_all(Locator::Css("table.runs tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].attr("data-run-id").await.unwrap().as_deref(), Some(waiting[0].run_id.as_str()));
    let first = rows[0].text().await.unwrap();
    assert!(first.contains("awaiting_hitl") && first.contains("an operator"), "{first}");
    assert!(first.contains("Needs <b>an</b> approval"), "the objective is text, not markup: {first}");
    let second = rows[1].text().await.unwrap();
    assert!(second.contains("completed") && second.contains("v2"), "{second}");

    // Filters live in the URL.
    let status = client.find(Locator::Css("select[name=status]")).await.unwrap();
    status.select_by_value("completed").await.unwrap();
    client.find(Locator::Css("form.filters button")).await.unwrap().click().await.unwrap();
    browser.wait_for_text("table.runs tbody", "completed").await;
    assert!(client.current_url().await.unwrap().query().unwrap().contains("status=completed"));
    assert_eq!(client.find_all(Locator::Css("table.runs tbody tr")).await.unwrap().len(), 1);
    client.goto(&server.url("/ui/runs?q=nothing+like+this")).await.unwrap();
    browser.wait_for_text("[data-testid=empty]", "No runs match these filters").await;

    // A run's page replays its frames from the API stream through EventSource.
    let run_id = &repaired[0].run_id;
    client.goto(&server.url(&format!("/ui/runs/{run_id}"))).await.unwrap();
    browser.wait_for_text("[data-testid=events]", "complete").await;
    let shown = client.find_all(Locator::Css("[data-testid=events] li")).await.unwrap();
    assert_eq!(shown.len(), repaired.len(), "every frame once");
    assert_eq!(browser.text("[data-testid=status]").await, "completed");
    client.goto(&server.url("/ui/runs/01a20000-0000-7000-8000-000000000000")).await.unwrap();
    assert_eq!(browser.text("h1").await, "Run not found");

    let errors = browser.console_errors().await;
    // The not-found page is a 404 on purpose; nothing else may be logged.
    assert!(errors.iter().all(|e| e.contains("404")), "console errors: {errors:?}");
    browser.close().await;
}
