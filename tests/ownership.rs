//! Runs belong to their caller: a key's name is the principal that owns the runs it starts; a
//! caller lists, reads and follows only its own runs and tasks, operators every run; decisions
//! record who made them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use serde_json::{Value, json};
use support::*;

const ALICE: &str = "alice-secret";
const BOB: &str = "bob-secret";

async fn server() -> TestServer {
    let options = Options {
        env: vec![
            ("FLEXRUN_API_KEYS", format!("alice:{ALICE},bob:{BOB}")),
            ("FLEXRUN_OPERATOR_KEYS", format!("ops:{OPERATOR_KEY}")),
        ],
        ..Options::default()
    };
    TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), options).await
}

async fn get(server: &TestServer, key: &str, path: &str) -> (u16, Value) {
    let response = server.http.get(server.url(path)).bearer_auth(key).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn start_as(server: &TestServer, key: &str, envelope: &Value) -> String {
    let response =
        server.http.post(server.url("/api/v1/flex/run.stream")).bearer_auth(key).json(envelope).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let frames = read_frames(response, usize::MAX).await;
    frames[0].run_id.clone()
}

fn listed(body: &Value) -> Vec<String> {
    body["runs"].as_array().unwrap().iter().map(|r| r["runId"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_see_only_their_own_runs_and_operators_see_every_run() {
    let server = server().await;
    let alices = start_as(&server, ALICE, &envelope()).await;
    let bobs = start_as(&server, BOB, &envelope()).await;

    let (status, page) = get(&server, ALICE, "/api/v1/flex/runs").await;
    assert_eq!((status, listed(&page)), (200, vec![alices.clone()]));
    assert_eq!(page["runs"][0]["owner"], "alice");
    let (_, page) = get(&server, OPERATOR_KEY, "/api/v1/flex/runs").await;
    assert_eq!(listed(&page), vec![bobs.clone(), alices.clone()], "operators see every run, newest first");

    for path in ["", "/events", "/stream"] {
        let (status, body) = get(&server, BOB, &format!("/api/v1/flex/runs/{alices}{path}")).await;
        assert_eq!(status, 404, "bob reads {path} of alice's run");
        assert_eq!(body["error"]["code"], "run_not_found", "as if it did not exist");
        let (status, _) = get(&server, ALICE, &format!("/api/v1/flex/runs/{alices}{path}")).await;
        assert_eq!(status, 200, "alice reads {path} of her run");
        let (status, _) = get(&server, OPERATOR_KEY, &format!("/api/v1/flex/runs/{alices}{path}")).await;
        assert_eq!(status, 200, "an operator reads {path} of any run");
    }
    let (_, detail) = get(&server, ALICE, &format!("/api/v1/flex/runs/{alices}")).await;
    assert_eq!(detail["run"]["owner"], "alice");
    assert_eq!(server.count(&format!("SELECT COUNT(*) AS n FROM runs WHERE run_id = '{bobs}' AND owner = 'bob'")), 1);
}

/// Whether a caller may see a run is decided from its row, before its log is read: another
/// caller naming a run whose log cannot be read gets the same 404 as for a run that does not
/// exist — not the 500 its owner gets, which would tell that the run is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_callers_run_is_not_found_even_when_its_log_is_unreadable() {
    let server = server().await;
    let alices = start_as(&server, ALICE, &envelope()).await;
    let statement = format!("UPDATE run_events SET frame = 'not a frame' WHERE run_id = '{alices}' AND seq = 2");
    diesel::RunQueryDsl::execute(diesel::sql_query(statement), &mut server.db()).unwrap();

    let document = format!("/api/v1/flex/runs/{alices}");
    let (status, body) = get(&server, BOB, &document).await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!("run_not_found")));
    let (status, _) = get(&server, ALICE, &document).await;
    assert_eq!(status, 500, "its owner is told the run cannot be read");
    let page =
        |key: &str| server.http.get(server.url(&format!("/ui/runs/{alices}"))).bearer_auth(key.to_string()).send();
    assert_eq!(page(BOB).await.unwrap().status(), 404);
    assert_eq!(page(ALICE).await.unwrap().status(), 503, "its owner's page says it cannot be shown");
}

/// The runs a run's console page (and its document) lists as started again from it — the
/// console's `data-testid=reruns`.
async fn reruns_shown(server: &TestServer, key: &str, run_id: &str) -> Vec<String> {
    let response = server.http.get(server.url(&format!("/ui/runs/{run_id}"))).bearer_auth(key).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let page = response.text().await.unwrap();
    let Some((_, listed)) = page.split_once("data-testid=\"reruns\">") else { return Vec::new() };
    let listed = listed.split_once("</dd>").unwrap().0;
    listed.split("href=\"/ui/runs/").skip(1).map(|link| link.split('"').next().unwrap().to_string()).collect()
}

/// Any caller may name any run as the one its run starts again (`metadata.rerunOf`). Many runs of
/// bob's naming alice's run, older than hers and more than a run lists, do not crowd alice's own
/// rerun out of her run's page and document: the runs listed are read for their reader, not read
/// and then filtered; an operator still sees bob's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_callers_runs_naming_a_run_do_not_crowd_out_its_owners_rerun() {
    use flexrun::store::runs::{self, RunRow};
    let server = server().await;
    let alices = start_as(&server, ALICE, &envelope()).await;
    let mut again = envelope();
    again["metadata"] = json!({"rerunOf": alices});
    let bobs = start_as(&server, BOB, &again).await;
    // As many more as a run lists, stored as bob's was (running each would only take longer).
    let mut conn = server.db();
    let row = runs::get(&mut conn, &bobs).unwrap();
    let shown = usize::try_from(flexrun::run::view::FORKS_SHOWN).unwrap();
    for _ in 0..shown {
        runs::insert(&mut conn, &RunRow { run_id: uuid::Uuid::now_v7().to_string(), ..row.clone() }).unwrap();
    }
    let own = start_as(&server, ALICE, &again).await;

    assert_eq!(reruns_shown(&server, ALICE, &alices).await, vec![own.clone()]);
    let (_, document) = get(&server, ALICE, &format!("/api/v1/flex/runs/{alices}")).await;
    assert_eq!(document["run"]["forks"], json!([own]));
    let operators = reruns_shown(&server, OPERATOR_KEY, &alices).await;
    assert_eq!((operators.len(), operators[0].as_str()), (shown, bobs.as_str()), "every run, the oldest first");
    let (_, document) = get(&server, OPERATOR_KEY, &format!("/api/v1/flex/runs/{alices}")).await;
    assert_eq!(document["run"]["forks"].as_array().unwrap().len(), shown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_are_scoped_to_their_caller() {
    let server = server().await;
    let post = |key: &'static str| {
        server
            .http
            .post(server.url("/api/v1/flex/run.stream"))
            .bearer_auth(key)
            .header("idempotency-key", "order-1")
            .json(&envelope())
            .send()
    };
    let alice = post(ALICE).await.unwrap();
    let alice_run = alice.headers()["x-flexrun-run-id"].to_str().unwrap().to_string();
    read_frames(alice, usize::MAX).await;
    let bob = post(BOB).await.unwrap();
    assert!(bob.headers().get("idempotent-replayed").is_none(), "bob's key is his own");
    assert_ne!(bob.headers()["x-flexrun-run-id"].to_str().unwrap(), alice_run);
    read_frames(bob, usize::MAX).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_record_the_principal_that_made_them() {
    let server = server().await;
    let mut envelope = envelope();
    envelope["policies"] = json!({"approval": {"plan": "required"}});
    let run = start_as(&server, ALICE, &envelope).await;
    let (_, detail) = get(&server, ALICE, &format!("/api/v1/flex/runs/{run}")).await;
    let request = detail["hitlRequests"][0]["id"].as_str().unwrap().to_string();

    // A caller may not decide, even on its own run.
    let forbidden = server
        .http
        .post(server.url("/api/v1/flex/run.resume"))
        .bearer_auth(ALICE)
        .json(&decision(&run, &request, true, None))
        .send()
        .await
        .unwrap();
    assert_eq!(forbidden.status(), 403);

    let (status, frames, _) = resume(&server, decision(&run, &request, true, None)).await;
    assert_eq!(status, 200);
    assert_eq!(frames[0].payload["decision"]["principal"], "ops");
    let stored = server.count(&format!(
        "SELECT COUNT(*) AS n FROM hitl_decisions WHERE request_id = '{request}' AND principal = 'ops'"
    ));
    assert_eq!(stored, 1);
}

/// Reads the console feed `response` until an event's data passes `done`; every event's type and
/// data so far.
async fn feed_until(response: reqwest::Response, done: impl Fn(&str) -> bool) -> Vec<(String, String)> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let mut events = response.bytes_stream().eventsource();
    let mut seen = Vec::new();
    let deadline = tokio::time::sleep(std::time::Duration::from_secs(30));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            event = events.next() => {
                let event = event.expect("the feed goes on").unwrap();
                let last = done(&event.data);
                seen.push((event.event, event.data));
                if last {
                    return seen;
                }
            }
            _ = &mut deadline => panic!("the feed never carried what was awaited: {seen:?}"),
        }
    }
}

/// The console's live feed (`/ui/feed`) names only runs its viewer may see: bob's run list hears
/// of his run, and nothing of alice's — not even that it is `gone` from his list — while an
/// operator's hears of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_feed_tells_a_caller_only_of_its_own_runs() {
    let server = server().await;
    let feed = |key: &'static str| server.http.get(server.url("/ui/feed?list=1")).bearer_auth(key).send();
    let (bobs_feed, operators_feed) = (feed(BOB).await.unwrap(), feed(OPERATOR_KEY).await.unwrap());
    assert_eq!((bobs_feed.status().as_u16(), operators_feed.status().as_u16()), (200, 200));
    // Both feeds follow the runs' changes from here (the handler subscribed before answering).
    let alices = start_as(&server, ALICE, &envelope()).await;
    let bobs = start_as(&server, BOB, &envelope()).await;
    // Bob's run is started after alice's ended: its completion is the feeds' last change.
    let done = |data: &str| data.contains(&bobs) && data.contains(r#""status":"completed""#);
    let (bob_saw, operator_saw) = tokio::join!(feed_until(bobs_feed, done), feed_until(operators_feed, done));
    assert!(bob_saw.iter().all(|(_, data)| !data.contains(&alices)), "bob's feed named alice's run: {bob_saw:?}");
    assert!(bob_saw.iter().any(|(kind, _)| kind == "run"), "{bob_saw:?}");
    assert!(
        operator_saw.iter().any(|(kind, data)| kind == "run" && data.contains(&alices)),
        "the operator's feed follows every run: {operator_saw:?}"
    );
}

/// A run page's feed (`/ui/feed?run=<id>`) says when its run changes — to a viewer who may see the
/// run: alice's page on her paused run hears it was decided; bob, asking with her run's id, hears
/// nothing of it (not even that a run of that id exists and moved).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_pages_feed_tells_of_the_run_only_a_viewer_who_may_see_it() {
    let server = server().await;
    let alices = start_as(&server, ALICE, &gated_envelope()).await;
    let path = format!("/ui/feed?list=1&run={alices}");
    let feed = |key: &'static str| server.http.get(server.url(&path)).bearer_auth(key).send();
    let (alices_feed, bobs_feed) = (feed(ALICE).await.unwrap(), feed(BOB).await.unwrap());
    assert_eq!((alices_feed.status().as_u16(), bobs_feed.status().as_u16()), (200, 200));

    let (_, document) = get(&server, OPERATOR_KEY, &format!("/api/v1/flex/runs/{alices}")).await;
    let request = document["hitlRequests"][0]["id"].as_str().unwrap().to_string();
    let (status, _, _) = resume(&server, decision(&alices, &request, true, None)).await;
    assert_eq!(status, 200);
    // Bob's run is started after alice's ended: its completion is his feed's last change.
    let bobs = start_as(&server, BOB, &envelope()).await;
    let alice_done = |data: &str| data == format!(r#"{{"runId":"{alices}"}}"#);
    let bob_done = |data: &str| data.contains(&bobs) && data.contains(r#""status":"completed""#);
    let (alice_saw, bob_saw) = tokio::join!(feed_until(alices_feed, alice_done), feed_until(bobs_feed, bob_done));
    assert!(alice_saw.iter().any(|(kind, _)| kind == "changed"), "{alice_saw:?}");
    assert!(bob_saw.iter().all(|(kind, data)| kind != "changed" && !data.contains(&alices)), "{bob_saw:?}");
}

/// `POST /runs/{id}/fork` with the status and, for a 200, the new run's id (its stream read to
/// the end), else the error body.
async fn fork_as(server: &TestServer, key: &str, run_id: &str, body: &Value) -> (u16, Value) {
    let url = server.url(&format!("/api/v1/flex/runs/{run_id}/fork"));
    let response = server.http.post(url).bearer_auth(key).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    if status != 200 {
        return (status, response.json().await.unwrap_or(Value::Null));
    }
    let frames = read_frames(response, usize::MAX).await;
    (status, json!(frames[0].run_id))
}

/// A fork is a run on its envelope's thread like one `run.stream` starts: forking her own run
/// does not let alice put a run on bob's thread (404 `thread_not_found`, nothing stored), nor
/// claim a thread id for anyone but herself; an operator's fork of bob's run on his thread is
/// bob's run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_goes_on_a_thread_only_as_run_stream_would() {
    let server = server().await;
    let bobs = start_as(&server, BOB, &envelope_on_thread("bob-thread-1")).await;
    let alices = start_as(&server, ALICE, &envelope()).await;
    let runs = || server.count("SELECT COUNT(*) AS n FROM runs");
    let on_bobs_thread = "SELECT COUNT(*) AS n FROM runs WHERE thread_id = 'bob-thread-1'";
    let before = runs();

    let injected = json!({"envelope": envelope_on_thread("bob-thread-1")});
    let (status, body) = fork_as(&server, ALICE, &alices, &injected).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("thread_not_found")), "{body}");
    let (status, body) =
        fork_as(&server, ALICE, &alices, &json!({"fromVersion": 1, "envelope": envelope_on_thread("bob-thread-1")}))
            .await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("thread_not_found")), "{body}");
    assert_eq!((runs(), server.count(on_bobs_thread)), (before, 1), "bob's thread holds his run only");

    // A thread id not in use is made for alice, as `run.stream` would make it: bob cannot use it.
    let (status, forked) =
        fork_as(&server, ALICE, &alices, &json!({"envelope": envelope_on_thread("fresh-thread")})).await;
    assert_eq!(status, 200, "{forked}");
    let forked = forked.as_str().unwrap();
    let owned = "SELECT COUNT(*) AS n FROM threads WHERE thread_id = 'fresh-thread' AND owner = 'alice'";
    assert_eq!(server.count(owned), 1, "the thread is alice's");
    assert_eq!(
        server.count(&format!("SELECT COUNT(*) AS n FROM runs WHERE run_id = '{forked}' AND owner = 'alice'")),
        1
    );
    let response = server
        .http
        .post(server.url("/api/v1/flex/run.stream"))
        .bearer_auth(BOB)
        .json(&envelope_on_thread("fresh-thread"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404, "alice's new thread is not bob's");
    let (status, body) = fork_as(&server, ALICE, &alices, &json!({"envelope": envelope_on_thread("a/b")})).await;
    assert_eq!((status, body["error"]["details"][0]["path"].as_str()), (400, Some("/envelope/constraints/threadId")));

    // An operator's fork of bob's run stays on bob's thread, and is bob's.
    let (status, forked) = fork_as(&server, OPERATOR_KEY, &bobs, &json!({})).await;
    assert_eq!(status, 200, "{forked}");
    let forked = forked.as_str().unwrap();
    let (status, _) = get(&server, BOB, &format!("/api/v1/flex/runs/{forked}")).await;
    assert_eq!(status, 200, "bob sees the run on his thread");
    assert_eq!(server.count(on_bobs_thread), 2);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs WHERE thread_id = 'bob-thread-1' AND owner = 'bob'"), 2);
}
