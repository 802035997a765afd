//! What a hostile page or caller tries, refused with nothing created: another site's page
//! posting to a keyless server in the user's browser, a rebound host name, one caller's run on
//! another caller's thread, thread ids clients cannot address, out-of-range pages, request
//! fields flexrun would otherwise drop.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code states what it expects.

mod support;

use reqwest::header::{CONTENT_TYPE, HOST, ORIGIN};
use serde_json::{Value, json};
use support::*;

fn runs(server: &TestServer) -> i64 {
    server.count("SELECT COUNT(*) AS n FROM runs")
}

fn capabilities(server: &TestServer) -> i64 {
    server.count("SELECT COUNT(*) AS n FROM capabilities")
}

fn port(server: &TestServer) -> &str {
    server.base.rsplit(':').next().unwrap()
}

async fn status_and_code(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (status, body["error"]["code"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sites_page_cannot_start_runs_or_register_capabilities_on_a_keyless_server() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let (runs_before, capabilities_before) = (runs(&server), capabilities(&server));
    let envelope = envelope().to_string();
    let registration = ai_capability("exfiltrate", &["brief"], &["post_copy"], json!({"type": "object"})).to_string();
    let post = |path: &str, content_type: &str, body: &str| {
        server.http.post(server.url(path)).header(CONTENT_TYPE, content_type).body(body.to_string())
    };

    // A form or text/plain post from another origin: no preflight, so the browser sends it.
    for (path, body) in [("/api/v1/flex/run.stream", &envelope), ("/api/v1/flex/capabilities/register", &registration)]
    {
        for content_type in ["text/plain", "application/x-www-form-urlencoded", "application/json"] {
            let sent = post(path, content_type, body).header(ORIGIN, "https://evil.example").send().await.unwrap();
            assert_eq!(status_and_code(sent).await, (403, "cross_site_request".into()), "{path} {content_type}");
        }
        let sent = post(path, "text/plain", body).header("sec-fetch-site", "cross-site").send().await.unwrap();
        assert_eq!(status_and_code(sent).await, (403, "cross_site_request".into()), "{path} by Sec-Fetch-Site");
        let sent = post(path, "application/json", body).header(ORIGIN, "null").send().await.unwrap();
        assert_eq!(status_and_code(sent).await.0, 403, "{path} from an opaque origin");
        // No Origin at all (an old browser, or a tool): still not JSON, so not read.
        let sent = post(path, "text/plain", body).send().await.unwrap();
        assert_eq!(status_and_code(sent).await, (415, "unsupported_media_type".into()), "{path} as text");
    }
    assert_eq!((runs(&server), capabilities(&server)), (runs_before, capabilities_before), "nothing was created");

    // The server's own pages (same origin) and tools (no Origin) go on working.
    let own = format!("http://127.0.0.1:{}", port(&server));
    let sent = post("/api/v1/flex/run.stream", "application/json", &envelope).header(ORIGIN, own).send().await.unwrap();
    assert_eq!(sent.status(), 200);
    let frames = read_frames(sent, usize::MAX).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let sent = post("/api/v1/flex/capabilities/register", "application/json; charset=utf-8", &registration);
    assert_eq!(sent.send().await.unwrap().status(), 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_host_name_reads_nothing_from_a_keyless_server() {
    let options = Options { env: vec![("FLEXRUN_ALLOWED_HOSTS", "flexrun.internal".into())], ..Options::default() };
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), options).await;
    let get = |path: &str, host: String| server.http.get(server.url(path)).header(HOST, host).send();
    let port = port(&server).to_string();
    for path in ["/ui/runs", "/api/v1/flex/runs", "/threads/search"] {
        let answered = get(path, format!("evil.example:{port}")).await.unwrap();
        assert_eq!(status_and_code(answered).await, (421, "host_not_allowed".into()), "{path}");
    }
    let posted = server
        .http
        .post(server.url("/api/v1/flex/run.stream"))
        .header(HOST, format!("evil.example:{port}"))
        .json(&envelope())
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 421);
    assert_eq!(runs(&server), 0);
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), "flexrun.internal".into(), "[::1]".into()] {
        assert_eq!(get("/api/v1/flex/runs", host.clone()).await.unwrap().status(), 200, "{host}");
    }
}

const ALICE: &str = "alice-key";
const BOB: &str = "bob-key";

async fn keyed() -> TestServer {
    let env = vec![
        ("FLEXRUN_API_KEYS", format!("alice:{ALICE},bob:{BOB}")),
        ("FLEXRUN_OPERATOR_KEYS", format!("ops:{OPERATOR_KEY}")),
    ];
    TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), Options { env, ..Options::default() }).await
}

async fn send(server: &TestServer, key: &str, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
    let sent = server.http.request(method, server.url(path)).bearer_auth(key).json(&body).send().await.unwrap();
    let status = sent.status().as_u16();
    let text = sent.text().await.unwrap();
    // A stream's first frame, or a JSON body.
    let body = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or(&text).to_string();
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threads_runs_are_its_owners_whichever_api_starts_them() {
    use reqwest::Method;
    let server = keyed().await;
    let (status, _) = send(&server, ALICE, Method::POST, "/threads", json!({"thread_id": "alices"})).await;
    assert_eq!(status, 200);
    let (status, _) = send(&server, ALICE, Method::POST, "/api/v1/flex/run.stream", envelope_on_thread("alices")).await;
    assert_eq!(status, 200);

    // Bob cannot put a run on alice's thread through the flex API, nor learn whose it is.
    let (status, body) =
        send(&server, BOB, Method::POST, "/api/v1/flex/run.stream", envelope_on_thread("alices")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("thread_not_found")));
    for if_exists in ["raise", "do_nothing"] {
        let body = json!({"thread_id": "alices", "if_exists": if_exists});
        let (status, body) = send(&server, BOB, Method::POST, "/threads", body).await;
        assert_eq!((status, body["error"]["code"].as_str()), (409, Some("thread_exists")), "{if_exists}");
    }
    let (status, body) = send(&server, ALICE, Method::POST, "/threads", json!({"thread_id": "alices"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("thread_exists")), "in use, whoever asks");
    let (status, body) =
        send(&server, ALICE, Method::POST, "/threads", json!({"thread_id": "alices", "if_exists": "do_nothing"})).await;
    assert_eq!((status, body["thread_id"].as_str()), (200, Some("alices")));
    assert!(body["values"]["runId"].is_string(), "the thread as it is, with its run's values: {body}");
    let on_alices = server.count("SELECT COUNT(*) AS n FROM runs WHERE thread_id = 'alices' AND owner = 'alice'");
    assert_eq!((on_alices, runs(&server)), (1, 1), "alice's thread holds her run only");

    // A thread id the flex API names first is made for its caller.
    let (status, _) = send(&server, BOB, Method::POST, "/api/v1/flex/run.stream", envelope_on_thread("bobs")).await;
    assert_eq!(status, 200);
    let (status, _) = send(&server, ALICE, Method::GET, "/threads/bobs", Value::Null).await;
    assert_eq!(status, 404, "bob's thread is his");
    let (status, _) = send(&server, BOB, Method::GET, "/threads/bobs", Value::Null).await;
    assert_eq!(status, 200);

    // An operator may start a run on alice's thread: it is alice's run.
    let (status, frame) =
        send(&server, OPERATOR_KEY, Method::POST, "/api/v1/flex/run.stream", envelope_on_thread("alices")).await;
    assert_eq!(status, 200);
    let run_id = frame["runId"].as_str().unwrap();
    server.wait_for_settled(run_id).await;
    let (status, _) = send(&server, ALICE, Method::GET, &format!("/api/v1/flex/runs/{run_id}"), Value::Null).await;
    assert_eq!(status, 200, "alice sees the run on her thread");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_ids_clients_cannot_address_are_refused() {
    use reqwest::Method;
    let server = keyed().await;
    for id in ["x?y=1", ".", "..", "a/b", "a b", "-x"] {
        let (status, body) =
            send(&server, ALICE, Method::POST, "/api/v1/flex/run.stream", envelope_on_thread(id)).await;
        assert_eq!(
            (status, body["error"]["details"][0]["path"].as_str()),
            (400, Some("/constraints/threadId")),
            "{id}"
        );
        let (status, body) = send(&server, ALICE, Method::POST, "/threads", json!({"thread_id": id})).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_thread_id")), "{id}");
    }
    assert_eq!(runs(&server), 0);
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM threads"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_out_of_range_and_unknown_fields_are_refused_not_clamped_or_dropped() {
    use reqwest::Method;
    let server = keyed().await;
    for path in [
        "/api/v1/flex/runs?limit=0",
        "/api/v1/flex/runs?limit=501",
        "/api/v1/flex/runs?cursor=not%20a%20run",
        "/api/v1/flex/tasks?limit=1001",
    ] {
        let (status, body) = send(&server, OPERATOR_KEY, Method::GET, path, Value::Null).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_query")), "{path}: {body}");
    }
    let (_, body) = send(&server, OPERATOR_KEY, Method::GET, "/api/v1/flex/runs?limit=501", Value::Null).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("from 1 to 500"), "{body}");
    let (_, thread) = send(&server, ALICE, Method::POST, "/threads", json!({})).await;
    let thread = thread["thread_id"].as_str().unwrap();
    for (path, body) in [
        ("/threads/search".to_string(), json!({"limit": 101})),
        ("/threads/search".to_string(), json!({"values": {"a": 1}})),
        ("/threads/search".to_string(), json!({"sort_by": "created_at"})),
        ("/threads".to_string(), json!({"ttl": 60})),
        (format!("/threads/{thread}/history"), json!({"limit": 0})),
        (format!("/threads/{thread}/history"), json!({"before": "x"})),
        (format!("/threads/{thread}/runs/stream"), json!({"assistant_id": "flex", "input": envelope(), "priority": 1})),
    ] {
        let (status, body) = send(&server, ALICE, Method::POST, &path, body.clone()).await;
        assert_eq!(status, 400, "{path} {body}");
    }
    assert_eq!(runs(&server), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_search_finds_every_match_of_its_metadata() {
    use reqwest::Method;
    let server = keyed().await;
    // More threads than a search once looked through (1,000), the one sought made first.
    let (status, _) =
        send(&server, ALICE, Method::POST, "/threads", json!({"metadata": {"team": "blue", "n": 0}})).await;
    assert_eq!(status, 200);
    let mut conn = server.db();
    let now = flexrun::store::now();
    for i in 0..1_100 {
        let row = flexrun::store::threads::ThreadRow {
            thread_id: format!("filler-{i}"),
            owner: Some("alice".into()),
            metadata: json!({"team": "red", "n": i}).to_string(),
            created_at: now,
            updated_at: now,
        };
        flexrun::store::threads::insert(&mut conn, &row).unwrap();
    }
    let search = |body: Value| send(&server, ALICE, Method::POST, "/threads/search", body);
    let (status, found) = search(json!({"metadata": {"team": "blue"}})).await;
    assert_eq!(status, 200);
    assert_eq!(found.as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found[0]["metadata"]["n"], 0);
    let (_, found) = search(json!({"metadata": {"team": "red", "n": 1_099}})).await;
    assert_eq!(found.as_array().map(Vec::len), Some(1));
    let (_, found) = search(json!({"metadata": {"team": "red"}, "limit": 100, "offset": 1_050})).await;
    assert_eq!(found.as_array().map(Vec::len), Some(50), "paged through all 1,100");
    // Skipped threads are counted, with a status filter too, and a page is the one after them.
    let page = |found: &Value| found.as_array().unwrap().iter().map(|t| t["metadata"]["n"].clone()).collect::<Vec<_>>();
    let (_, all) = search(json!({"limit": 100, "offset": 1_098})).await;
    let (_, idle) = search(json!({"limit": 100, "offset": 1_098, "status": "idle"})).await;
    assert_eq!((page(&all).len(), page(&all)), (page(&idle).len(), page(&idle)));
    assert_eq!(page(&all).len(), 3, "1,101 threads, 1,098 skipped");
    let (_, found) = search(json!({"metadata": {"team": "blue"}, "status": "idle"})).await;
    assert_eq!(found.as_array().map(Vec::len), Some(1));
    let (_, found) = send(&server, BOB, Method::POST, "/threads/search", json!({"metadata": {"team": "blue"}})).await;
    assert_eq!(found.as_array().map(Vec::len), Some(0), "bob finds none of alice's");
}

#[tokio::test]
async fn health_says_when_no_capability_is_registered() {
    let options = Options { capabilities: Vec::new(), ..Options::default() };
    let server = TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), options).await;
    let health: Value = server.http.get(server.url("/api/v1/health")).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["services"]["capabilities"]["count"], 0);
    assert!(health["warnings"][0].as_str().unwrap().contains("no capability is registered"), "{health}");
    let registered = ai_capability("writer", &["brief"], &["post_copy"], json!({"type": "object"}));
    let sent = server.http.post(server.url("/api/v1/flex/capabilities/register")).json(&registered).send().await;
    assert_eq!(sent.unwrap().status(), 201);
    let health: Value = server.http.get(server.url("/api/v1/health")).send().await.unwrap().json().await.unwrap();
    assert_eq!((health["services"]["capabilities"]["count"].as_u64(), health.get("warnings")), (Some(1), None));
}

/// Search filters with more keys or ids than a client sends are refused at once (400
/// `invalid_request`), before a query is built: 30,000 metadata keys overflowed the server's stack
/// (the process aborted), a thousand broke the database's limits (500), and so did 40,000 ids; an
/// offset of billions read every thread there is to skip them. At the bounds (64 keys, 1,000 ids,
/// an offset of 10,000) a search runs as any other; a history's filter is bounded alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_search_filters_past_their_bounds_are_refused() {
    use reqwest::Method;
    let server = keyed().await;
    let keys = |n: usize| Value::Object((0..n).map(|i| (format!("k{i}"), json!(i))).collect());
    let ids = |n: usize| json!((0..n).map(|i| format!("t-{i}")).collect::<Vec<_>>());
    let (status, _) =
        send(&server, ALICE, Method::POST, "/threads", json!({"thread_id": "t-7", "metadata": keys(64)})).await;
    assert_eq!(status, 200);
    let search = |body: Value| send(&server, ALICE, Method::POST, "/threads/search", body);
    for (body, what) in [
        (json!({"metadata": keys(30_000)}), "30,000 keys"),
        (json!({"metadata": keys(1_000)}), "1,000 keys"),
        (json!({"metadata": keys(65)}), "65 keys"),
        (json!({"ids": ids(40_000)}), "40,000 ids"),
        (json!({"ids": ids(1_001)}), "1,001 ids"),
        (json!({"offset": 4_000_000_000u32}), "an offset of 4 billion"),
        (json!({"offset": 10_001}), "an offset of 10,001"),
    ] {
        let (status, body) = search(body).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")), "{what}: {body}");
    }
    let (_, body) = search(json!({"metadata": keys(65)})).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("at most 64 keys"), "{body}");
    let (_, body) = search(json!({"ids": ids(1_001)})).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("at most 1000 threads"), "{body}");
    let (_, body) = search(json!({"offset": 10_001})).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("at most 10000"), "{body}");
    assert_eq!(search(json!({"offset": 10_000})).await, (200, json!([])), "at the bound");

    let (status, found) = search(json!({"metadata": keys(64)})).await;
    assert_eq!((status, found.as_array().map(Vec::len)), (200, Some(1)), "{found}");
    let (status, found) = search(json!({"ids": ids(1_000)})).await;
    assert_eq!((status, found[0]["thread_id"].as_str()), (200, Some("t-7")), "{found}");
    let history = |body: Value| send(&server, ALICE, Method::POST, "/threads/t-7/history", body);
    let (status, body) = history(json!({"metadata": keys(65)})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")), "{body}");
    assert_eq!(history(json!({"metadata": keys(64)})).await.0, 200);
    // A thread's own metadata is bounded as a filter is: it is indexed a row per key.
    let (status, body) =
        send(&server, ALICE, Method::POST, "/threads", json!({"thread_id": "t-8", "metadata": keys(65)})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")), "{body}");
    assert_eq!(send(&server, ALICE, Method::GET, "/threads/t-8", Value::Null).await.0, 404, "no thread was made");
}
