//! Steering runs from the console in a real headless Chromium, against the real server, a real
//! SQLite file and a stand-in model (and an HTTP capability) on loopback: human-task forms, a
//! node's question, Replan, the live run list with its pending count and bulk cancel, the node
//! panels and the event list.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use fantoccini::Locator;
use serde_json::{Value, json};
use support::browser::Browser;
use support::*;

/// A person reviews the post: `post_copy` → `review {approved, comment}` (a comment of at least
/// five characters).
fn human_reviewer() -> Value {
    json!({
        "capabilityId": "reviewer", "version": "1.0", "displayName": "Reviewer", "summary": "A person reviews the post",
        "kind": "validation", "agentType": "human", "inputFacets": ["post_copy"], "outputFacets": ["review"],
        "instructions": "Read the post and approve it or not.",
        "outputContract": {"mode": "json_schema", "schema": {"type": "object", "required": ["approved", "comment"],
            "properties": {"approved": {"type": "boolean", "title": "Approved"},
                           "comment": {"type": "string", "minLength": 5, "maxLength": 100}}}}
    })
}

/// A server whose runs draft a post and wait for a person's review, and one such run, waiting.
async fn waiting_for_review() -> (TestServer, String) {
    let mut capabilities = default_capabilities();
    capabilities.push(human_reviewer());
    let options = Options { capabilities, ..Options::default() };
    let script = planner_then(&[("draft", "writer"), ("review", "reviewer")], post(0.9));
    let server = TestServer::start_with(script, options).await;
    let run = server.run(&envelope()).await[0].run_id.clone();
    server.wait_for_status(&run, "awaiting_human").await;
    (server, run)
}

/// A human task's form is generated from the output schema: invalid input shows the errors at
/// their fields and the run keeps waiting; valid input completes the node; Decline fails the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_task_is_answered_with_a_form_from_its_output_schema() {
    let (server, run) = waiting_for_review().await;
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/runs/{run}"))).await.unwrap();
    let form = "form[data-action=submit]";
    assert!(client.find(Locator::Css(&format!("{form} input[type=checkbox][name=approved]"))).await.is_ok());
    assert!(client.find(Locator::Css(&format!("{form} input[type=text][name=comment]"))).await.is_ok());

    // Too short a comment: the error at its field, and the run still waits.
    browser.fill(&format!("{form} [name=comment]"), "ok").await;
    browser.click_button("section.actions", "Submit").await;
    browser.wait_for_text("[data-error-for=comment]", "shorter than 5").await;
    assert_eq!(browser.text("[data-error-for=approved]").await, "", "no error where there is none");
    browser.screenshot("human-task").await;
    server.wait_for_status(&run, "awaiting_human").await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions"), 0);

    // Valid: the node completes with what was typed.
    client.find(Locator::Css(&format!("{form} [name=approved]"))).await.unwrap().click().await.unwrap();
    browser.fill(&format!("{form} [name=comment]"), "reads well").await;
    browser.click_button("section.actions", "Submit").await;
    browser.wait_for_text("[data-testid=status]", "completed").await;
    let review = server.nodes(&run).await;
    let output = &review.iter().rfind(|n| n["nodeId"] == "review").unwrap()["output"];
    assert_eq!(output, &json!({"approved": true, "comment": "reads well"}));

    // Decline, on another run: the run fails with the reason.
    let declined = server.run(&envelope()).await[0].run_id.clone();
    server.wait_for_status(&declined, "awaiting_human").await;
    client.goto(&server.url(&format!("/ui/runs/{declined}"))).await.unwrap();
    browser.fill("form[data-action=decline] [name=reason]", "off brand").await;
    // Declining fails the run: it asks first; kept, the task still waits.
    browser.click_button("section.actions", "Decline").await;
    let dialog = "dialog[data-testid=confirm]";
    browser.wait_until("the dialog asks", &format!("return document.querySelector('{dialog}').open")).await;
    assert_eq!(browser.text(&format!("{dialog} h2")).await, "End the run as failed?");
    browser.click_button(dialog, "Keep waiting").await;
    browser.wait_until("the dialog closed", &format!("return !document.querySelector('{dialog}').open")).await;
    server.wait_for_status(&declined, "awaiting_human").await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions"), 1, "only the first run's submit");
    browser.click_button("section.actions", "Decline").await;
    browser.click_button(dialog, "Decline and fail the run").await;
    browser.wait_for_text("[data-testid=status]", "failed").await;
    assert!(browser.text("[data-testid=failure-summary]").await.contains("An operator declined a human task"));
    assert_eq!(browser.text("[data-testid=failure-code]").await, "human_task_declined");
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// The inbox answers a human task in place, with the same form: invalid input shows the errors
/// at their fields and the task stays in the inbox; valid input completes the run and empties it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_task_is_answered_inline_from_the_inbox() {
    let (server, run) = waiting_for_review().await;
    let browser = Browser::start(390).await;
    let client = &browser.client;
    client.goto(&server.url("/ui/inbox")).await.unwrap();
    let item = format!("section.actions[data-run-id='{run}']");
    assert!(browser.text(&item).await.contains("Human task"));
    let form = format!("{item} form[data-action=submit]");
    browser.fill(&format!("{form} [name=comment]"), "ok").await;
    browser.click_button(&item, "Submit").await;
    browser.wait_for_text(&format!("{item} [data-error-for=comment]"), "shorter than 5").await;
    server.wait_for_status(&run, "awaiting_human").await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions"), 0);

    client.find(Locator::Css(&format!("{form} [name=approved]"))).await.unwrap().click().await.unwrap();
    browser.fill(&format!("{form} [name=comment]"), "reads well").await;
    browser.click_button(&item, "Submit").await;
    browser.wait_for_text("[data-testid=empty]", "Nothing waits for an operator").await;
    server.wait_for_status(&run, "completed").await;
    let review = server.nodes(&run).await;
    let output = &review.iter().rfind(|n| n["nodeId"] == "review").unwrap()["output"];
    assert_eq!(output, &json!({"approved": true, "comment": "reads well"}));
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// A node's question (a CLARIFY signal) is answered from the run page; the answer reaches the
/// node, which runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_question_is_answered_from_the_run_page() {
    let good = json!({"text": "a post for the EU", "quality_score": 0.9});
    let endpoint =
        HttpCapability::sequence(vec![(200, json!({"signal": "CLARIFY", "question": "Which market?"})), (200, good)]);
    let schema = json!({"type": "object", "required": ["text"]});
    let server = http_writer_server(&endpoint, schema).await;
    let run = server.run(&envelope()).await[0].run_id.clone();
    server.wait_for_status(&run, "awaiting_hitl").await;
    let browser = Browser::start(1280).await;
    browser.client.goto(&server.url(&format!("/ui/runs/{run}"))).await.unwrap();
    assert_eq!(browser.text("[data-testid=question]").await, "Which market?");
    browser.fill("section.actions form[data-action=resume] textarea", "EU only").await;
    browser.click_button("section.actions", "Answer").await;
    browser.wait_for_text("[data-testid=status]", "completed").await;
    let bodies = endpoint.received();
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[1]["clarifications"][0]["answer"], "EU only");
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// Replan from a paused run's page: the feedback reaches the planner and v2 says it was why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replan_from_the_run_page_makes_a_new_version_with_the_feedback_as_its_reason() {
    let server = TestServer::start(feedback_replan_script()).await;
    let gated = gated_envelope();
    let run = server.run(&gated).await[0].run_id.clone();
    let browser = Browser::start(1280).await;
    browser.client.goto(&server.url(&format!("/ui/runs/{run}"))).await.unwrap();
    browser.fill("form[data-action=replan] textarea", "polish it before review").await;
    browser.click_button("section.actions", "Replan").await;
    browser.wait_for_text("[data-testid=question]", "Approve plan version 2").await;
    assert!(browser.text("[data-testid=why]").await.contains("“polish it before review”"));
    assert_eq!(browser.text("[data-testid=diff]").await, "Kept: draft. Added: polish.");
    assert!(server.planner_calls().last().unwrap().user.contains("polish it before review"));
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// The run list is pushed: new runs and status changes appear without reloading, the navigation
/// counts pending decisions live, and an operator cancels several runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_list_updates_live_and_cancels_selected_runs_together() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let browser = Browser::start(1280).await;
    let client = &browser.client;
    client.goto(&server.url("/ui/runs")).await.unwrap();
    browser.wait_for_text("[data-testid=empty]", "No runs yet").await;
    // Marks this page: a reload would lose the mark.
    client.execute("window.sameDocument = true", vec![]).await.unwrap();
    browser.wait_until("the feed is open", "return document.querySelector('[data-testid=pending-count]').hidden").await;

    let gated = gated_envelope();
    let first = server.run(&gated).await[0].run_id.clone();
    let second = server.run(&gated).await[0].run_id.clone();
    let done = server.run(&envelope()).await[0].run_id.clone();
    let row = |id: &str| format!("tr[data-run-id='{id}']");
    browser.wait_for_text(&row(&done), "completed").await;
    browser.wait_for_text(&row(&first), "awaiting_hitl").await;
    browser.wait_for_text("[data-testid=pending-count]", "2").await;
    let order: Vec<String> = client
        .execute("return [...document.querySelectorAll('table.runs tbody tr')].map(r => r.dataset.runId)", vec![])
        .await
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, [done.clone(), second.clone(), first.clone()], "newest first");
    assert!(
        client.find(Locator::Css(&format!("{} input[name=selected]", row(&done)))).await.is_err(),
        "an ended run is not selectable"
    );

    // Select both paused runs and cancel them: the rows change as the runs end.
    for id in [&first, &second] {
        client.find(Locator::Css(&format!("{} input[name=selected]", row(id)))).await.unwrap().click().await.unwrap();
    }
    browser.click_button("form.bulk", "Cancel selected runs").await;
    let dialog = "dialog[data-testid=confirm]";
    assert_eq!(browser.text(&format!("{dialog} h2")).await, "Cancel the 2 selected runs?");
    browser.fill(&format!("{dialog} textarea[name=reason]"), "duplicates").await;
    browser.click_button(dialog, "Cancel 2 runs").await;
    browser.wait_for_text(&row(&first), "cancelled").await;
    browser.wait_for_text(&row(&second), "cancelled").await;
    browser
        .wait_until("no decision pending", "return document.querySelector('[data-testid=pending-count]').hidden")
        .await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs WHERE status = 'cancelled'"), 2);
    for id in [&first, &second] {
        assert_eq!(
            server.event_log(id).last().unwrap().2["payload"]["error"]["note"],
            "duplicates",
            "the reason is recorded"
        );
    }
    let same = client.execute("return window.sameDocument === true", vec![]).await.unwrap();
    assert_eq!(same, json!(true), "the list was pushed, never reloaded");
    browser.screenshot("runs-live").await;
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}

/// The node panels open from the graph and show what a step was given and produced; the event
/// list filters by type, each line opens to its JSON, and older events page back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_panels_and_the_event_list_show_what_each_step_did() {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let frames = server.run(&envelope()).await;
    let run = frames[0].run_id.clone();
    let browser = Browser::start(390).await;
    let client = &browser.client;
    client.goto(&server.url(&format!("/ui/runs/{run}"))).await.unwrap();
    client.find(Locator::Css("svg.graph a[href='#node-polish']")).await.unwrap().click().await.unwrap();
    browser.wait_until("the panel opened", "return document.getElementById('node-polish').open").await;
    let panel = browser.text("#node-polish").await;
    assert!(
        panel.contains("editor") && panel.contains("Retries") && panel.contains("Input facet post_copy"),
        "{panel}"
    );
    assert!(browser.text("#node-polish [data-testid=node-output]").await.contains("\"quality_score\": 0.9"));
    // What the polish received is the draft's post_copy, which the polish itself then rewrote.
    assert!(panel.contains("Input facet post_copy as the step received it"), "{panel}");
    let received = browser.text("#node-polish [data-testid=node-input][data-facet=post_copy]").await;
    assert!(received.contains("\"quality_score\": 0.5"), "as received, not as it is now: {received}");
    assert!(browser.text("[data-testid=result]").await.contains("post scored 0.9"), "the final output");
    browser.screenshot("node-panel").await;

    // The filter shows one type; a line opens to its JSON.
    let filter = client.find(Locator::Css("[data-testid=event-filter]")).await.unwrap();
    filter.select_by_value("node_start").await.unwrap();
    let visible = "return [...document.querySelectorAll('[data-testid=events] li')].filter(li => !li.hidden).map(li => li.dataset.type)";
    let shown = client.execute(visible, vec![]).await.unwrap();
    assert_eq!(shown, json!(["node_start", "node_start"]), "the draft and the polish");
    let line = client.find(Locator::Css("[data-testid=events] li[data-type=node_start] summary")).await.unwrap();
    line.click().await.unwrap();
    browser.wait_for_text("[data-testid=events] li[data-type=node_start] pre", "\"capabilityId\": \"writer\"").await;

    // Older events page back from a seq.
    client.goto(&server.url(&format!("/ui/runs/{run}/events?before=4"))).await.unwrap();
    let seqs = client
        .execute(
            "return [...document.querySelectorAll('[data-testid=events] li')].map(li => Number(li.dataset.seq))",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(seqs, json!([1, 2, 3]));
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    browser.close().await;
}
