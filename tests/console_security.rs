//! The console's defences, over the real server and a real SQLite file: sessions capped per
//! principal (a caller signing in over and over cannot sign an operator out), sign-in attempts
//! limited (429 with `Retry-After`), a sign-in's `next` followed only to console pages, and the
//! headers every console page carries (the API's answers left as they were).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;

use futures::StreamExt;
use serde_json::Value;
use support::*;

const ALICE: &str = "alice-key";

/// A server with a caller key (alice) and an operator key (ops), and `config` (TOML) layered on
/// the defaults.
async fn server_with(config: &str) -> TestServer {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let path = dir.path().join("flexrun.toml");
    std::fs::write(&path, config).unwrap();
    let options = Options {
        env: vec![
            ("FLEXRUN_API_KEYS", format!("alice:{ALICE}")),
            ("FLEXRUN_OPERATOR_KEYS", format!("ops:{OPERATOR_KEY}")),
            ("FLEXRUN_CONFIG", path.display().to_string()),
        ],
        dir: Some(dir),
        ..Options::default()
    };
    TestServer::start_with(planner_then(&[("draft", "writer")], post(0.9)), options).await
}

/// A client that shows redirects instead of following them.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// `POST /ui/login` as the sign-in form sends it, from the server's own page.
async fn sign_in(http: &reqwest::Client, server: &TestServer, key: &str, next: &str) -> reqwest::Response {
    let form =
        url::form_urlencoded::Serializer::new(String::new()).append_pair("key", key).append_pair("next", next).finish();
    http.post(server.url("/ui/login"))
        .header("origin", &server.base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap()
}

/// The `Cookie` header that carries the session a sign-in answer set.
fn session_cookie(response: &reqwest::Response) -> String {
    let cookie = response.headers().get_all("set-cookie").iter().find_map(|value| {
        let pair = value.to_str().ok()?.split(';').next()?;
        pair.starts_with("flexrun_session=").then(|| pair.to_string())
    });
    cookie.unwrap_or_else(|| panic!("no session cookie: {:?}", response.headers()))
}

/// The status of the run list read with the session `cookie`.
async fn status_with(server: &TestServer, cookie: &str) -> u16 {
    let response = server.http.get(server.url("/api/v1/flex/runs")).header("cookie", cookie).send().await.unwrap();
    response.status().as_u16()
}

/// The finding: 10,050 sign-ins with a caller key ended the operator's session (the oldest of a
/// table of 10,000, whoever held it). Now each principal holds at most its cap, and only its own
/// oldest session goes. The limit on sign-in attempts is lifted here, so what this test shows is
/// the cap (the next test shows the limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_signing_in_ten_thousand_times_ends_only_its_own_oldest_sessions() {
    let server = server_with("[sessions]\nmax_per_principal = 16\nsign_in_attempts_per_minute = 1000000\n").await;
    let http = no_redirects();
    let signed_in = sign_in(&http, &server, OPERATOR_KEY, "/ui/runs").await;
    assert_eq!(signed_in.status(), 303);
    let operator = session_cookie(&signed_in);

    let alice_signs_in = || async {
        let response = sign_in(&http, &server, ALICE, "/ui/runs").await;
        assert_eq!(response.status(), 303);
        session_cookie(&response)
    };
    let started = std::time::Instant::now();
    let mut alice: Vec<String> = futures::stream::iter(0..10_033).map(|_| alice_signs_in()).buffered(8).collect().await;
    // The last ones one after another, so their order is the order the server saw.
    for _ in 0..17 {
        alice.push(alice_signs_in().await);
    }
    eprintln!("10,050 caller sign-ins in {:?}", started.elapsed());

    // The operator is still signed in, as the operator.
    assert_eq!(status_with(&server, &operator).await, 200, "the operator's session survived");
    let page = server.http.get(server.url("/ui/runs")).header("cookie", &operator).send().await.unwrap();
    assert!(page.text().await.unwrap().contains(r#"data-testid="principal">ops<"#));
    // Alice keeps her newest 16 sessions; her older ones ended.
    for cookie in &alice[alice.len() - 16..] {
        assert_eq!(status_with(&server, cookie).await, 200);
    }
    for cookie in [&alice[0], &alice[alice.len() - 17]] {
        assert_eq!(status_with(&server, cookie).await, 401, "an older session of alice's ended");
    }
}

/// Sign-in attempts, failed or not, are limited per client: past the limit the answer is 429 with
/// `Retry-After`, even for a valid key, and no session is opened. Keys on the API are not affected.
/// Sign-in forms are read before any key is checked, so anyone can send them slowly: they are
/// read through a pool of their own, and stalled sign-ins leave callers' uploads their permits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_sign_ins_do_not_take_the_uploads_permits() {
    use tokio::io::AsyncWriteExt;
    let server = server_with("[limits]\nmax_concurrent_body_reads = 2\n").await;
    let addr = server.base.trim_start_matches("http://").to_string();
    let mut stalled = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST /ui/login HTTP/1.1\r\nhost: {addr}\r\norigin: {}\r\n\
             content-type: application/x-www-form-urlencoded\r\ncontent-length: 1000\r\n\r\nk",
            server.base
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stalled.push(stream);
    }
    // The sign-ins' bodies are being read (their connections stay open, half sent).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let response = server
        .http
        .post(server.url("/api/v1/flex/run.stream"))
        .bearer_auth(ALICE)
        .json(&envelope())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "{:?}", response.text().await);
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_attempts_past_the_limit_are_answered_429_with_retry_after() {
    let server = server_with("[sessions]\nsign_in_attempts_per_minute = 5\n").await;
    let http = no_redirects();
    for attempt in 0..5 {
        let refused = sign_in(&http, &server, &format!("guess-{attempt}"), "/ui/runs").await;
        assert_eq!(refused.status(), 401, "attempt {attempt}");
    }
    let limited = sign_in(&http, &server, ALICE, "/ui/runs").await;
    assert_eq!(limited.status(), 429);
    let retry_after: u64 = limited.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=12).contains(&retry_after), "one attempt refills in 60 / 5 s: {retry_after}");
    assert!(limited.headers().get("set-cookie").is_none(), "no session opened");
    let page = limited.text().await.unwrap();
    assert!(page.contains(&format!("Too many sign-in attempts. Try again in {retry_after} s.")), "{page}");

    let api = server.http.get(server.url("/api/v1/flex/runs")).bearer_auth(ALICE).send().await.unwrap();
    assert_eq!(api.status(), 200, "the limit is on sign-ins, not on keys sent to the API");
}

/// A `next` that is not a console page of this server — a line break (which cannot go in a
/// header: it answered 500), another site, a backslash, too long — goes to the run list (303).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_with_a_bad_next_goes_to_the_run_list() {
    let server = server_with("[sessions]\nsign_in_attempts_per_minute = 100\n").await;
    let http = no_redirects();
    let long = format!("/ui/runs?q={}", "x".repeat(5_000));
    for next in [
        "/ui/runs\r\nSet-Cookie: planted=1",
        "/ui/runs\n",
        "/ui/runs\r",
        "https://evil.example/ui/runs",
        "//evil.example/ui/runs",
        "/\\evil.example/ui/runs",
        "/ui/\\evil.example",
        "javascript:alert(1)",
        long.as_str(),
    ] {
        let response = sign_in(&http, &server, ALICE, next).await;
        assert_eq!(response.status(), 303, "{next:?}");
        assert_eq!(response.headers()["location"], "/ui/runs", "{next:?}");
        assert!(response.headers().get_all("set-cookie").iter().all(|c| !c.to_str().unwrap().contains("planted")));
    }
    let kept = sign_in(&http, &server, ALICE, "/ui/inbox?x=1").await;
    assert_eq!((kept.status().as_u16(), kept.headers()["location"].to_str().unwrap()), (303, "/ui/inbox?x=1"));
    // The form carries a bad `next` as the run list.
    let form = http.get(server.url("/ui/login?next=/ui/runs%0D%0AX:%201")).send().await.unwrap();
    assert_eq!(form.status(), 200);
    assert!(form.text().await.unwrap().contains(r#"name="next" value="/ui/runs""#));

    // Without keys the sign-in page sends the browser straight on: to the run list.
    let open = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let response = http.get(open.url("/ui/login?next=/ui/runs%0D%0ASet-Cookie:%20planted=1")).send().await.unwrap();
    assert_eq!((response.status().as_u16(), response.headers()["location"].to_str().unwrap()), (303, "/ui/runs"));
}

/// The policy console pages are sent with.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                      connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Every console page says: only this server's script and style, no frames, no sniffing, no
/// referrer to other sites, no copy kept. The assets keep their own caching; the API's JSON is
/// answered as before, without the pages' headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_pages_carry_the_security_headers_and_the_api_answers_as_before() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let run_id = server.run(&envelope()).await[0].run_id.clone();
    let pages = [
        ("/ui/runs".to_string(), 200),
        (format!("/ui/runs/{run_id}"), 200),
        (format!("/ui/runs/{run_id}/events?before=5"), 200),
        ("/ui/inbox".into(), 200),
        ("/ui/new".into(), 200),
        (format!("/ui/new?from={run_id}"), 200),
        ("/ui/capabilities".into(), 200),
        ("/ui/runs/01a20000-0000-7000-8000-000000000000".into(), 404),
    ];
    for (path, status) in pages {
        let response = server.http.get(server.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), status, "{path}");
        let headers = response.headers();
        let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(header("content-type").as_deref(), Some("text/html; charset=utf-8"), "{path}");
        assert_eq!(header("content-security-policy").as_deref(), Some(POLICY), "{path}");
        assert_eq!(header("x-frame-options").as_deref(), Some("DENY"), "{path}");
        assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"), "{path}");
        assert_eq!(header("referrer-policy").as_deref(), Some("same-origin"), "{path}");
        assert_eq!(header("cache-control").as_deref(), Some("no-store"), "{path}");
    }
    let script = server.http.get(server.url("/ui/assets/console.js?v=1")).send().await.unwrap();
    assert_eq!(script.headers()["cache-control"], "public, max-age=3600", "assets may be cached");
    assert_eq!(script.headers()["x-content-type-options"], "nosniff");

    let api = server.http.get(server.url(&format!("/api/v1/flex/runs/{run_id}"))).send().await.unwrap();
    assert_eq!(api.status(), 200);
    assert_eq!(api.headers()["content-type"], "application/json");
    assert!(api.headers().get("content-security-policy").is_none(), "the pages' headers stay on the pages");
    let body: Value = api.json().await.unwrap();
    assert_eq!(body["run"]["runId"], run_id.as_str(), "{body}");
}
