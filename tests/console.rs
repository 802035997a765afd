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
    assert!(second.contains("1 of 4"), "replans made of the run's cap: {second}");
    // What the run's model calls used: the cost (unknown: no prices are configured), the whole
    // usage as the cell's title.
    let usage: flexrun::usage::Usage =
        serde_json::from_value(repaired.last().unwrap().payload["usage"].clone()).unwrap();
    let calls = server.llm_calls().len();
    assert_eq!(usage.tally.calls as usize, calls - 1, "every model call but the paused run's planner call");
    let cost = rows[1].find(Locator::Css("[data-testid=cost]")).await.unwrap();
    assert_eq!(cost.text().await.unwrap(), "unknown");
    assert_eq!(cost.attr("title").await.unwrap(), Some(usage.to_string()));

    // Filters live in the URL.
    let status = client.find(Locator::Css("select[name=status]")).await.unwrap();
    status.select_by_value("completed").await.unwrap();
    client.find(Locator::Css("form.filters button")).await.unwrap().click().await.unwrap();
    browser.wait_for_text("table.runs tbody", "completed").await;
    assert!(client.current_url().await.unwrap().query().unwrap().contains("status=completed"));
    assert_eq!(client.find_all(Locator::Css("table.runs tbody tr")).await.unwrap().len(), 1);
    client.goto(&server.url("/ui/runs?q=nothing+like+this")).await.unwrap();
    browser.wait_for_text("[data-testid=empty]", "No runs match these filters").await;
    // Creation dates, in UTC days: the runs of today, none of a day long past.
    let today = chrono::Utc::now().date_naive();
    client.goto(&server.url(&format!("/ui/runs?from={today}&to={today}"))).await.unwrap();
    assert_eq!(client.find_all(Locator::Css("table.runs tbody tr")).await.unwrap().len(), 2);
    client.goto(&server.url("/ui/runs?from=2001-01-01&to=2001-01-02")).await.unwrap();
    browser.wait_for_text("[data-testid=empty]", "No runs match these filters").await;

    // A run's page replays its frames from the API stream through EventSource.
    let run_id = &repaired[0].run_id;
    client.goto(&server.url(&format!("/ui/runs/{run_id}"))).await.unwrap();
    browser.wait_for_text("[data-testid=events]", "complete").await;
    let shown = client.find_all(Locator::Css("[data-testid=events] li")).await.unwrap();
    assert_eq!(shown.len(), repaired.len(), "every frame once");
    assert_eq!(browser.text("[data-testid=status]").await, "completed");
    assert_eq!(browser.text("[data-testid=usage]").await, usage.to_string());

    // The plan as a graph, its versions, and why v2 replaced v1.
    let versions = client.find_all(Locator::Css("nav.versions a")).await.unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[1].attr("aria-current").await.unwrap().as_deref(), Some("true"), "the latest is shown");
    let why = browser.text("[data-testid=why]").await;
    assert!(why.contains("goal condition failed") && why.contains("post_copy /quality_score"), "{why}");
    assert_eq!(browser.text("[data-testid=diff]").await, "Kept: draft. Added: polish.");
    let nodes = client.find_all(Locator::Css("svg.graph g.node")).await.unwrap();
    assert_eq!(nodes.len(), 2);
    for node in &nodes {
        assert_eq!(node.attr("data-status").await.unwrap().as_deref(), Some("completed"));
    }
    assert_eq!(client.find_all(Locator::Css("svg.graph polyline.edge")).await.unwrap().len(), 1);
    let round = browser.text("[data-testid=checks] tbody").await;
    assert!(round.contains("0.9") && round.contains("pass"), "{round}");
    // What v2 cost (the repair's drafts and steps), and each of its steps, as the document says.
    let doc = server.get_json(&format!("/api/v1/flex/runs/{run_id}")).await;
    let read = |value: &serde_json::Value| serde_json::from_value::<flexrun::usage::Usage>(value.clone()).ok();
    let v2 = read(&doc["planVersions"][1]["usage"]).unwrap();
    assert_eq!(browser.text("[data-testid=version-usage]").await, format!("This version (its drafts and steps): {v2}"));
    let steps: Vec<String> = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|node| node["planVersion"] == 2)
        .filter_map(|node| read(&node["usage"]))
        .map(|usage| usage.to_string())
        .collect();
    let mut shown = Vec::new();
    for usage in client.find_all(Locator::Css("[data-testid=node-usage]")).await.unwrap() {
        shown.push(usage.prop("textContent").await.unwrap().unwrap_or_default());
    }
    assert!(!steps.is_empty(), "v2 ran a step that called the model");
    assert_eq!(shown, steps, "each step's panel shows its calls");
    // v1's round shows the condition that failed, with the value observed.
    versions[0].click().await.unwrap();
    browser.wait_for_text("[data-testid=checks] caption", "after v1").await;
    let round = browser.text("[data-testid=checks] tbody").await;
    assert!(round.contains("/quality_score") && round.contains("0.5") && round.contains("fail"), "{round}");
    assert_eq!(client.find_all(Locator::Css("svg.graph g.node")).await.unwrap().len(), 1);

    client.goto(&server.url("/ui/runs/01a20000-0000-7000-8000-000000000000")).await.unwrap();
    assert_eq!(browser.text("h1").await, "Run not found");

    let errors = browser.console_errors().await;
    // The not-found page is a 404 on purpose; nothing else may be logged.
    assert!(errors.iter().all(|e| e.contains("/ui/runs/01a20000") && e.contains("404")), "console errors: {errors:?}");
    browser.close().await;
}

/// With keys configured, a browser signs in with a key: the session cookie is HttpOnly and
/// SameSite=Strict; a caller sees only its own runs; a change sent from another site is refused;
/// signing out ends the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_with_a_key_opens_a_session_that_sees_what_the_key_may_see() {
    let options = Options {
        env: vec![
            ("FLEXRUN_API_KEYS", "alice:alice-key".into()),
            ("FLEXRUN_OPERATOR_KEYS", format!("ops:{OPERATOR_KEY}")),
        ],
        ..Options::default()
    };
    let server = TestServer::start_with(repair_script(0.5, 0.9), options).await;
    let operators_run = server.run(&envelope()).await[0].run_id.clone();
    let mut own = envelope();
    own["objective"] = json!("Alice's own run");
    let response = server
        .http
        .post(server.url("/api/v1/flex/run.stream"))
        .bearer_auth("alice-key")
        .json(&own)
        .send()
        .await
        .unwrap();
    let alices_run = read_frames(response, usize::MAX).await[0].run_id.clone();

    let browser = Browser::start(390).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/runs/{alices_run}"))).await.unwrap();
    let at = client.current_url().await.unwrap();
    assert_eq!(at.path(), "/ui/login", "not signed in: sent to sign in");
    let sign_in = |key: &'static str| async move {
        let field = client.find(Locator::Css("input[name=key]")).await.unwrap();
        field.send_keys(key).await.unwrap();
        client.find(Locator::Css("form.login button")).await.unwrap().click().await.unwrap();
    };
    sign_in("not-a-key").await;
    browser.wait_for_text("[data-testid=problem]", "not valid").await;
    sign_in("alice-key").await;
    // Back where it was going, as alice.
    browser.wait_for_text("[data-testid=status]", "completed").await;
    assert_eq!(client.current_url().await.unwrap().path(), format!("/ui/runs/{alices_run}"));
    assert_eq!(browser.text("[data-testid=principal]").await, "alice");
    browser.wait_for_text("[data-testid=events]", "complete").await;
    client.goto(&server.url("/ui/runs")).await.unwrap();
    let rows = client.find_all(Locator::Css("table.runs tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 1, "a caller sees only its own runs");
    client.goto(&server.url(&format!("/ui/runs/{alices_run}"))).await.unwrap();
    browser.text("[data-testid=status]").await;
    assert!(client.find(Locator::Css("section.actions")).await.is_err(), "a caller's pages are read-only");
    client.goto(&server.url(&format!("/ui/runs/{operators_run}"))).await.unwrap();
    assert_eq!(browser.text("h1").await, "Run not found");

    // The cookie: opaque, HttpOnly, SameSite=Strict; a change from another site is refused.
    let cookie = client.get_named_cookie("flexrun_session").await.unwrap();
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(cookie.same_site().map(|s| s.to_string()).as_deref(), Some("Strict"));
    let session = format!("flexrun_session={}", cookie.value());
    let cross_site = server
        .http
        .post(server.url("/api/v1/flex/run.stream"))
        .header("cookie", &session)
        .header("origin", "http://evil.example")
        .json(&envelope())
        .send()
        .await
        .unwrap();
    assert_eq!(cross_site.status(), 403);
    assert_eq!(cross_site.json::<serde_json::Value>().await.unwrap()["error"]["code"], "cross_site_request");
    let runs_before = server.count("SELECT COUNT(*) AS n FROM runs");
    assert_eq!(runs_before, 2, "nothing was started");
    let same_site = server.http.get(server.url("/api/v1/flex/runs")).header("cookie", &session).send().await.unwrap();
    assert_eq!(same_site.status(), 200, "the session reads the API as alice");

    // Signing out ends the session: the old cookie no longer works.
    client.goto(&server.url("/ui/runs")).await.unwrap();
    client.find(Locator::Css("form.sign-out button")).await.unwrap().click().await.unwrap();
    browser.wait_for_text("h1", "Sign in").await;
    let after = server.http.get(server.url("/api/v1/flex/runs")).header("cookie", &session).send().await.unwrap();
    assert_eq!(after.status(), 401);
    let errors = browser.console_errors().await;
    assert!(errors.iter().all(|e| e.contains("404") || e.contains("401")), "console errors: {errors:?}");
    browser.close().await;
}

/// An operator steers paused runs from their pages: Approve runs the plan to the end; Reject with
/// feedback plans again (v2, waiting for approval again); Cancel ends a run; an action the run no
/// longer allows shows the server's refusal and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_approves_rejects_and_cancels_paused_runs_from_their_pages() {
    let server = TestServer::start(feedback_replan_script()).await;
    let gated = gated_envelope();
    let paused = || {
        let (server, gated) = (&server, gated.clone());
        async move { server.run(&gated).await[0].run_id.clone() }
    };
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    let click = |label: &'static str| async move {
        let buttons = client.find_all(Locator::Css("section.actions button")).await.unwrap();
        for button in buttons {
            if button.text().await.unwrap() == label {
                return button.click().await.unwrap();
            }
        }
        panic!("no {label} button");
    };

    // Approve.
    let approved = paused().await;
    client.goto(&server.url(&format!("/ui/runs/{approved}"))).await.unwrap();
    assert_eq!(browser.text("[data-testid=question]").await, "Approve plan version 1 before any of its steps runs?");
    click("Approve").await;
    browser.wait_for_text("[data-testid=status]", "completed").await;
    assert!(client.find(Locator::Css("section.actions")).await.is_err(), "an ended run offers no action");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions WHERE decision = 'approved'"), 1);

    // Reject with feedback: a second plan, waiting for approval again.
    let rejected = paused().await;
    client.goto(&server.url(&format!("/ui/runs/{rejected}"))).await.unwrap();
    client
        .find(Locator::Css("form[data-approved=false] textarea"))
        .await
        .unwrap()
        .send_keys("add a polish step")
        .await
        .unwrap();
    click("Reject").await;
    browser.wait_for_text("[data-testid=question]", "Approve plan version 2").await;
    let why = browser.text("[data-testid=why]").await;
    assert!(why.contains("“add a polish step”"), "v2 says the feedback was why: {why}");
    let planner = server.planner_calls();
    assert!(planner.last().unwrap().user.contains("add a polish step"), "the feedback reached the planner");

    // Cancel asks first, with a reason to give: kept, nothing changes; confirmed, the run ends and
    // the reason is recorded with the cancel.
    client.goto(&server.url(&format!("/ui/runs/{rejected}"))).await.unwrap();
    click("Cancel").await;
    let dialog = "dialog[data-testid=confirm]";
    browser.wait_until("the dialog asks", &format!("return document.querySelector('{dialog}').open")).await;
    assert_eq!(browser.text(&format!("{dialog} h2")).await, "Cancel this run?");
    browser.click_button(dialog, "Keep it running").await;
    browser.wait_until("the dialog closed", &format!("return !document.querySelector('{dialog}').open")).await;
    assert_eq!(browser.text("[data-testid=status]").await, "awaiting_hitl");
    click("Cancel").await;
    browser.fill(&format!("{dialog} textarea[name=reason]"), "wrong brief").await;
    browser.click_button(dialog, "Cancel the run").await;
    browser.wait_for_text("[data-testid=status]", "cancelled").await;
    assert_eq!(browser.text("[data-testid=failure-note]").await, "wrong brief");
    let log = server.event_log(&rejected);
    let complete = &log.last().unwrap().2["payload"];
    assert_eq!((&complete["status"], &complete["error"]["note"]), (&json!("cancelled"), &json!("wrong brief")));

    // Reject without feedback says it fails the run, and asks before it does.
    let failing = paused().await;
    client.goto(&server.url(&format!("/ui/runs/{failing}"))).await.unwrap();
    assert!(browser.text("[data-testid=reject-hint]").await.contains("without feedback fails the run"));
    click("Reject").await;
    browser.wait_until("the dialog asks", &format!("return document.querySelector('{dialog}').open")).await;
    assert_eq!(browser.text(&format!("{dialog} h2")).await, "Reject and fail the run?");
    browser.click_button(dialog, "Keep waiting").await;
    browser.wait_until("the dialog closed", &format!("return !document.querySelector('{dialog}').open")).await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions WHERE decision = 'rejected'"), 1, "only v1's");
    click("Reject").await;
    browser.click_button(dialog, "Reject and fail the run").await;
    browser.wait_for_text("[data-testid=status]", "failed").await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions WHERE decision = 'rejected'"), 2);

    // A stale page: the run was cancelled elsewhere before the page heard of it (its streams
    // stopped, as when it is left: a page that follows shows the cancel by itself); Approve shows
    // why it cannot.
    let stale = paused().await;
    client.goto(&server.url(&format!("/ui/runs/{stale}"))).await.unwrap();
    browser.text("[data-testid=question]").await;
    client.execute("window.dispatchEvent(new PageTransitionEvent('pagehide'))", vec![]).await.unwrap();
    browser.screenshot("approval").await;
    let cancel = server
        .http
        .post(server.url(&format!("/api/v1/flex/runs/{stale}/cancel")))
        .bearer_auth(OPERATOR_KEY)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 200);
    click("Approve").await;
    browser.wait_for_text("[data-testid=action-problem]", "not awaiting operator input").await;
    assert_eq!(
        server.count("SELECT COUNT(*) AS n FROM hitl_decisions WHERE decision = 'approved'"),
        1,
        "nothing recorded"
    );
    let errors = browser.console_errors().await;
    assert!(errors.iter().all(|e| e.contains("run.resume") && e.contains("409")), "console errors: {errors:?}");
    browser.close().await;
}

/// A waiting run offers Replan while it has replans left; once it used them all the page shows
/// the action disabled with the reason, live, rather than offering what the server refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_no_replans_left_is_not_offered_a_replan() {
    let server = TestServer::start(feedback_replan_script()).await;
    let mut capped = gated_envelope();
    capped["policies"]["replan"] = json!({"maxReplans": 1});
    let run_id = server.run(&capped).await[0].run_id.clone();
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/runs/{run_id}"))).await.unwrap();
    assert_eq!(browser.text("[data-testid=question]").await, "Approve plan version 1 before any of its steps runs?");
    assert!(client.find(Locator::Css("[data-testid=replan-refused]")).await.is_err(), "a replan is left");

    browser.fill("form[data-action=replan] textarea", "add a polish step").await;
    browser.click_button("form[data-action=replan]", "Replan").await;
    browser.wait_for_text("[data-testid=question]", "Approve plan version 2").await;
    browser.wait_for_text("[data-testid=replan-refused]", "No replans left: 1 of 1 used").await;
    assert!(client.find(Locator::Css("form[data-action=replan]")).await.is_err(), "no replan is offered");
    let button = client.find(Locator::Css("[data-testid=replan-refused] button")).await.unwrap();
    assert_eq!(button.attr("disabled").await.unwrap().as_deref(), Some("true"));
    assert!(client.find(Locator::Css("form[data-approved=true] button")).await.is_ok(), "approving is still offered");

    // The server refuses what the page no longer offers.
    let url = server.url(&format!("/api/v1/flex/runs/{run_id}/replan"));
    let refused = server.http.post(url).bearer_auth(OPERATOR_KEY).json(&json!({})).send().await.unwrap();
    assert_eq!(refused.status(), 422);
    assert_eq!(refused.json::<serde_json::Value>().await.unwrap()["error"]["code"], "replan_limit");
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// A run that reached its budget waits on its page with a form to raise it: an empty form shows the
/// server's refusal and records nothing; a raised model-call limit lets the run go on to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_raises_a_reached_budget_from_the_run_page() {
    let server = TestServer::start(planner_then(&[("draft", "writer"), ("polish", "editor")], post(0.9))).await;
    let mut envelope = envelope();
    envelope["policies"] = json!({"budget": {"maxModelCalls": 2}});
    let run_id = server.run(&envelope).await[0].run_id.clone();
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/runs/{run_id}"))).await.unwrap();
    let question = browser.text("[data-testid=question]").await;
    assert!(question.contains("modelCalls: 2 spent of 2"), "{question}");
    assert_eq!(
        browser.text("[data-testid=budget]").await,
        "modelCalls: 2 spent of 2, 0 left (the run pauses when one is reached)"
    );
    let raise = || async { client.find(Locator::Css("form[data-approved=true] button")).await.unwrap() };

    raise().await.click().await.unwrap();
    browser.wait_for_text("[data-testid=action-problem]", "decision.budget").await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions"), 0, "nothing recorded");

    // End the run fails it: it asks first, and kept, nothing changes.
    browser.click_button("section.actions", "End the run").await;
    let dialog = "dialog[data-testid=confirm]";
    browser.wait_until("the dialog asks", &format!("return document.querySelector('{dialog}').open")).await;
    assert_eq!(browser.text(&format!("{dialog} h2")).await, "End the run as failed?");
    browser.click_button(dialog, "Keep waiting").await;
    browser.wait_until("the dialog closed", &format!("return !document.querySelector('{dialog}').open")).await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions"), 0, "nothing recorded");

    client.find(Locator::Css("input[name=maxModelCalls]")).await.unwrap().send_keys("5").await.unwrap();
    raise().await.click().await.unwrap();
    browser.wait_for_text("[data-testid=status]", "completed").await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions WHERE decision = 'approved'"), 1);
    assert_eq!(server.capability_calls("editor"), 1);
    let errors = browser.console_errors().await;
    assert!(errors.iter().all(|e| e.contains("run.resume") && e.contains("422")), "console errors: {errors:?}");
    browser.close().await;
}

/// A question in the inbox names the step that asks it, with its capability and instructions; a
/// budget reached shows the limits and what was spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_shows_the_step_that_asks_and_the_budget_that_was_reached() {
    let asks = Reply::json(json!({"signal": "CLARIFY", "question": "Formal or casual?"}));
    let server = TestServer::start(planner_then(&[("draft", "writer")], asks)).await;
    let question = server.run(&envelope()).await[0].run_id.clone();
    let mut capped = envelope();
    capped["policies"] = json!({"budget": {"maxModelCalls": 1}});
    let budget = server.run(&capped).await[0].run_id.clone();
    let browser = Browser::start(1280).await;
    browser.client.goto(&server.url("/ui/inbox")).await.unwrap();
    let item = |run: &str| format!("[data-testid=inbox] section[data-run-id='{run}']");
    let asked = browser.text(&format!("{} [data-testid=context]", item(&question))).await;
    assert!(asked.contains("Asked by step") && asked.contains("(draft, writer)"), "{asked}");
    assert!(browser.text(&item(&question)).await.contains("Formal or casual?"));
    let reached = browser.text(&format!("{} [data-testid=context]", item(&budget))).await;
    assert!(reached.contains("modelCalls: 1 spent of 1, 0 left"), "{reached}");
    assert!(reached.contains("Spent") && reached.contains("1 call"), "{reached}");
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// The inbox follows what operators owe without a reload: a decision asked meanwhile shows up in
/// its place, one answered elsewhere leaves, and an item an operator is writing in is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_follows_decisions_asked_and_answered_elsewhere() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url("/ui/inbox")).await.unwrap();
    browser.wait_for_text("[data-testid=empty]", "Nothing waits for an operator").await;
    let item = |run: &str| format!("[data-testid=inbox] section[data-run-id='{run}']");
    let shown = |run: &str| format!("return !!document.querySelector(\"{}\")", item(run));

    let gated = gated_envelope();
    let first = server.run(&gated).await;
    let first_run = first[0].run_id.clone();
    browser.wait_until("the first decision shows", &shown(&first_run)).await;
    let feedback = format!("{} [name=feedback]", item(&first_run));
    client.find(Locator::Css(&feedback)).await.unwrap().send_keys("Shorter, please").await.unwrap();

    let second = server.run(&gated).await;
    let second_run = second[0].run_id.clone();
    browser.wait_until("the second decision shows", &shown(&second_run)).await;
    let order =
        "return [...document.querySelectorAll('[data-testid=inbox] section.actions')].map(s => s.dataset.runId)";
    assert_eq!(client.execute(order, vec![]).await.unwrap(), json!([first_run, second_run]), "oldest first");
    browser.wait_for_text("[data-testid=pending-count]", "2").await;

    // The second is approved elsewhere (the API): it leaves; the first keeps what was written.
    let decision = json!({"runId": second_run, "decision": {"requestId": hitl_request_id(&second), "approved": true}});
    assert_eq!(resume(&server, decision).await.0, 200);
    browser.wait_until("the answered decision leaves", &shown(&second_run).replace("!!", "!")).await;
    let written = format!("return document.querySelector(\"{feedback}\").value");
    assert_eq!(client.execute(&written, vec![]).await.unwrap(), json!("Shorter, please"));
    browser.wait_for_text("[data-testid=pending-count]", "1").await;

    // The last one answered elsewhere too: the inbox says nothing waits.
    let decision = json!({"runId": first_run, "decision": {"requestId": hitl_request_id(&first), "approved": true}});
    assert_eq!(resume(&server, decision).await.0, 200);
    browser.wait_for_text("[data-testid=empty]", "Nothing waits for an operator").await;
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// The inbox lists every decision operators owe, oldest first, and answers them in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_lists_pending_decisions_oldest_first_and_answers_them_in_place() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url("/ui/inbox")).await.unwrap();
    browser.wait_for_text("[data-testid=empty]", "Nothing waits for an operator").await;

    let gated = gated_envelope();
    let first = server.run(&gated).await[0].run_id.clone();
    let second = server.run(&gated).await[0].run_id.clone();
    client.goto(&server.url("/ui/inbox")).await.unwrap();
    let items = client.find_all(Locator::Css("[data-testid=inbox] section.actions")).await.unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].attr("data-run-id").await.unwrap().as_deref(), Some(first.as_str()), "oldest first");
    assert_eq!(items[1].attr("data-run-id").await.unwrap().as_deref(), Some(second.as_str()));
    assert!(items[0].text().await.unwrap().starts_with("Plan approval"));
    browser.wait_for_text("[data-testid=pending-count]", "2").await;

    // Approve the oldest in place: it leaves the inbox and its run completes.
    let approve = items[0].find(Locator::Css("form[data-approved=true] button")).await.unwrap();
    approve.click().await.unwrap();
    for _ in 0..100 {
        let left = client.find_all(Locator::Css("[data-testid=inbox] section.actions")).await.unwrap();
        if left.len() == 1 {
            assert_eq!(left[0].attr("data-run-id").await.unwrap().as_deref(), Some(second.as_str()));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(client.find_all(Locator::Css("[data-testid=inbox] section.actions")).await.unwrap().len(), 1);
    server.wait_for_status(&first, "completed").await;
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// The server dies mid-run (SIGKILL) and comes back: the run page's EventSource re-attaches with
/// `Last-Event-ID` by itself and the page catches up — every frame once, none missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_page_catches_up_after_the_server_is_killed_mid_run() {
    use std::time::Duration;
    let model = flexrun::llm::standin::StandIn::start(script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer"), ("polish", "editor")]);
        }
        match call.capability_id() {
            Some("writer") => post(0.9).after(Duration::from_millis(300)),
            // Long enough to be killed mid-step even when the machine is busy and the page slow
            // to show that it started.
            _ => post(0.9).after(Duration::from_millis(6000)),
        }
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut server =
        support::process::ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let (run_id, _stream) = server.post_run(&envelope()).await;
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/runs/{run_id}"))).await.unwrap();
    let starts = "[data-testid=events] li[data-type=node_start]";
    for _ in 0..200 {
        if client.find_all(Locator::Css(starts)).await.unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(client.find_all(Locator::Css(starts)).await.unwrap().len(), 2, "polish started before the kill");

    server.kill();
    server.restart().await;
    // After the restart the run runs polish again: a second node_start for it, seen live.
    // One snapshot of the list, read in the page (it may re-render at any moment).
    let seqs = || async {
        let script = "return [...document.querySelectorAll('[data-testid=events] li')].map(li => [Number(li.dataset.seq), li.dataset.type])";
        let value = client.execute(script, Vec::new()).await.unwrap();
        serde_json::from_value::<Vec<(u64, String)>>(value).unwrap()
    };
    let mut seen = Vec::new();
    for _ in 0..400 {
        seen = seqs().await;
        if seen.iter().filter(|(_, kind)| kind == "node_start").count() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let numbers: Vec<u64> = seen.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>(), "every frame once, in order: {seen:?}");
    assert_eq!(seen.iter().filter(|(_, kind)| kind == "node_start").count(), 3, "polish ran again: {seen:?}");
    let logged = event_log(dir.path(), &run_id);
    assert_eq!(&logged[..numbers.len()].iter().map(|(seq, _, _)| *seq).collect::<Vec<_>>(), &numbers);
    browser.wait_for_text("[data-testid=status]", "completed").await;
    browser.close().await;
}

/// The capabilities page lists what is registered, never a secret: no endpoint query string, no
/// value under a secret-looking key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_capabilities_page_shows_registrations_without_their_secrets() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let mut hook = http_capability(
        "hook",
        &["brief"],
        &["tags"],
        json!({"type": "object"}),
        "http://127.0.0.1:9/hook?token=sekrit-query",
    );
    hook["metadata"] = json!({"apiKey": "sekrit-key", "team": "growth"});
    let registered = server
        .http
        .post(server.url("/api/v1/flex/capabilities/register"))
        .bearer_auth(OPERATOR_KEY)
        .json(&hook)
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 201);
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url("/ui/capabilities")).await.unwrap();
    let rows = client.find_all(Locator::Css("[data-testid=capabilities] tbody tr")).await.unwrap();
    let ids: Vec<Option<String>> = futures::future::join_all(rows.iter().map(|r| r.attr("data-capability-id")))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ids, ["editor", "hook", "tagger", "writer"].map(|id| Some(id.to_string())));
    let source = client.source().await.unwrap();
    assert!(!source.contains("sekrit"), "a secret reached the page");
    assert!(source.contains("http://127.0.0.1:9/hook") && source.contains("[redacted]") && source.contains("growth"));
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// The pages run under their Content-Security-Policy without a violation (each browser test fails
/// on any console error, so a page that needed an inline script or style would fail them), and the
/// browser enforces the policy: a script, an event handler or a style put inline into a page does
/// not apply, and each is reported as an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_enforces_the_pages_content_security_policy() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let run_id = server.run(&gated_envelope()).await[0].run_id.clone();
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/runs/{run_id}"))).await.unwrap();
    browser.wait_for_text("[data-testid=events]", "hitl_request").await;
    browser.wait_for_text("[data-testid=pending-count]", "1").await;
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "the page itself breaks no rule: {errors:?}");

    let injected = "const script = document.createElement('script'); \
                    script.textContent = 'window.scriptRan = true'; document.head.append(script); \
                    const button = document.createElement('button'); \
                    button.setAttribute('onclick', 'window.handlerRan = true'); \
                    document.body.append(button); button.click(); \
                    const styled = document.createElement('p'); styled.setAttribute('style', 'color: rgb(1, 2, 3)'); \
                    document.body.append(styled); \
                    return [window.scriptRan === true, window.handlerRan === true, getComputedStyle(styled).color];";
    let ran = client.execute(injected, Vec::new()).await.unwrap();
    assert_eq!(ran[0], false, "an inline script does not run");
    assert_eq!(ran[1], false, "an inline event handler does not run");
    assert_ne!(ran[2], "rgb(1, 2, 3)", "an inline style does not apply");
    let errors = browser.console_errors().await;
    let violations = errors.iter().filter(|e| e.contains("Content Security Policy")).count();
    assert!(violations >= 3, "each is reported: {errors:?}");
    browser.close().await;
}

/// A run that did not complete says why at the top of its page: in words, with the step that
/// failed linked to its panel, or the goal-condition round that was why; the raw error one click
/// away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_says_why_at_the_top_of_its_page() {
    let endpoint = HttpCapability::start(400, json!({"error": "bad request"}));
    let schema = json!({"type": "object", "required": ["text"]});
    let writer = http_capability("http.writer", &["brief"], &["post_copy"], schema, &endpoint.url);
    let mut capabilities = default_capabilities();
    capabilities.push(writer);
    let script = script(|call| {
        if !call.is_planner() {
            return post(0.5);
        }
        if call.user.contains("http.writer") && call.user.contains("Use http.writer") {
            return plan(&[("draft", "http.writer")]);
        }
        plan(&[("draft", "writer")])
    });
    let server = TestServer::start_with(script, Options { capabilities, ..Options::default() }).await;
    let mut task = envelope();
    task["policies"] = json!({"replan": {"maxGoalConditionReplans": 0}});
    let never_good = server.run(&task).await;
    assert_eq!(never_good.last().unwrap().payload["status"], "failed");
    task["objective"] = json!("Use http.writer");
    let broken = server.run(&task).await;
    assert_eq!(broken.last().unwrap().payload["error"]["code"], "node_failed");

    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/runs/{}", broken[0].run_id))).await.unwrap();
    assert_eq!(browser.text("[data-testid=failure-summary] h2").await, "A step failed");
    let step = browser.text("[data-testid=failure-summary]").await;
    assert!(step.contains("The step's capability answered with an HTTP error (capability_http_error)"), "{step}");
    assert!(client.find(Locator::Css("[data-testid=run-error]")).await.unwrap().text().await.unwrap().is_empty());
    client.find(Locator::Css("[data-testid=failed-step]")).await.unwrap().click().await.unwrap();
    browser.wait_until("the step's panel opened", "return document.getElementById('node-draft').open").await;
    let words = browser.text("#node-draft [data-testid=node-error]").await;
    assert!(words.starts_with("The step's capability answered with an HTTP error (capability_http_error)"), "{words}");
    client.find(Locator::Css("[data-testid=failure-summary] summary")).await.unwrap().click().await.unwrap();
    assert!(browser.text("[data-testid=run-error]").await.contains("\"nodeId\": \"draft\""));

    client.goto(&server.url(&format!("/ui/runs/{}", never_good[0].run_id))).await.unwrap();
    let summary = browser.text("[data-testid=failure-summary]").await;
    assert!(summary.contains("The goal conditions still failed when no repair was left"), "{summary}");
    assert_eq!(
        client.find(Locator::Css("[data-testid=failed-round]")).await.unwrap().attr("href").await.unwrap().as_deref(),
        Some("#checks")
    );
    assert!(client.find(Locator::Css("#checks tr.fail")).await.is_ok(), "the round it links to failed");
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// The run page follows a run from its start without a reload: opened while the planner works it
/// has no plan; then v1's graph, v1's failing goal round, v2 appearing and becoming current, its
/// steps turning complete, the run completed — the same document all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_page_follows_a_run_live_from_planning_to_completed() {
    let think = std::time::Duration::from_millis(1500);
    let work = std::time::Duration::from_millis(700);
    // The first plan waits until the page has been seen planning, however long the browser takes.
    let (seen_planning, planning_seen) = tokio::sync::watch::channel(false);
    let answer = support::script(move |call| {
        if call.is_planner() {
            let repair = call.user.contains("### GOAL CONDITION REPAIR");
            let stages: &[(&str, &str)] =
                if repair { &[("draft", "writer"), ("polish", "editor")] } else { &[("draft", "writer")] };
            return plan(stages).after(think);
        }
        match call.capability_id() {
            Some("writer") => post(0.5).after(work),
            _ => post(0.9).after(work),
        }
    });
    let script: flexrun::llm::standin::Script = std::sync::Arc::new(move |call: flexrun::llm::standin::ChatCall| {
        let (answer, mut planning_seen) = (answer.clone(), planning_seen.clone());
        Box::pin(async move {
            if call.is_planner() {
                let _ = planning_seen.wait_for(|seen| *seen).await;
            }
            answer(call).await
        })
    });
    let server = TestServer::start(script).await;
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    let run_id = read_frames(server.post_run(&envelope()).await, 1).await[0].run_id.clone();
    client.goto(&server.url(&format!("/ui/runs/{run_id}"))).await.unwrap();
    client.execute("window.sameDocument = true; return true", vec![]).await.unwrap();
    assert_eq!(browser.text("[data-testid=status]").await, "planning");
    assert!(client.find(Locator::Css("[data-testid=plan]")).await.is_err(), "no plan while the planner works");
    seen_planning.send_replace(true);

    let steps = [
        ("v1's graph", "return !!document.querySelector('g[data-node-id=draft]')"),
        ("v1's failing goal round", "return !!document.querySelector('#checks tr.fail')"),
        ("v2 current", "return document.querySelector('.versions a[aria-current=true]')?.textContent === 'v2'"),
        ("polish completed", "return document.querySelector('g[data-node-id=polish]')?.dataset.status === 'completed'"),
        ("the run completed", "return document.querySelector('[data-testid=status]').textContent === 'completed'"),
    ];
    for (what, script) in steps {
        browser.wait_until(what, script).await;
    }
    let output = browser.text("[data-testid=result]").await;
    assert!(output.contains("0.9"), "{output}");

    // The timeline: a bar per plan version and per step, in the order they happened, durations in
    // words (the stand-in takes 1.5 s to plan and 0.7 s per step).
    let rows = client
        .execute(
            "return [...document.querySelectorAll('[data-testid=timeline-list] li')].map(li => li.textContent)",
            vec![],
        )
        .await
        .unwrap();
    let rows: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    let starts = [
        "plan v1: the first plan",
        "v1 · draft: writer, completed",
        "plan v2: replanned: goal condition failed",
        "v2 · polish: editor, completed",
    ];
    let mut at = 0;
    for wanted in starts {
        let found = rows[at..]
            .iter()
            .position(|row| row.starts_with(wanted))
            .unwrap_or_else(|| panic!("{wanted} after row {at}: {rows:?}"));
        at += found + 1;
    }
    let draft = rows.iter().find(|row| row.starts_with("v1 · draft")).unwrap();
    let took = draft.rsplit_once('(').unwrap().1.trim_end_matches(')');
    let millis: u64 = took.strip_suffix(" ms").map_or(1_000, |ms| ms.parse().unwrap());
    assert!(millis >= 700, "a 0.7 s step: {draft}");
    let bars = client.find_all(Locator::Css("[data-testid=timeline] svg g.bar")).await.unwrap();
    assert_eq!(bars.len(), rows.len());
    assert!(browser.text("[data-testid=total]").await.starts_with("The run took "));
    let same = client.execute("return window.sameDocument === true", vec![]).await.unwrap();
    assert_eq!(same, json!(true), "followed live, never reloaded");
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// A plan approval in the inbox is decided with the plan in view: its steps in order with their
/// capabilities and instructions, its graph, why the version exists and what changed from the
/// one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_plan_approval_shows_the_plan_and_why_it_exists() {
    let server = TestServer::start(feedback_replan_script()).await;
    let frames = server.run(&gated_envelope()).await;
    let run_id = frames[0].run_id.clone();
    let request = hitl_request_id(&frames);
    let (status, _, _) = resume(&server, decision(&run_id, &request, false, Some("add a polish step"))).await;
    assert_eq!(status, 200);
    server.wait_for_status(&run_id, "awaiting_hitl").await;

    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url("/ui/inbox")).await.unwrap();
    let glance = "[data-testid=inbox] [data-testid=plan-glance]";
    let why = browser.text(&format!("{glance} [data-testid=why]")).await;
    assert!(
        why.starts_with("Version 2 exists because operator rejected") && why.contains("“add a polish step”"),
        "{why}"
    );
    assert_eq!(browser.text(&format!("{glance} [data-testid=diff]")).await, "Kept: draft. Added: polish.");
    let steps = client.find_all(Locator::Css(&format!("{glance} [data-testid=plan-steps] li"))).await.unwrap();
    assert_eq!(steps.len(), 2);
    assert!(steps[0].text().await.unwrap().contains("draft · writer"));
    assert!(steps[1].text().await.unwrap().contains("polish · editor"));
    let boxes = client.find_all(Locator::Css(&format!("{glance} svg g[data-node-id]"))).await.unwrap();
    assert_eq!(boxes.len(), 2);
    let link = client.find(Locator::Css(&format!("{glance} svg a"))).await.unwrap().attr("href").await.unwrap();
    assert_eq!(link.as_deref(), Some(format!("/ui/runs/{run_id}#node-draft").as_str()));

    browser.click_button("[data-testid=inbox] section.actions", "Approve").await;
    server.wait_for_status(&run_id, "completed").await;
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// A run whose planner never drafted a valid plan says why at the top of its page: each reason the
/// drafts were refused (as the run's error records them), not only that no plan was valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_a_valid_plan_lists_why_the_drafts_were_refused() {
    let server = TestServer::start(script(|_| plan(&[("draft", "no.such.capability")]))).await;
    let frames = server.run(&envelope()).await;
    let error = &frames.last().unwrap().payload["error"];
    assert_eq!(error["code"], "plan_rejected");
    let reason = error["diagnostics"][0]["message"].as_str().expect("a diagnostic with a message").to_string();

    let browser = Browser::start(1280).await;
    browser.client.goto(&server.url(&format!("/ui/runs/{}", frames[0].run_id))).await.unwrap();
    assert_eq!(browser.text("[data-testid=failure-summary] h2").await, "The planner produced no valid plan");
    assert_eq!(browser.text("[data-testid=failure-diagnostics] li").await, reason);
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// A run page open on a paused run follows it again when the run is decided elsewhere — through
/// the API, the CLI, the inbox or another operator's tab: it shows the run going on to the end,
/// its actions gone, without a reload (before, it kept showing the run waiting, Approve and all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_page_follows_the_run_when_it_is_decided_elsewhere() {
    let server = TestServer::start(feedback_replan_script()).await;
    let frames = server.run(&gated_envelope()).await;
    let run_id = frames[0].run_id.clone();
    let request = hitl_request_id(&frames);
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/runs/{run_id}"))).await.unwrap();
    browser.text("[data-testid=question]").await;
    client.execute("window.sameDocument = true", vec![]).await.unwrap();
    // The page stopped its stream at the pause; the decision comes from elsewhere a moment later.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    let (status, _, _) = resume(&server, decision(&run_id, &request, true, None)).await;
    assert_eq!(status, 200);
    browser.wait_for_text("[data-testid=status]", "completed").await;
    assert!(client.find(Locator::Css("section.actions")).await.is_err(), "an ended run offers no action");
    let same = client.execute("return window.sameDocument === true", vec![]).await.unwrap();
    assert_eq!(same, json!(true), "followed live, never reloaded");
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// What a page hides stays hidden: the navigation's pending count when nothing is pending (it
/// showed an orange "0"), and the confirmation's reason field when the action records no reason (a
/// Reject without feedback offered a field whose text went nowhere); a Cancel's reason is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_page_hides_stays_hidden() {
    let server = TestServer::start(feedback_replan_script()).await;
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    let shown =
        |css: &'static str| async move { client.find(Locator::Css(css)).await.unwrap().is_displayed().await.unwrap() };
    let badge = "[data-testid=pending-count]";
    client.goto(&server.url("/ui/runs")).await.unwrap();
    browser
        .wait_until(
            "the feed's count arrived",
            &format!("return document.querySelector('{badge}').textContent === '0'"),
        )
        .await;
    assert!(!shown(badge).await, "no count when nothing is pending");
    let run_id = server.run(&gated_envelope()).await[0].run_id.clone();
    browser.wait_for_text(badge, "1").await;
    assert!(shown(badge).await);

    client.goto(&server.url(&format!("/ui/runs/{run_id}"))).await.unwrap();
    let dialog = "dialog[data-testid=confirm]";
    let reason = "[data-testid=confirm-reason-label]";
    browser.click_button("section.actions", "Reject").await;
    browser.wait_until("the dialog asks", &format!("return document.querySelector('{dialog}').open")).await;
    assert!(!shown(reason).await, "a Reject without feedback records no reason");
    browser.click_button(dialog, "Keep waiting").await;
    browser.click_button("section.actions", "Cancel").await;
    browser.wait_until("the dialog asks", &format!("return document.querySelector('{dialog}').open")).await;
    assert!(shown(reason).await, "a Cancel records its reason");
    browser.click_button(dialog, "Keep it running").await;
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}
