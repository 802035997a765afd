//! The live run list in a real headless Chromium: its first page follows new runs as they start
//! and keeps one page of rows, the oldest moving to the next page.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use fantoccini::Locator;
use support::browser::Browser;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_run_list_keeps_one_page_and_the_oldest_move_to_the_next() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let mut started = Vec::new();
    for _ in 0..50 {
        started.push(server.run(&envelope()).await[0].run_id.clone());
    }
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url("/ui/runs")).await.unwrap();
    let rows = || async { client.find_all(Locator::Css("table.runs tbody tr")).await.unwrap().len() };
    assert_eq!(rows().await, 50);
    assert!(client.find(Locator::Css("a[data-testid=older]")).await.is_err(), "one page holds them all");

    for _ in 0..2 {
        started.push(server.run(&envelope()).await[0].run_id.clone());
    }
    let newest = started.last().unwrap().clone();
    let script = format!("return document.querySelector('table.runs tbody tr')?.dataset.runId === '{newest}'");
    browser.wait_until("the newest run is at the top", &script).await;
    assert_eq!(rows().await, 50, "the first page keeps one page of rows");
    let older = client.find(Locator::Css("a[data-testid=older]")).await.unwrap();
    let href = older.attr("href").await.unwrap().unwrap();
    assert!(href.ends_with(&format!("cursor={}", started[2])), "{href}");
    older.click().await.unwrap();
    browser.wait_until("the next page opened", "return location.search.includes('cursor=')").await;
    let shown: Vec<String> = {
        let mut ids = Vec::new();
        for row in client.find_all(Locator::Css("table.runs tbody tr")).await.unwrap() {
            ids.push(row.attr("data-run-id").await.unwrap().unwrap());
        }
        ids
    };
    assert_eq!(shown, [started[1].clone(), started[0].clone()], "the two oldest, on the next page");
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}
