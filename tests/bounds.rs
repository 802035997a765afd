//! Bounded answers: whatever a client, a model or a capability sends, what flexrun answers, streams
//! and logs about it stays a few KiB, and a line of its log stays one line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)]

mod support;

use serde_json::{Value, json};

use flexrun::llm::standin::{StandIn, script};
use support::process::ServerProcess;
use support::{Reply, TestServer, default_capabilities, envelope, kinds, plan};

/// Most an error response may weigh, whatever the request.
const RESPONSE_LIMIT: usize = 8 * 1024;
/// Most the log may grow by for one bad request.
const LOG_LIMIT: usize = 8 * 1024;

async fn post_json(server: &ServerProcess, path: &str, body: &Value) -> (u16, String) {
    let response = reqwest::Client::new().post(server.url(path)).json(body).send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// A stand-in model that would plan a draft if it were ever asked.
fn quiet_model() -> StandIn {
    StandIn::start(script(|_| plan(&[("draft", "writer")]))).unwrap()
}

#[tokio::test]
async fn a_megabyte_of_mistakes_gets_a_few_kib_of_answer_and_of_log() {
    let llm = quiet_model();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &llm.base_url, &default_capabilities(), &[]).await;

    // 40,000 goal conditions, each wrong twice over: just under the 1 MiB body limit.
    let mut bad = envelope();
    bad["goal_condition"] = Value::Array(vec![json!({"facet": 7, "path": ["x"]}); 40_000]);
    let before = server.log().len();
    let (status, body) = post_json(&server, "/api/v1/flex/run.stream", &bad).await;
    assert_eq!(status, 400, "{}", &body[..body.len().min(500)]);
    assert!(body.len() < RESPONSE_LIMIT, "a {} byte answer to a bad envelope", body.len());
    eprintln!("40,000 bad goal conditions: {} byte answer", body.len());
    let error: Value = serde_json::from_str(&body).unwrap();
    let details = error["error"]["details"].as_array().unwrap();
    assert_eq!(details.len(), 21, "the first 20 problems and a count of the rest");
    assert_eq!(details[20]["code"], "more_errors");
    assert!(details[20]["message"].as_str().unwrap().starts_with("and 1"), "{}", details[20]);

    // A condition of 100,000 characters the DSL cannot read.
    let mut bad_dsl = envelope();
    bad_dsl["goal_condition"] = json!([{"facet": "post_copy", "path": "/quality_score",
                                        "condition": {"dsl": "§".repeat(100_000)}}]);
    let (status, body) = post_json(&server, "/api/v1/flex/run.stream", &bad_dsl).await;
    assert_eq!(status, 400);
    assert!(body.len() < RESPONSE_LIMIT, "a {} byte answer to a bad condition", body.len());
    eprintln!("a 100,000 character condition: {} byte answer", body.len());
    let (status, body) =
        post_json(&server, "/api/v1/flex/conditions/compile", &json!({"dsl": "]".repeat(100_000)})).await;
    assert!(status == 400 || status == 422, "{status}");
    assert!(body.len() < RESPONSE_LIMIT, "a {} byte answer to a bad DSL", body.len());

    // An objective of nearly a megabyte, of the wrong type.
    let mut long = envelope();
    long["objective"] = json!(["x".repeat(1_000_000 - 200)]);
    let (status, body) = post_json(&server, "/api/v1/flex/run.stream", &long).await;
    assert_eq!(status, 400);
    assert!(body.len() < RESPONSE_LIMIT, "a {} byte answer to a bad objective", body.len());
    eprintln!("a 1 MB objective of the wrong type: {} byte answer", body.len());

    let logged = server.log().len() - before;
    eprintln!("four bad requests: {logged} bytes of log");
    assert!(
        logged < LOG_LIMIT,
        "four bad requests logged {logged} bytes: {}",
        server.log().lines().map(|l| l.chars().take(400).collect::<String>()).collect::<Vec<_>>().join("\n")
    );
    let runs = reqwest::get(server.url("/api/v1/flex/runs")).await.unwrap().json::<Value>().await.unwrap();
    assert_eq!(runs["runs"], json!([]), "no run was started by a bad request");
}

#[tokio::test]
async fn a_model_error_of_a_megabyte_is_an_excerpt_in_frames_and_log() {
    let huge = "the model is overloaded ".repeat(50_000);
    let llm = StandIn::start(script(move |call| {
        if call.is_planner() { plan(&[("draft", "writer")]) } else { Reply::error(400, huge.clone()) }
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &llm.base_url, &default_capabilities(), &[]).await;

    let before = server.log().len();
    let (run_id, response) = server.post_run(&envelope()).await;
    let frames = support::read_frames(response, usize::MAX).await;
    assert_eq!(kinds(&frames).last(), Some(&"complete"));
    let complete = &frames.last().unwrap().payload;
    assert_eq!(complete["status"], "failed");
    assert_eq!(complete["error"]["code"], "node_failed");
    let node_error = frames.iter().find(|f| f.kind == "node_error").expect("a node_error frame");
    assert!(node_error.payload["error"]["message"].as_str().unwrap().contains("the model is overloaded"));
    for frame in &frames {
        let size = frame.payload.to_string().len();
        assert!(size < RESPONSE_LIMIT, "a {} frame of {size} bytes", frame.kind);
    }
    let events = reqwest::get(server.url(&format!("/api/v1/flex/runs/{run_id}/events"))).await.unwrap();
    let page = events.text().await.unwrap();
    assert!(page.len() < frames.len() * RESPONSE_LIMIT, "an events page of {} bytes", page.len());
    let logged = server.log().len() - before;
    eprintln!("a run failed by a 1.2 MB model error: {} byte events page, {logged} bytes of log", page.len());
    assert!(logged < 4 * LOG_LIMIT, "a failed run logged {logged} bytes");
}

/// A capability's error text is outside text: written into the text log, its line breaks and
/// escape sequences are shown escaped, so it can neither forge a line of flexrun's own nor drive
/// the terminal that shows the log.
#[tokio::test]
async fn a_capability_error_cannot_forge_lines_of_the_text_log() {
    let forged =
        "bad input\n2030-01-01T00:00:00.000000Z  INFO flexrun::run: run completed run_id=forged\r\u{1b}[2J\u{9b}";
    let llm = StandIn::start(script(move |call| {
        if call.is_planner() { plan(&[("draft", "writer")]) } else { Reply::error(400, forged) }
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &llm.base_url, &default_capabilities(), &[]).await;
    let (_, response) = server.post_run(&envelope()).await;
    let frames = support::read_frames(response, usize::MAX).await;
    let node_error = frames.iter().find(|f| f.kind == "node_error").expect("a node_error frame");
    assert!(node_error.payload["error"]["message"].as_str().unwrap().contains(forged), "the frame keeps the text");

    // The coordinator logs the run's end just after committing it: wait for the line.
    let mut log = server.log();
    for _ in 0..100 {
        if log.contains("run ended without completing") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        log = server.log();
    }
    let shown =
        "bad input\\x0a2030-01-01T00:00:00.000000Z  INFO flexrun::run: run completed run_id=forged\\x0d\\x1b[2J\\u{9b}";
    assert!(log.contains(shown), "the error is logged, escaped: {log}");
    assert!(log.lines().all(|line| !line.starts_with("2030-01-01")), "a forged line: {log}");
    assert!(!log.contains(['\r', '\u{1b}', '\u{9b}']), "raw control characters: {log:?}");
}

#[tokio::test]
async fn a_model_answer_over_the_size_limit_fails_the_call_once_without_retrying() {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let config = dir.path().join("limits.toml");
    std::fs::write(&config, "[llm]\nmax_response_bytes = 100000\n").unwrap();
    let server = TestServer::start_with(
        script(
            |call| {
                if call.is_planner() { plan(&[("draft", "writer")]) } else { Reply::content("x".repeat(300_000)) }
            },
        ),
        support::Options {
            env: vec![("FLEXRUN_CONFIG", config.display().to_string())],
            dir: Some(dir),
            ..Default::default()
        },
    )
    .await;
    let frames = server.run(&envelope()).await;
    let complete = &frames.last().unwrap().payload;
    assert_eq!(complete["status"], "failed", "{complete}");
    let node_error = frames.iter().find(|f| f.kind == "node_error").expect("a node_error frame");
    assert_eq!(node_error.payload["error"]["message"], "model response is larger than 100000 bytes");
    let writer_calls = server.llm_calls().iter().filter(|c| c.capability_id() == Some("writer")).count();
    assert_eq!(writer_calls, 1, "a too large answer is not asked for again");
}

/// Opens a connection that sends the headers of a `length`-byte upload and `sent` bytes of it.
async fn stalled_upload(addr: &str, length: usize, sent: usize) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/v1/flex/run.stream HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b' '; sent]).await.unwrap();
    stream
}

/// The status line of the response on `stream`.
async fn status_line(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut buffer = vec![0u8; 4096];
    let read = stream.read(&mut buffer).await.unwrap();
    String::from_utf8_lossy(&buffer[..read]).lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn stalled_uploads_are_let_go_after_the_deadline_and_bounded_in_number() {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let config = dir.path().join("bodies.toml");
    std::fs::write(&config, "[limits]\nbody_read_timeout_secs = 1\nmax_concurrent_body_reads = 2\n").unwrap();
    let options = support::Options {
        env: vec![("FLEXRUN_CONFIG", config.display().to_string())],
        dir: Some(dir),
        ..Default::default()
    };
    let server =
        TestServer::start_with(support::planner_then(&[("draft", "writer")], support::post(0.9)), options).await;
    let addr = server.base.trim_start_matches("http://").to_string();

    let mut first = stalled_upload(&addr, 10_000, 100).await;
    let mut second = stalled_upload(&addr, 10_000, 100).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // A third body while two are being read is refused at once, and says when to try again.
    let refused = server.post_run(&envelope()).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_uploads");

    // The stalled two are answered 408 when their second is up, and give their places back.
    for stream in [&mut first, &mut second] {
        let line = tokio::time::timeout(std::time::Duration::from_secs(10), status_line(stream)).await.unwrap();
        assert!(line.starts_with("HTTP/1.1 408"), "{line}");
    }
    let frames = server.run(&envelope()).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let runs: i64 = server.count("SELECT COUNT(*) AS n FROM runs");
    assert_eq!(runs, 1, "no refused or stalled upload started a run");
}

#[tokio::test]
async fn memory_stays_bounded_under_hundreds_of_stalled_uploads() {
    const UPLOADS: usize = 300;
    let llm = quiet_model();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &llm.base_url, &default_capabilities(), &[]).await;
    let addr = server.base.trim_start_matches("http://").to_string();
    let before = server.resident_bytes();
    let mut uploads = Vec::with_capacity(UPLOADS);
    for _ in 0..UPLOADS {
        // Just under the 1 MiB limit announced, most of it sent, then nothing more.
        uploads.push(stalled_upload(&addr, 1_040_000, 1_000_000).await);
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let during = server.resident_bytes();
    let grown = during.saturating_sub(before) / (1024 * 1024);
    eprintln!("{UPLOADS} stalled uploads of 1 MB: resident memory {} → {} MiB", before >> 20, during >> 20);
    // 32 bodies being read (the default bound) are about 32 MiB, each refused connection costs its
    // read buffer; unbounded, the same uploads took about 500 MiB.
    assert!(grown < 200, "{UPLOADS} stalled uploads grew the server by {grown} MiB");
    let health = reqwest::get(server.url("/api/v1/health")).await.unwrap();
    assert_eq!(health.status(), 200, "the server still answers");
    drop(uploads);
}

#[tokio::test]
async fn a_megabyte_objective_is_refused_and_the_longest_makes_prompts_of_tens_of_kib() {
    let server = TestServer::start(support::planner_then(&[("draft", "writer")], support::post(0.9))).await;
    let mut body = envelope();
    body["objective"] = json!("o".repeat(1_000_000));
    let refused = server.post_run(&body).await;
    assert_eq!(refused.status().as_u16(), 400);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "invalid_envelope", "{refused}");
    let message = refused["error"]["details"][0]["message"].as_str().unwrap_or_default();
    assert_eq!(message, "must be at most 16384 characters long (it is 1000000)", "{refused}");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0, "nothing is stored");

    body["objective"] = json!("o".repeat(16_384));
    let frames = server.run(&body).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let calls = server.llm_calls();
    assert_eq!(calls.len(), 2, "one planner call, one capability call");
    for call in &calls {
        assert!(call.user.len() < 64 * 1024, "a prompt of {} bytes", call.user.len());
        assert!(call.user.contains("… (8384 more characters)"), "the cut is marked");
    }
}

#[tokio::test]
async fn a_draft_of_ten_thousand_nodes_is_rejected_without_a_single_node_run() {
    let nodes: Vec<Value> = (0..10_000).map(|i| json!({"stage": format!("s{i}"), "capabilityId": "writer"})).collect();
    let draft = Reply::json(json!({ "nodes": nodes }));
    let server =
        TestServer::start(script(move |call| if call.is_planner() { draft.clone() } else { support::post(0.9) })).await;
    let frames = server.run(&envelope()).await;
    let rejected: Vec<_> = frames.iter().filter(|f| f.kind == "plan_rejected").collect();
    assert_eq!(rejected.len(), 2, "both drafts of the round are rejected");
    let diagnostics = rejected[0].payload["diagnostics"].as_array().unwrap();
    assert_eq!(diagnostics.len(), 1);
    assert_eq!(diagnostics[0]["code"], "PLAN_TOO_LARGE");
    let complete = &frames.last().unwrap().payload;
    assert_eq!(
        (complete["status"].as_str(), complete["error"]["code"].as_str()),
        (Some("failed"), Some("plan_rejected"))
    );
    let calls = server.llm_calls();
    assert_eq!(calls.len(), 2, "two planner calls and no capability call");
    assert!(calls[1].user.contains("PLAN_TOO_LARGE"), "the second draft is told why the first was refused");
}

/// The `data-seq` of every frame an event list of `page` shows, and its earlier and later links.
fn listed_frames(page: &str) -> (Vec<u64>, Option<String>, Option<String>) {
    let seqs = page.split("<li data-seq=\"").skip(1).map(|s| s.split('"').next().unwrap().parse().unwrap()).collect();
    let link = |testid: &str| {
        let (before, _) = page.split_once(&format!("\" data-testid=\"{testid}\""))?;
        Some(before.rsplit_once("href=\"").unwrap().1.replace("&amp;", "&"))
    };
    (seqs, link("earlier"), link("later"))
}

/// The console reads a run's frames a page at a time, and a page holds at most
/// `limits.stream_page_bytes` of frame text (its first frame always): a run of large frames is
/// listed a few frames a page, every frame on exactly one page going back, and forward again.
#[tokio::test]
async fn the_consoles_event_pages_hold_a_page_of_frame_text_at_most() {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let config = dir.path().join("pages.toml");
    std::fs::write(&config, "[limits]\nstream_page_bytes = 50000\n").unwrap();
    let big = Reply::json(json!({"text": "x".repeat(30_000), "quality_score": 0.9}));
    let options = support::Options {
        env: vec![("FLEXRUN_CONFIG", config.display().to_string())],
        dir: Some(dir),
        ..Default::default()
    };
    let stages: &[(&str, &str)] = &[("draft", "writer"), ("again", "writer"), ("more", "writer")];
    let server = TestServer::start_with(support::planner_then(stages, big), options).await;
    let frames = server.run(&envelope()).await;
    let run_id = &frames[0].run_id;
    let server = &server;
    let get = move |path: String| async move {
        let response = server.http.get(server.url(&path)).bearer_auth(support::OPERATOR_KEY).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        response.text().await.unwrap()
    };

    // Back from the tail: no page reads more than one large frame beyond the first.
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut next = Some(format!("/ui/runs/{run_id}/events"));
    while let Some(path) = next {
        let (seqs, earlier, _) = listed_frames(&get(path).await);
        assert!(!seqs.is_empty() && seqs.len() < frames.len(), "a page of {} frames of {}", seqs.len(), frames.len());
        seen.splice(0..0, seqs);
        pages += 1;
        next = earlier;
    }
    let every: Vec<u64> = (1..=frames.len() as u64).collect();
    assert_eq!(seen, every, "each frame once, in order, over {pages} pages");
    assert!(pages >= 3, "{pages} pages");

    // Forward from the first page: the same frames again.
    let (mut seen, _, mut next) = listed_frames(&get(format!("/ui/runs/{run_id}/events?before=3")).await);
    while let Some(path) = next {
        let (seqs, earlier, later) = listed_frames(&get(path).await);
        assert_eq!(earlier, Some(format!("/ui/runs/{run_id}/events?before={}", seqs[0])));
        seen.extend(seqs);
        next = later;
    }
    assert_eq!(seen, every);

    // The run page lists the tail as a page does.
    let (seqs, earlier, _) = listed_frames(&get(format!("/ui/runs/{run_id}")).await);
    assert!(seqs.len() < frames.len() && earlier.is_some(), "{seqs:?}");
}
