//! Every console page in both colour schemes and at a phone's width, in a real headless Chromium
//! against the real server: no page scrolls sideways at 390 px (tables fold, graphs and code scroll
//! in their own boxes), no page logs an error, and the dark scheme really is dark. With
//! `FLEXRUN_SCREENSHOTS=<dir>` each page is saved as `<page>-<scheme>.png` (the pictures of
//! `docs/console.md`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use fantoccini::Locator;
use serde_json::json;
use support::browser::{Browser, Scheme};
use support::*;

/// The pages, by name and path, of a server holding a repaired run, a failed run and a run waiting
/// for its plan's approval.
async fn pages(server: &TestServer) -> Vec<(&'static str, String)> {
    let repaired = server.run(&envelope()).await[0].run_id.clone();
    let mut capped = envelope();
    capped["objective"] = json!("Write a post that never scores well enough");
    capped["policies"] = json!({"replan": {"maxGoalConditionReplans": 0}});
    let failed = server.run(&capped).await[0].run_id.clone();
    let waiting = server.run(&gated_envelope()).await[0].run_id.clone();
    vec![
        ("runs", "/ui/runs".into()),
        ("run", format!("/ui/runs/{repaired}")),
        ("run-failed", format!("/ui/runs/{failed}")),
        ("run-approval", format!("/ui/runs/{waiting}")),
        ("inbox", "/ui/inbox".into()),
        ("composer", "/ui/new".into()),
        ("capabilities", "/ui/capabilities".into()),
        ("not-found", "/ui/runs/no-such-run".into()),
    ]
}

/// Signs in with the operator key on the sign-in page (saved as `sign-in-<scheme>`).
async fn sign_in(browser: &Browser, server: &TestServer, scheme: Scheme) {
    browser.client.goto(&server.url("/ui/runs")).await.unwrap();
    assert_eq!(browser.client.current_url().await.unwrap().path(), "/ui/login");
    assert_no_sideways_scroll(browser, "sign-in").await;
    browser.screenshot(&format!("sign-in-{}", scheme.name())).await;
    let field = browser.client.find(Locator::Css("input[name=key]")).await.unwrap();
    field.send_keys(OPERATOR_KEY).await.unwrap();
    browser.click("form.login button").await;
    browser.wait_for_text("[data-testid=principal]", "ops").await;
}

async fn assert_no_sideways_scroll(browser: &Browser, page: &str) {
    let widths = browser
        .client
        .execute("return [document.documentElement.scrollWidth, window.innerWidth]", vec![])
        .await
        .unwrap();
    let (scroll, inner) = (widths[0].as_u64().unwrap(), widths[1].as_u64().unwrap());
    assert!(scroll <= inner, "{page} is {scroll} px wide in a {inner} px window");
}

/// The page's background colour, as the browser computed it.
async fn background(browser: &Browser) -> String {
    let script = "return getComputedStyle(document.body).backgroundColor";
    browser.client.execute(script, vec![]).await.unwrap().as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_reads_in_both_schemes_and_at_a_phones_width() {
    let options = Options { env: vec![("FLEXRUN_OPERATOR_KEYS", format!("ops:{OPERATOR_KEY}"))], ..Options::default() };
    let server = TestServer::start_with(repair_script(0.5, 0.9), options).await;
    let pages = pages(&server).await;
    for (scheme, width) in [(Scheme::Light, 1280), (Scheme::Dark, 1280), (Scheme::Light, 390), (Scheme::Dark, 390)] {
        let browser = Browser::start_in(width, scheme).await;
        sign_in(&browser, &server, scheme).await;
        for (page, path) in &pages {
            browser.client.goto(&server.url(path)).await.unwrap();
            browser.text("h1").await;
            let shade = background(&browser).await;
            let dark = shade == "rgb(16, 19, 24)";
            assert_eq!(dark, scheme == Scheme::Dark, "{page} in the {} scheme has background {shade}", scheme.name());
            if width < 400 {
                assert_no_sideways_scroll(&browser, page).await;
                browser.screenshot(&format!("{page}-{}-390", scheme.name())).await;
            } else {
                browser.screenshot(&format!("{page}-{}", scheme.name())).await;
            }
        }
        let errors = browser.console_errors().await;
        let expected = |e: &String| e.contains("no-such-run") && e.contains("404");
        assert!(errors.iter().all(expected), "console errors in the {} scheme: {errors:?}", scheme.name());
        browser.close().await;
    }
}

/// What a caller or a registration wrote can be one unbroken word thousands of characters long:
/// the longest objective a run may have and a capability summary of the longest allowed wrap where
/// they are shown — the run list, the run page, the inbox, the capabilities — instead of widening
/// the page (before, the run page of such a run was some 230,000 px wide).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbroken_long_text_wraps_instead_of_widening_the_page() {
    let mut wordy = ai_capability("wordy", &["brief"], &["notes"], json!({"type": "object"}));
    wordy["summary"] = json!("s".repeat(2000));
    let mut capabilities = default_capabilities();
    capabilities.push(wordy);
    let server = TestServer::start_with(repair_script(0.5, 0.9), Options { capabilities, ..Options::default() }).await;
    let mut long = gated_envelope();
    long["objective"] = json!("o".repeat(16_384));
    let run = server.run(&long).await[0].run_id.clone();
    server.wait_for_status(&run, "awaiting_hitl").await;
    let pages = ["/ui/runs".to_string(), format!("/ui/runs/{run}"), "/ui/inbox".into(), "/ui/capabilities".into()];
    for width in [1280, 390] {
        let browser = Browser::start(width).await;
        for path in &pages {
            browser.client.goto(&server.url(path)).await.unwrap();
            browser.text("h1").await;
            assert_no_sideways_scroll(&browser, &format!("{path} at {width} px")).await;
        }
        let errors = browser.console_errors().await;
        assert!(errors.is_empty(), "console errors: {errors:?}");
        browser.close().await;
    }
}

/// A console address that is wrong answers with a console page saying so, as a run that is not
/// there does, not with the API's JSON: a path with no page is a 404 page, a query a page cannot
/// read (`?version=two`, `?before=abc`) a 400 page, a plan version or step the run does not have a
/// 404 page; all with the console's headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_console_address_answers_with_a_page() {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let run = server.run(&envelope()).await[0].run_id.clone();
    let wrong = [
        ("/ui/no-such-page".to_string(), 404, "Page not found"),
        (format!("/ui/runs/{run}?version=two"), 400, "Not a page address"),
        (format!("/ui/new?fork={run}&version=-"), 400, "Not a page address"),
        (format!("/ui/runs/{run}/events?before=abc"), 400, "Not a page address"),
        (format!("/ui/runs/{run}/events?before=-5"), 400, "Not a page address"),
        (format!("/ui/runs/{run}/events?after=99999999999999999999"), 400, "Not a page address"),
        // Readable, but naming what the run does not have: not the page of what it has.
        (format!("/ui/runs/{run}?version=3"), 404, "No such plan version"),
        (format!("/ui/runs/{run}?version=0"), 404, "No such plan version"),
        (format!("/ui/new?fork={run}&version=3"), 404, "Nothing to fork from"),
        (format!("/ui/new?fork={run}&version=2&node=nope"), 404, "Nothing to fork from"),
    ];
    for path in [format!("/ui/runs/{run}?version=1"), format!("/ui/new?fork={run}&version=2&node=polish")] {
        assert_eq!(server.http.get(server.url(&path)).send().await.unwrap().status(), 200, "{path}");
    }
    for (path, status, title) in wrong {
        let response = server.http.get(server.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), status, "{path}");
        let headers = response.headers();
        assert_eq!(headers["content-type"], "text/html; charset=utf-8", "{path}");
        assert!(headers.contains_key("content-security-policy"), "{path}");
        let page = response.text().await.unwrap();
        assert!(page.contains(&format!("<h1>{title}</h1>")), "{path}: {page}");
        assert!(page.contains(r#"href="/ui/runs""#), "{path} leads on: {page}");
    }
}

/// A page that says something is not there, or that an address is not a page's, is framed as
/// every page is: a signed-in viewer sees who they are signed in as (and may sign out) on the
/// console's 404 page, a run's, its frames' and the composer's, and on the 400 page of a query a
/// page cannot read (answered before the page's handler runs). A visitor who is not signed in gets
/// the 404 page without that header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_pages_show_who_is_signed_in() {
    let options = Options { env: vec![("FLEXRUN_OPERATOR_KEYS", format!("ops:{OPERATOR_KEY}"))], ..Options::default() };
    let server = TestServer::start_with(repair_script(0.5, 0.9), options).await;
    let missing = "01a20000-0000-7000-8000-000000000000";
    let response = server.http.get(server.url("/ui/no-such-page")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let page = response.text().await.unwrap();
    assert!(page.contains("<h1>Page not found</h1>") && !page.contains("Signed in as"), "{page}");

    let browser = Browser::start(1280).await;
    sign_in(&browser, &server, Scheme::Light).await;
    let pages = [
        ("/ui/no-such-page".to_string(), "Page not found"),
        (format!("/ui/runs/{missing}"), "Run not found"),
        ("/ui/runs/not-a-run-id".to_string(), "Run not found"),
        (format!("/ui/runs/{missing}/events"), "Run not found"),
        (format!("/ui/new?from={missing}"), "Nothing to start from"),
        (format!("/ui/runs/{missing}?version=two"), "Not a page address"),
    ];
    for (path, title) in &pages {
        browser.client.goto(&server.url(path)).await.unwrap();
        assert_eq!(browser.text("h1").await, *title, "{path}");
        assert_eq!(browser.text("[data-testid=principal]").await, "ops", "{path}: the signed-in header");
        assert!(browser.client.find(Locator::Css("form.sign-out button")).await.is_ok(), "{path}: sign out");
    }
    let errors = browser.console_errors().await;
    assert!(errors.iter().all(|e| e.contains("404") || e.contains("400")), "console errors: {errors:?}");
    browser.close().await;
}

/// The run page heads a run with its objective as the run list shows it, the first 300
/// characters: a long one (here the longest allowed, in words) leaves the run's status on the
/// first screen, and the whole objective is one click away (before, a heading of 16,384
/// characters pushed everything else several screens down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_objective_heads_its_run_page_cut_with_the_whole_one_click_away() {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let mut long = envelope();
    let objective = format!("{}end", "word ".repeat(3276));
    long["objective"] = json!(objective);
    let run = server.run(&long).await[0].run_id.clone();
    let browser = Browser::start(1280).await;
    browser.client.goto(&server.url(&format!("/ui/runs/{run}"))).await.unwrap();
    let heading = browser.text("h1").await;
    let shown = heading.chars().count();
    assert!(heading.ends_with("more characters)") && shown < 400, "a heading of {shown} characters");
    let script = "const status = document.querySelector('[data-testid=status]').getBoundingClientRect(); \
                  return status.bottom <= window.innerHeight";
    assert_eq!(browser.client.execute(script, vec![]).await.unwrap(), json!(true), "the status is on the first screen");
    browser.click("[data-testid=whole-objective] summary").await;
    assert_eq!(browser.text("[data-testid=whole-objective] p").await, objective.trim_end());
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}
