//! The LangGraph-compatible API at the HTTP level, with keys configured: who may see and answer
//! what, the stream's headers and heartbeat, and bounded refusals of bad requests.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code states what it expects.

mod support;

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use support::*;

async fn keyed_server(script: flexrun::llm::standin::Script) -> TestServer {
    let env = vec![
        ("FLEXRUN_API_KEYS", "alice:alice-key,bob:bob-key".into()),
        ("FLEXRUN_OPERATOR_KEYS", OPERATOR_KEY.into()),
    ];
    TestServer::start_with(script, Options { env, ..Options::default() }).await
}

/// A request as the SDK sends it: the key in `X-Api-Key`.
async fn call(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> reqwest::Response {
    let mut request = server.http.request(method, server.url(path)).header("x-api-key", key);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

async fn new_thread(server: &TestServer, key: &str) -> String {
    let created = call(server, reqwest::Method::POST, "/threads", key, Some(json!({}))).await;
    assert_eq!(created.status(), 200);
    created.json::<Value>().await.unwrap()["thread_id"].as_str().unwrap().to_string()
}

/// Threads belong to the caller that made them: another caller neither finds nor lists them;
/// a caller cannot answer an interrupt (an operator's action), an operator can; no key is 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_are_their_callers_and_resuming_needs_the_operator_role() {
    let server = keyed_server(planner_then(&[("draft", "writer")], post(0.9))).await;
    let thread = new_thread(&server, "alice-key").await;
    let path = format!("/threads/{thread}");
    assert_eq!(call(&server, reqwest::Method::GET, &path, "bob-key", None).await.status(), 404);
    let search = call(&server, reqwest::Method::POST, "/threads/search", "bob-key", Some(json!({}))).await;
    assert_eq!(search.json::<Value>().await.unwrap(), json!([]));
    let mine = call(&server, reqwest::Method::POST, "/threads/search", "alice-key", Some(json!({}))).await;
    assert_eq!(mine.json::<Value>().await.unwrap()[0]["thread_id"], thread.as_str());
    assert_eq!(server.http.get(server.url(&path)).send().await.unwrap().status(), 401);

    let gated = gated_envelope();
    let run = json!({"assistant_id": "flex", "input": gated, "stream_mode": "custom"});
    let streamed = call(&server, reqwest::Method::POST, &format!("{path}/runs/stream"), "alice-key", Some(run)).await;
    assert_eq!(streamed.status(), 200);
    assert!(streamed.text().await.unwrap().contains("hitl_request"));
    let resume = json!({"assistant_id": "flex", "command": {"resume": true}});
    let refused =
        call(&server, reqwest::Method::POST, &format!("{path}/runs/wait"), "alice-key", Some(resume.clone())).await;
    assert_eq!(refused.status(), 403);
    let other =
        call(&server, reqwest::Method::POST, &format!("{path}/runs/wait"), "bob-key", Some(resume.clone())).await;
    assert_eq!(other.status(), 404, "bob does not see alice's thread");
    let answered = call(&server, reqwest::Method::POST, &format!("{path}/runs/wait"), OPERATOR_KEY, Some(resume)).await;
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.json::<Value>().await.unwrap()["status"], "completed");
    let decided = server.count("SELECT COUNT(*) AS n FROM hitl_decisions WHERE principal NOT IN ('alice', 'bob')");
    assert_eq!(decided, 1, "one decision, the operator's");
    let owners = server.count("SELECT COUNT(*) AS n FROM runs WHERE owner = 'alice'");
    assert_eq!(owners, 1, "the run is alice's");
}

/// A run on a named thread is started without reading the thread first: its first commit checks
/// that the thread is the caller's. Another caller's thread and a missing one are 404 with nothing
/// stored; an operator's run on anyone's thread is the thread owner's, and on a thread without an
/// owner the operator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_first_commit_checks_whose_thread_it_is() {
    use diesel::RunQueryDsl;
    let server = keyed_server(planner_then(&[("draft", "writer")], post(0.9))).await;
    let run = json!({"assistant_id": "flex", "input": envelope(), "stream_mode": "values"});
    let stream = |thread: String, key: &'static str| {
        let (server, run) = (&server, run.clone());
        async move {
            let path = format!("/threads/{thread}/runs/stream");
            let answer = call(server, reqwest::Method::POST, &path, key, Some(run)).await;
            let status = answer.status().as_u16();
            let text = answer.text().await.unwrap();
            (status, serde_json::from_str::<Value>(&text).unwrap_or(Value::Null))
        }
    };
    let not_found = |(status, body): (u16, Value)| (status, body["error"]["code"].as_str().map(String::from));
    let refused = (404, Some("thread_not_found".to_string()));

    let alices = new_thread(&server, "alice-key").await;
    assert_eq!(not_found(stream(alices.clone(), "bob-key").await), refused, "bob: alice's thread");
    let missing = "0190b2d4-0000-7000-8000-000000000000".to_string();
    assert_eq!(not_found(stream(missing, "alice-key").await), refused, "no such thread");
    assert_eq!(not_found(stream("-x".into(), "alice-key").await), refused, "an id no thread can have");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0, "nothing stored");
    let marked = "SELECT COUNT(*) AS n FROM threads WHERE metadata LIKE '%graph_id%'";
    assert_eq!(server.count(marked), 0, "alice's thread left as it was");

    assert_eq!(stream(alices.clone(), "alice-key").await.0, 200);
    assert_eq!(stream(alices.clone(), OPERATOR_KEY).await.0, 200, "an operator on alice's thread");
    let alice_runs = format!("SELECT COUNT(*) AS n FROM runs WHERE thread_id = '{alices}' AND owner = 'alice'");
    assert_eq!(server.count(&alice_runs), 2, "both runs are alice's");
    assert_eq!(server.count(marked), 1);

    // A thread without an owner (stored before threads had owners): only an operator's, and its
    // run is the operator's.
    let unowned = new_thread(&server, "bob-key").await;
    diesel::sql_query(format!("UPDATE threads SET owner = NULL WHERE thread_id = '{unowned}'"))
        .execute(&mut server.db())
        .unwrap();
    assert_eq!(not_found(stream(unowned.clone(), "bob-key").await), refused, "not bob's any more");
    assert_eq!(stream(unowned.clone(), OPERATOR_KEY).await.0, 200);
    let operators =
        format!("SELECT COUNT(*) AS n FROM runs WHERE thread_id = '{unowned}' AND owner NOT IN ('alice', 'bob')");
    assert_eq!(server.count(&operators), 1);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 3, "the three that were allowed, no other");
}

/// `if_not_exists: "create"` starts a run on a thread that does not exist yet, in one request:
/// the thread is made for the caller and marked with the graph, as `POST /threads` and a run
/// would. It never takes another caller's thread; `reject` (the default) leaves a missing thread
/// 404; any other value is 400. Nothing is stored by a refused request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_may_create_its_thread_in_the_same_request() {
    let server = keyed_server(planner_then(&[("draft", "writer")], post(0.9))).await;
    let start = |thread: &str, key: &'static str, if_not_exists: &str| {
        let path = format!("/threads/{thread}/runs/stream");
        let run = json!({"assistant_id": "flex", "input": envelope(), "if_not_exists": if_not_exists});
        let server = &server;
        async move {
            let answer = call(server, reqwest::Method::POST, &path, key, Some(run)).await;
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };
    let code = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null)["error"]["code"].clone();
    let fresh = "0190b2d4-0000-7000-8000-00000000c0de";

    let (status, text) = start(fresh, "alice-key", "reject").await;
    assert_eq!((status, code(&text)), (404, json!("thread_not_found")), "{text}");
    let (status, text) = start(fresh, "alice-key", "sometimes").await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("if_not_exists"), "{text}");
    let (status, text) = start("-x", "alice-key", "create").await;
    assert_eq!((status, code(&text)), (400, json!("invalid_thread_id")), "{text}");
    // The thread is made in the run's first commit: a run refused before it makes none.
    let path = format!("/threads/{fresh}/runs/stream");
    let unplannable = json!({"assistant_id": "flex", "input": {"objective": ""}, "if_not_exists": "create"});
    let refused = call(&server, reqwest::Method::POST, &path, "alice-key", Some(unplannable)).await;
    assert_eq!(refused.status(), 400);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM threads"), 0, "no thread made by a refusal");

    let (status, text) = start(fresh, "alice-key", "create").await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("event: end\ndata: {\"run_id\""), "{text}");
    assert!(text.contains("\"status\":\"success\""), "{text}");
    let thread = call(&server, reqwest::Method::GET, &format!("/threads/{fresh}"), "alice-key", None).await;
    assert_eq!(thread.status(), 200);
    let thread: Value = thread.json().await.unwrap();
    assert_eq!(thread["metadata"], json!({"assistant_id": "flex", "graph_id": "flex"}), "{thread}");
    let search = json!({"metadata": {"graph_id": "flex"}});
    let found = call(&server, reqwest::Method::POST, "/threads/search", "alice-key", Some(search)).await;
    let found: Value = found.json().await.unwrap();
    assert_eq!(found.as_array().map(|threads| threads.len()), Some(1), "found by its metadata: {found}");
    assert_eq!(found[0]["thread_id"], json!(fresh));
    let owned = format!("SELECT COUNT(*) AS n FROM runs WHERE thread_id = '{fresh}' AND owner = 'alice'");
    assert_eq!(server.count(&owned), 1);

    // Bob may not take alice's thread by asking to create it; alice's second run uses it.
    let (status, text) = start(fresh, "bob-key", "create").await;
    assert_eq!((status, code(&text)), (404, json!("thread_not_found")), "{text}");
    let (status, _) = start(fresh, "alice-key", "create").await;
    assert_eq!(status, 200);
    assert_eq!(server.count(&owned), 2);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 2, "bob's refused start stored no run");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM threads"), 1);

    // An operator's start on alice's thread runs there, for alice.
    let (status, text) = start(fresh, OPERATOR_KEY, "create").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(server.count(&owned), 3);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM threads"), 1);
}

/// A stateless run's thread is made in the run's first commit, named with the graph; a stateless
/// run refused before it makes none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_run_makes_its_thread_in_its_first_commit() {
    let server = keyed_server(planner_then(&[("draft", "writer")], post(0.9))).await;
    let threads = "SELECT COUNT(*) AS n FROM threads";
    let refused = json!({"assistant_id": "flex", "input": {"objective": ""}});
    let answer = call(&server, reqwest::Method::POST, "/runs/stream", "alice-key", Some(refused)).await;
    assert_eq!(answer.status(), 400);
    assert_eq!(server.count(threads), 0, "no thread made by a refusal");

    let run = json!({"assistant_id": "flex", "input": envelope()});
    let answer = call(&server, reqwest::Method::POST, "/runs/stream", "alice-key", Some(run)).await;
    assert_eq!(answer.status(), 200);
    let at = answer.headers()["content-location"].to_str().unwrap().to_string();
    let text = answer.text().await.unwrap();
    assert!(text.contains("\"status\":\"success\""), "{text}");
    let thread_id = at.strip_prefix("/threads/").and_then(|rest| rest.split('/').next()).unwrap().to_string();
    let thread = call(&server, reqwest::Method::GET, &format!("/threads/{thread_id}"), "alice-key", None).await;
    assert_eq!(thread.status(), 200);
    let thread: Value = thread.json().await.unwrap();
    assert_eq!(thread["metadata"], json!({"assistant_id": "flex", "graph_id": "flex"}), "{thread}");
    assert_eq!(server.count(threads), 1);
    let owned = format!("SELECT COUNT(*) AS n FROM runs WHERE thread_id = '{thread_id}' AND owner = 'alice'");
    assert_eq!(server.count(&owned), 1);
    let bobs = call(&server, reqwest::Method::GET, &format!("/threads/{thread_id}"), "bob-key", None).await;
    assert_eq!(bobs.status(), 404, "alice's, not bob's");
}

/// A start that makes its thread keeps the thread's rule: a second start on it while the first
/// run is in progress is refused (409), and makes neither a run nor a thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_made_by_a_start_has_one_active_run() {
    let server = keyed_server(planner_then(&[("draft", "writer")], post(0.9).after(Duration::from_secs(5)))).await;
    let path = "/threads/0190b2d4-0000-7000-8000-00000000b05e/runs/stream";
    let run = json!({"assistant_id": "flex", "input": envelope(), "if_not_exists": "create"});
    let first = call(&server, reqwest::Method::POST, path, "alice-key", Some(run.clone())).await;
    assert_eq!(first.status(), 200);
    let second = call(&server, reqwest::Method::POST, path, "alice-key", Some(run)).await;
    assert_eq!(second.status(), 409);
    let error: Value = second.json().await.unwrap();
    assert_eq!(error["error"]["code"], json!("thread_busy"), "{error}");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 1);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM threads"), 1);
    drop(first);
}

/// No refused start leaves a thread behind, whatever it starts from — a chat input with no human
/// message, a resume with nothing to answer (or by a caller who may not answer), a checkpoint of
/// a thread that does not exist — on a thread of its own or on one `if_not_exists: create` names,
/// whose id stays free. A chat start that is not refused makes its thread in its first commit,
/// the caller's and named with the graph, and a second one on it goes on from its conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_start_leaves_no_thread() {
    use reqwest::Method;
    let server = keyed_server(planner_then(&[("draft", "writer")], post(0.9))).await;
    let threads = "SELECT COUNT(*) AS n FROM threads";
    let chat = |messages: Value| json!({"assistant_id": "flex", "input": {"messages": messages}});
    let (no_human, system_only) = (chat(json!([])), chat(json!([{"role": "system", "content": "Be brief."}])));
    let resume = json!({"assistant_id": "flex", "command": {"resume": true}});
    let checkpoint = json!({"assistant_id": "flex", "checkpoint_id": "0190b2d4-0000-7000-8000-000000000001:1"});
    let creating = |mut body: Value| {
        body["if_not_exists"] = json!("create");
        body
    };
    let fresh = "fresh-thread";
    let named = |path: &str| format!("/threads/{fresh}{path}");
    let cases = [
        ("alice-key", "/runs/stream".to_string(), no_human.clone(), 400),
        ("alice-key", "/runs/wait".to_string(), system_only.clone(), 400),
        ("alice-key", "/runs".to_string(), no_human.clone(), 400),
        (OPERATOR_KEY, "/runs/stream".to_string(), resume.clone(), 409),
        ("alice-key", "/runs/wait".to_string(), resume.clone(), 403),
        ("alice-key", named("/runs/stream"), creating(no_human), 400),
        ("alice-key", named("/runs"), creating(system_only), 400),
        (OPERATOR_KEY, named("/runs/stream"), creating(resume.clone()), 409),
        ("alice-key", named("/runs/wait"), creating(resume), 403),
        ("alice-key", named("/runs"), creating(checkpoint), 404),
    ];
    for (key, path, body, refused) in cases {
        let answer = call(&server, Method::POST, &path, key, Some(body.clone())).await;
        let (status, text) = (answer.status().as_u16(), answer.text().await.unwrap());
        assert_eq!(status, refused, "{path} {body}: {text}");
        assert_eq!(server.count(threads), 0, "{path} {body}: no thread made");
    }
    let made = call(&server, Method::POST, "/threads", "alice-key", Some(json!({"thread_id": fresh}))).await;
    assert_eq!(made.status(), 200, "the id a refused start named is free");

    let first = chat(json!([{"role": "user", "content": "First question"}]));
    let answer = call(&server, Method::POST, "/runs/wait", "alice-key", Some(first.clone())).await;
    assert_eq!(answer.status(), 200);
    let path = "/threads/chat-made/runs/wait";
    let answer = call(&server, Method::POST, path, "alice-key", Some(creating(first))).await;
    assert_eq!(answer.status(), 200);
    let second = creating(chat(json!([{"role": "user", "content": "Second question"}])));
    assert_eq!(call(&server, Method::POST, path, "alice-key", Some(second)).await.status(), 200);
    assert_eq!(server.count(threads), 3, "the one made by POST /threads, and one per chat that made its own");
    let marked = "SELECT COUNT(*) AS n FROM threads WHERE owner = 'alice' AND metadata LIKE '%\"graph_id\":\"flex\"%'";
    assert_eq!(server.count(marked), 2, "the chats' threads are alice's, named with the graph");
    let continued = "SELECT COUNT(*) AS n FROM runs WHERE thread_id = 'chat-made' \
                     AND envelope LIKE '%First question%' AND envelope LIKE '%Second question%'";
    assert_eq!(server.count(continued), 1, "the second chat goes on from the first");
}

/// A chat thread's runs carry the conversation so far, and each turn's envelope holds at most
/// `limits.max_body_bytes` of it (the newest messages, whole): turns of 400 KB messages do not make
/// each run's stored envelope larger than the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_threads_history_is_bounded_as_a_posted_envelope_is() {
    use reqwest::Method;
    let server = keyed_server(planner_then(&[("draft", "writer")], post(0.9))).await;
    let path = "/threads/long-chat/runs/wait";
    for turn in 1..=5 {
        let text = format!("turn {turn} {}", "x".repeat(400_000));
        let body = json!({"assistant_id": "flex", "if_not_exists": "create",
                          "input": {"messages": [{"role": "user", "content": text}]}});
        assert_eq!(call(&server, Method::POST, path, "alice-key", Some(body)).await.status(), 200, "turn {turn}");
    }
    let largest = server.count("SELECT CAST(MAX(LENGTH(envelope)) AS BIGINT) AS n FROM runs");
    assert!(largest < 1_048_576 + 450_000, "an envelope of {largest} bytes");
    let last = "SELECT COUNT(*) AS n FROM runs WHERE envelope LIKE '%turn 5 %' AND envelope LIKE '%turn 4 %' \
                AND envelope LIKE '%turn 3 %' AND envelope NOT LIKE '%turn 1 %'";
    assert_eq!(server.count(last), 1, "the last turn keeps the newest of the conversation, not the oldest");
}

/// Cancel takes the SDK's query parameters, `wait` and `action`: `action=interrupt` (the default)
/// cancels the run, and the answer comes once the run has ended, whatever `wait` says. `rollback`,
/// another key, a `wait` that is no boolean and a body are refused (400), the run left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_takes_the_sdks_query_and_refuses_rollback() {
    use reqwest::Method;
    let server = keyed_server(planner_then(&[("draft", "writer")], post(0.9).after(Duration::from_secs(5)))).await;
    let thread = new_thread(&server, "alice-key").await;
    let run = json!({"assistant_id": "flex", "input": envelope()});
    let created = call(&server, Method::POST, &format!("/threads/{thread}/runs"), "alice-key", Some(run)).await;
    assert_eq!(created.status(), 200);
    let run_id = created.json::<Value>().await.unwrap()["run_id"].as_str().unwrap().to_string();
    let status = || flexrun::store::runs::get(&mut server.db(), &run_id).unwrap().status;
    let cancel = format!("/threads/{thread}/runs/{run_id}/cancel");
    let refused = [
        (format!("{cancel}?wait=0&action=rollback"), None, "invalid_query", "rollback"),
        (cancel.clone(), Some(json!({"action": "rollback"})), "invalid_request", "query parameters"),
        (format!("{cancel}?action=interrupt&reason=taken"), None, "invalid_query", "reason"),
        (format!("{cancel}?wait=soon"), None, "invalid_query", "wait"),
        (format!("{cancel}?action=pause"), None, "invalid_query", "interrupt"),
    ];
    for (path, body, code, says) in refused {
        let answer = call(&server, Method::POST, &path, OPERATOR_KEY, body).await;
        let answered = answer.status().as_u16();
        let error: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap_or(Value::Null);
        assert_eq!((answered, error["error"]["code"].as_str()), (400, Some(code)), "{path}: {error}");
        assert!(error["error"]["message"].as_str().unwrap().contains(says), "{path}: {error}");
        assert!(status().is_active(), "{path}: refused, the run goes on");
    }
    let answer = call(&server, Method::POST, &format!("{cancel}?wait=1&action=interrupt"), OPERATOR_KEY, None).await;
    assert_eq!(answer.status(), 202);
    assert_eq!(status().as_str(), "cancelled", "the answer comes once the run has ended");
    let read = call(&server, Method::GET, &format!("/threads/{thread}/runs/{run_id}"), "alice-key", None).await;
    assert_eq!(read.json::<Value>().await.unwrap()["status"], "interrupted");
}

/// A stream says where to reconnect (`Location`, with its modes) and which run it is
/// (`Content-Location`), and sends a heartbeat comment while the run is quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_names_its_run_and_sends_heartbeats_while_quiet() {
    let server = keyed_server(planner_then(&[("draft", "writer")], post(0.9).after(Duration::from_secs(8)))).await;
    let thread = new_thread(&server, "alice-key").await;
    let run = json!({"assistant_id": "flex", "input": envelope(), "stream_mode": ["values", "custom"]});
    let response =
        call(&server, reqwest::Method::POST, &format!("/threads/{thread}/runs/stream"), "alice-key", Some(run)).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let content_location = response.headers()["content-location"].to_str().unwrap().to_string();
    assert!(content_location.starts_with(&format!("/threads/{thread}/runs/")), "{content_location}");
    assert_eq!(location, format!("{content_location}/stream?stream_mode=values&stream_mode=custom"));
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    let heard = tokio::time::timeout(Duration::from_secs(7), async {
        while let Some(chunk) = body.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            // Two: one may come at once; the second only after a quiet interval.
            if seen.lines().filter(|line| line.starts_with(':')).count() >= 2 {
                return;
            }
        }
    })
    .await;
    assert!(heard.is_ok(), "comments within 7 s of quiet: {seen}");
    assert!(seen.starts_with("event: metadata\n"), "{seen}");
}

/// Bad requests get a 400 that says what is wrong, bounded whatever the input; nothing is
/// created by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_run_requests_are_refused_with_bounded_answers() {
    let server = keyed_server(planner_then(&[("draft", "writer")], post(0.9))).await;
    let thread = new_thread(&server, "alice-key").await;
    let path = format!("/threads/{thread}/runs");
    let long = "x".repeat(200_000);
    let cases = [
        json!({"assistant_id": "flex", "input": envelope(), "stream_mode": long}),
        json!({"assistant_id": "flex", "input": {"objective": ""}}),
        json!({"assistant_id": "flex"}),
        json!({"assistant_id": "flex", "input": envelope(), "multitask_strategy": long}),
        json!({"assistant_id": "flex", "input": {"messages": [{"type": "ai", "content": long}]}}),
    ];
    for body in cases {
        let refused = call(&server, reqwest::Method::POST, &path, "alice-key", Some(body)).await;
        let status = refused.status().as_u16();
        let text = refused.text().await.unwrap();
        assert!([400, 409].contains(&status), "{status}: {text}");
        assert!(text.len() < 2_000, "a bounded answer: {} bytes", text.len());
    }
    let nothing_to_resume = json!({"assistant_id": "flex", "command": {"resume": true}});
    let refused = call(&server, reqwest::Method::POST, &path, OPERATOR_KEY, Some(nothing_to_resume)).await;
    assert_eq!(refused.status(), 409);
    let unknown = json!({"assistant_id": long, "input": envelope()});
    let refused = call(&server, reqwest::Method::POST, &path, "alice-key", Some(unknown)).await;
    assert_eq!(refused.status(), 404);
    assert!(refused.text().await.unwrap().len() < 500);
    let missing = call(&server, reqwest::Method::GET, "/threads/nope/runs/nope", "alice-key", None).await;
    assert_eq!(missing.status(), 404);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0, "no run was created");
}

/// A thread may be created with its own id: again with it is 409, or the same thread with
/// `if_exists: do_nothing`; an id with '/' is refused. The one assistant is `flex`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_with_chosen_ids_and_the_one_assistant() {
    let server = keyed_server(planner_then(&[("draft", "writer")], post(0.9))).await;
    let post_thread = |body: Value| call(&server, reqwest::Method::POST, "/threads", "alice-key", Some(body));
    let first = post_thread(json!({"thread_id": "t-chosen", "metadata": {"team": "a"}})).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.json::<Value>().await.unwrap()["status"], "idle");
    assert_eq!(post_thread(json!({"thread_id": "t-chosen"})).await.status(), 409);
    let kept = post_thread(json!({"thread_id": "t-chosen", "if_exists": "do_nothing"})).await;
    assert_eq!(kept.status(), 200);
    assert_eq!(kept.json::<Value>().await.unwrap()["metadata"], json!({"team": "a"}));
    assert_eq!(post_thread(json!({"thread_id": "a/b"})).await.status(), 400);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM threads"), 1);
    let flex = call(&server, reqwest::Method::GET, "/assistants/flex", "alice-key", None).await;
    assert_eq!(flex.json::<Value>().await.unwrap()["graph_id"], "flex");
    let other = call(&server, reqwest::Method::GET, "/assistants/agent", "alice-key", None).await;
    assert_eq!(other.status(), 404);
}

/// The history is also served on GET (`?limit=&before=`), as LangGraph's server does; an
/// unknown `before` is refused.
#[tokio::test]
async fn the_history_is_also_served_on_get() {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let thread: Value = server
        .http
        .post(server.url("/threads"))
        .bearer_auth(OPERATOR_KEY)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = thread["thread_id"].as_str().unwrap();
    let mut on_thread = envelope();
    on_thread["constraints"] = json!({"threadId": tid});
    server.run(&on_thread).await;
    let posted: Value = server
        .http
        .post(server.url(&format!("/threads/{tid}/history")))
        .bearer_auth(OPERATOR_KEY)
        .json(&json!({"limit": 3}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let got: Value = server
        .http
        .get(server.url(&format!("/threads/{tid}/history?limit=3")))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(posted, got);
    assert_eq!(got.as_array().unwrap().len(), 3);
    let before = got[0]["checkpoint_id"].as_str().unwrap();
    let older: Value = server
        .http
        .get(server.url(&format!("/threads/{tid}/history?limit=1&before={before}")))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(older[0]["checkpoint"], got[1]["checkpoint"]);
    let unknown = server
        .http
        .get(server.url(&format!("/threads/{tid}/history?before=nope:3")))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status().as_u16(), 400);
}

/// The `values` events of a run of `input` streamed on `thread` (with `updates` too), each held to
/// the text its JSON writes — keys in order, as the thread's state writes them — and the stream's
/// whole text.
async fn streamed_values(server: &TestServer, thread: &str, input: Value) -> (Vec<Value>, String) {
    let run = json!({"assistant_id": "flex", "input": input, "stream_mode": ["values", "updates"]});
    let response =
        call(server, reqwest::Method::POST, &format!("/threads/{thread}/runs/stream"), "alice-key", Some(run)).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let values = text
        .split("\n\n")
        .filter(|event| event.lines().any(|line| line == "event: values"))
        .filter_map(|event| event.lines().find_map(|line| line.strip_prefix("data: ")))
        .map(|data| {
            let read: Value = serde_json::from_str(data).unwrap();
            assert_eq!(data, read.to_string(), "written as its JSON writes");
            read
        })
        .collect();
    (values, text)
}

/// The thread's `values`, as `GET /threads/{tid}/state` writes them anew from the run's log.
async fn state_values(server: &TestServer, thread: &str) -> Value {
    let state = call(server, reqwest::Method::GET, &format!("/threads/{thread}/state"), "alice-key", None).await;
    assert_eq!(state.status(), 200);
    state.json::<Value>().await.unwrap()["values"].take()
}

/// A stream keeps what its `values` hold between events and writes only what changed; each event
/// still reads as the JSON it writes, carries every output so far (a repair's included), and the
/// last is the thread's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_events_read_as_the_json_they_write() {
    let server = keyed_server(repair_script(0.5, 0.9)).await;
    let thread = new_thread(&server, "alice-key").await;
    let (values, text) = streamed_values(&server, &thread, envelope()).await;
    // The start, two plans, two completed steps, the failed goal round and the end.
    assert_eq!(values.len(), 7, "a values event after every step: {text}");
    let last = values.last().unwrap();
    assert_eq!(last["status"], "completed");
    let outputs: Vec<&String> = last["outputs"].as_object().unwrap().keys().collect();
    assert_eq!(outputs, ["draft", "polish"], "{last}");
    assert_eq!(last["outputs"]["polish"]["quality_score"], 0.9);
    assert!(last["output"].is_object() && last["usage"]["calls"].as_u64() > Some(0), "{last}");
    assert_eq!(last["goalConditionResults"][0]["satisfied"], true, "{last}");
    assert_eq!(last["plan"]["nodes"][1]["status"], "completed", "{last}");
    assert_eq!(&state_values(&server, &thread).await, last, "the stream's last values are the thread's state");
    // The failed goal round's values show the failed condition and the first plan's one output.
    let failed = &values[3];
    assert_eq!(failed["goalConditionResults"][0]["satisfied"], false, "{failed}");
    assert_eq!(failed["outputs"]["draft"]["quality_score"], 0.5, "{failed}");
    assert_eq!(values[1]["plan"]["nodes"][0]["status"], "pending", "{}", values[1]);

    // A run with no goal condition has a list of none, while it runs and once it ended.
    let mut unconditioned = envelope();
    unconditioned.as_object_mut().unwrap().remove("goal_condition");
    let thread = new_thread(&server, "alice-key").await;
    let (values, text) = streamed_values(&server, &thread, unconditioned).await;
    let results: Vec<&Value> = values.iter().map(|v| &v["goalConditionResults"]).collect();
    assert!(results.iter().all(|r| **r == json!([])), "{text}");
    assert_eq!(state_values(&server, &thread).await["goalConditionResults"], json!([]));
}

/// The parts of `values` a run has only while it waits (`__interrupt__`) or once it failed
/// (`error`) are written as the thread's state writes them (which keeps the open requests
/// beside its values).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_of_a_waiting_and_a_failed_run_are_the_threads_state() {
    let script = script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]);
        }
        Reply::error(400, "the writer refuses")
    });
    let server = keyed_server(script).await;
    let waiting = new_thread(&server, "alice-key").await;
    let mut approval = envelope();
    approval["policies"] = json!({"approval": {"plan": "required"}});
    let (values, _) = streamed_values(&server, &waiting, approval).await;
    let last = values.last().unwrap();
    assert_eq!(last["__interrupt__"][0]["value"]["kind"], "approval", "{last}");
    assert_eq!(last["status"], "awaiting_hitl", "{last}");
    // A stream shows the open request in `values`; the thread's state has it under `interrupts`.
    let mut without = last.clone();
    without.as_object_mut().unwrap().remove("__interrupt__");
    assert_eq!(state_values(&server, &waiting).await, without);
    let failing = new_thread(&server, "alice-key").await;
    let (values, _) = streamed_values(&server, &failing, envelope()).await;
    let last = values.last().unwrap();
    assert_eq!(last["status"], "failed", "{last}");
    assert!(last["error"]["message"].is_string(), "{last}");
    assert!(last.get("__interrupt__").is_none(), "{last}");
    assert_eq!(&state_values(&server, &failing).await, last);
}

/// A model whose writer's output holds a secret key (`api_key`).
fn secret_output() -> flexrun::llm::standin::Script {
    script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]);
        }
        Reply::json(json!({"text": "a post", "quality_score": 0.9, "api_key": "sk-live-1234567890"}))
    })
}

/// A `values` event whose outputs hold a secret key is written through the redaction: the
/// secret's value never reaches the stream, and the rest of the values are as for any run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_with_a_secret_key_are_redacted() {
    let server = keyed_server(secret_output()).await;
    let thread = new_thread(&server, "alice-key").await;
    let (values, text) = streamed_values(&server, &thread, envelope()).await;
    assert!(!text.contains("sk-live-1234567890"), "{text}");
    let last = values.last().unwrap();
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(last["outputs"]["draft"]["quality_score"], 0.9, "{last}");
    assert_ne!(last["outputs"]["draft"]["api_key"], "sk-live-1234567890", "{last}");
    assert!(last["outputs"]["draft"]["api_key"].is_string(), "the key stays, its value is replaced: {last}");
    assert_eq!(&state_values(&server, &thread).await, last, "redacted as the thread's state is");
}

/// The run's answer in `messages-tuple` is the output's JSON as text: its secrets are replaced
/// before it becomes text, where no redaction of the message could find their keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_message_with_a_secret_key_is_redacted() {
    let server = keyed_server(secret_output()).await;
    let thread = new_thread(&server, "alice-key").await;
    let run = json!({"assistant_id": "flex", "input": envelope(), "stream_mode": ["messages-tuple"]});
    let path = format!("/threads/{thread}/runs/stream");
    let response = call(&server, reqwest::Method::POST, &path, "alice-key", Some(run)).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let data = text
        .split("\n\n")
        .filter(|event| event.lines().any(|line| line == "event: messages"))
        .find_map(|event| event.lines().find_map(|line| line.strip_prefix("data: ")))
        .unwrap_or_else(|| panic!("a messages event: {text}"));
    let [message, _metadata]: [Value; 2] = serde_json::from_str(data).unwrap();
    let content: Value = serde_json::from_str(message["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["post_copy"]["api_key"], "[redacted]", "{content}");
    assert_eq!(content["post_copy"]["quality_score"], 0.9, "the rest is the output: {content}");
    assert!(!text.contains("sk-live-1234567890"), "{text}");
}
