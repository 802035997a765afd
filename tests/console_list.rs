//! The live run list in a real headless Chromium: its first page follows new runs as they start
//! and keeps one page of rows, the oldest moving to the next page. And its filters: a value the
//! list cannot read is refused with a page saying so, as the API's list refuses it.
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

/// A status or a day the run list cannot read is refused with a 400 page saying which and why,
/// quoting the value bounded — not ignored, which showed every run as if they matched; the
/// API's list and the list's feed refuse the same with 400 `invalid_query`. Empty filters (the
/// form's "any") filter nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_filter_value_it_cannot_read_is_refused_with_a_page_saying_why() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    server.run(&envelope()).await;
    server.run(&gated_envelope()).await;
    let get = |path: String| {
        let server = &server;
        async move { server.http.get(server.url(&path)).send().await.unwrap() }
    };
    let rows = |page: &str| page.matches("<tr data-run-id=").count();
    let long = "x".repeat(5_000);
    let refused = [
        ("/ui/runs?status=bogus".to_string(), "status “bogus” is not a run status (one of pending, planning,"),
        ("/ui/runs?status=completed&from=yesterday".into(), "from “yesterday” is not a day (YYYY-MM-DD)"),
        ("/ui/runs?to=2026-13-40".into(), "to “2026-13-40” is not a day (YYYY-MM-DD)"),
        // Days no run was made in, which the databases keep and compare each their own way.
        ("/ui/runs?from=-5000-01-01".into(), "from “-5000-01-01” is not a day (YYYY-MM-DD)"),
        ("/ui/runs?to=%2B10000-01-01".into(), "to “+10000-01-01” is not a day (YYYY-MM-DD)"),
        (format!("/ui/runs?status={long}"), "more characters)” is not a run status"),
    ];
    for (path, reason) in refused {
        let response = get(path.clone()).await;
        assert_eq!(response.status(), 400, "{path}");
        assert_eq!(response.headers()["content-type"], "text/html; charset=utf-8");
        let page = response.text().await.unwrap();
        assert!(page.contains("<h1>Not a run list filter</h1>") && page.contains(reason), "{path}: {page}");
        assert_eq!(rows(&page), 0, "{path}: no run is listed as if it matched");
        assert!(!page.contains(&"x".repeat(41)), "{path}: the value is quoted bounded");
    }
    let page = get("/ui/runs?status=&q=&from=&to=".into()).await.text().await.unwrap();
    assert_eq!(rows(&page), 2, "empty filters filter nothing");
    let page = get("/ui/runs?status=completed".into()).await.text().await.unwrap();
    assert_eq!(rows(&page), 1);

    for path in ["/api/v1/flex/runs?status=bogus", "/ui/feed?list=1&status=bogus"] {
        let response = get(path.into()).await;
        assert_eq!(response.status(), 400, "{path}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_query", "{path}: {body}");
    }
}
