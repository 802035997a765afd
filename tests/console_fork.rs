//! Forking from the console in a real headless Chromium, against the real server and a stand-in
//! model on loopback: "Fork from this step" opens the composer with the step's output to edit;
//! the fork reuses the steps before it (no model call), and both run pages link to each other.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use fantoccini::Locator;
use serde_json::json;
use support::browser::Browser;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_forked_with_an_edited_output_is_reused_and_only_what_follows_runs() {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let parent = server.run(&envelope()).await[0].run_id.clone();
    let (planner, writer, editor) =
        (server.planner_calls().len(), server.capability_calls("writer"), server.capability_calls("editor"));
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/runs/{parent}"))).await.unwrap();
    let version_link = client.find(Locator::Css("[data-testid=fork-version]")).await.unwrap();
    assert_eq!(version_link.attr("href").await.unwrap(), Some(format!("/ui/new?fork={parent}&version=2")));
    client.execute("document.querySelector('#node-draft').open = true", vec![]).await.unwrap();
    client.find(Locator::Css("#node-draft [data-testid=fork-node]")).await.unwrap().click().await.unwrap();
    browser.wait_for_text("[data-testid=started-from]", "plan version 2, step draft").await;
    assert_eq!(browser.text("h1").await, "Fork a run");
    let shown = client.execute("return document.querySelector('#fork-output').value", vec![]).await.unwrap();
    let shown: serde_json::Value = serde_json::from_str(shown.as_str().unwrap()).unwrap();
    assert_eq!(shown["quality_score"], json!(0.5), "the draft's output, to edit");

    let mine = json!({"text": "hand-written draft 4711", "quality_score": 0.7});
    browser.set_value("#fork-output", &mine.to_string()).await;
    browser.click_button("form.composer", "Launch").await;
    browser.wait_until("the fork's page opened", "return location.pathname.startsWith('/ui/runs/')").await;
    browser.wait_for_text("[data-testid=status]", "completed").await;
    let child = client.current_url().await.unwrap().path().trim_start_matches("/ui/runs/").to_string();
    assert_ne!(child, parent);
    assert_eq!(browser.text("[data-testid=parent]").await, parent);
    assert_eq!(browser.text("[data-testid=fork-point]").await, "plan version 2, step draft");
    let reused = client.find(Locator::Css("g.node[data-node-id=draft]")).await.unwrap();
    assert_eq!(reused.attr("data-reused").await.unwrap().as_deref(), Some("true"), "the draft is marked reused");
    client.execute("document.querySelector('#node-draft').open = true", vec![]).await.unwrap();
    assert!(browser.text("#node-draft [data-testid=reused-from]").await.contains(&parent));
    assert!(browser.text("#node-draft [data-testid=node-output]").await.contains("hand-written draft 4711"));

    assert_eq!(server.planner_calls().len(), planner, "no planner call");
    assert_eq!(server.capability_calls("writer"), writer, "the draft was not written again");
    assert_eq!(server.capability_calls("editor"), editor + 1, "the polish ran on the edited draft");
    let polish = server.llm_calls().into_iter().rev().find(|c| c.capability_id() == Some("editor")).unwrap();
    assert!(polish.user.contains("hand-written draft 4711"));

    client.find(Locator::Css("[data-testid=parent]")).await.unwrap().click().await.unwrap();
    browser.wait_for_text("[data-testid=reruns]", &child).await;
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}
