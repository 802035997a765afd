//! The `flexrun` command line as people use it: the real binary, against a real server with a
//! stand-in model. What reaches the terminal, closed pipes, `resume` refusing a verdict that does
//! not fit, help, logging and configuration errors, and 405 for a known path with another method.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::process::ServerProcess;
use support::*;

/// The `flexrun` binary with none of the caller's flexrun settings.
fn flexrun(args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_flexrun"));
    for name in ["FLEXRUN_SERVER", "FLEXRUN_API_KEY", "FLEXRUN_LOG", "FLEXRUN_CONFIG", "NO_COLOR"] {
        command.env_remove(name);
    }
    command.args(args).stdin(Stdio::null()).kill_on_drop(true);
    command
}

/// Runs `flexrun args…` against `server` to the end.
async fn cli(server: &TestServer, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--server", &server.base]);
    tokio::time::timeout(Duration::from_secs(60), flexrun(&all).output()).await.expect("flexrun ends").unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Characters a terminal acts on instead of showing: C0 controls but newline and tab, DEL, C1.
fn controls(text: &str) -> Vec<char> {
    text.chars().filter(|c| matches!(u32::from(*c), 0x00..=0x08 | 0x0b..=0x1f | 0x7f..=0x9f)).collect()
}

fn write_envelope(dir: &Path, envelope: &Value) -> String {
    let path = dir.join("envelope.json");
    std::fs::write(&path, envelope.to_string()).unwrap();
    path.display().to_string()
}

fn with_plan_approval(mut envelope: Value) -> Value {
    envelope["policies"] = json!({"approval": {"plan": "required"}});
    envelope
}

/// A screen-clearing, title-setting, colouring text (C0 and C1 escape sequences, a bell, DEL).
const HOSTILE: &str = "\u{1b}[2J\u{1b}[H\u{1b}]0;owned\u{7} \u{9b}31mred\u{7f}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_from_the_server_is_escaped_on_the_terminal() {
    let output = Reply::json(json!({"text": format!("post {HOSTILE}"), "quality_score": 0.9}));
    let server = TestServer::start(planner_then(&[("draft", "writer")], output)).await;
    let mut hostile = envelope();
    hostile["objective"] = json!(format!("Write a post {HOSTILE}"));
    let envelope_file = write_envelope(server.dir.path(), &hostile);

    let progress = cli(&server, &["run", &envelope_file]).await;
    assert!(progress.status.success(), "{progress:?}");
    let shown = text(&progress.stdout);
    assert_eq!(controls(&shown), Vec::<char>::new(), "{shown}");
    // The output is JSON, where C0 controls are escapes already; DEL and C1 are not.
    assert!(shown.contains("\\u001b[2J\\u001b[H\\u001b]0;owned\\u0007 \\u{9b}31mred\\x7f"), "{shown}");
    let run_id = shown.lines().next().unwrap().strip_prefix("▶ run ").unwrap().to_string();

    let list = cli(&server, &["runs", "list"]).await;
    let shown = text(&list.stdout);
    assert!(list.status.success() && shown.contains(&run_id), "{list:?}");
    assert_eq!(controls(&shown), Vec::<char>::new(), "{shown}");
    assert!(shown.contains("Write a post \\x1b[2J"), "{shown}");

    let show = cli(&server, &["runs", "show", &run_id]).await;
    let shown = text(&show.stdout);
    assert!(show.status.success(), "{show:?}");
    assert_eq!(controls(&shown), Vec::<char>::new(), "{shown}");
    assert!(shown.contains("  objective: Write a post \\x1b[2J"), "{shown}");

    // JSON output is the same JSON value, with the control characters JSON lets through raw
    // (DEL, C1) written as escapes.
    for args in [vec!["runs", "show", &run_id, "--json"], vec!["runs", "list", "--json"]] {
        let json_output = cli(&server, &args).await;
        let shown = text(&json_output.stdout);
        assert_eq!(controls(&shown), Vec::<char>::new(), "{shown}");
        assert_eq!(shown.lines().count(), 1, "{shown}");
        let value: Value = serde_json::from_str(&shown).unwrap();
        let objective = if args[1] == "show" { &value["run"]["objective"] } else { &value["runs"][0]["objective"] };
        assert_eq!(objective, &json!(format!("Write a post {HOSTILE}")));
    }
    let frames = cli(&server, &["run", &envelope_file, "--json"]).await;
    let shown = text(&frames.stdout);
    assert!(frames.status.success(), "{frames:?}");
    assert_eq!(controls(&shown), Vec::<char>::new(), "{shown}");
    let frames: Vec<Value> = shown.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let logged = server.event_log(frames[0]["runId"].as_str().unwrap());
    assert_eq!(frames, logged.into_iter().map(|(_, _, frame)| frame).collect::<Vec<_>>());
    assert!(shown.contains("\\u009b31mred\\u007f"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_the_command_quietly() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    server.run(&envelope()).await;
    let envelope_file = write_envelope(server.dir.path(), &envelope());
    for args in [
        vec!["runs", "list"],
        vec!["runs", "list", "--json"],
        vec!["run", &envelope_file, "--json"],
        vec!["run", &envelope_file],
    ] {
        let mut all = args.clone();
        all.extend(["--server", &server.base]);
        let mut child = flexrun(&all).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        // The reader goes away before anything is written (`| head -0`, or a pager quit early).
        drop(child.stdout.take());
        let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(141), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_refuses_an_answer_to_an_approval() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let paused = server.run(&with_plan_approval(envelope())).await;
    let run_id = paused[0].run_id.clone();
    server.wait_for_status(&run_id, "awaiting_hitl").await;
    let waiting = cli(&server, &["runs", "list", "--status", "awaiting_hitl"]).await;
    assert!(text(&waiting.stdout).contains(&run_id), "{waiting:?}");
    let completed = cli(&server, &["runs", "list", "--status", "completed"]).await;
    assert!(completed.status.success() && completed.stdout.is_empty(), "{completed:?}");

    let answered = cli(&server, &["resume", &run_id, "--answer", "EU only"]).await;
    let stderr = text(&answered.stderr);
    assert_eq!(answered.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("run {run_id} waits for an approval (of its plan")), "{stderr}");
    assert!(stderr.contains("not an answer: use --approve, or --reject [--feedback \"…\"]"), "{stderr}");
    // Nothing was sent: the plan is neither approved nor run.
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions"), 0);
    assert_eq!(server.capability_calls("writer"), 0);
    assert_eq!(flexrun::store::runs::get(&mut server.db(), &run_id).unwrap().status.as_str(), "awaiting_hitl");

    let approved = cli(&server, &["resume", &run_id, "--approve", "--operator", "op-7"]).await;
    assert!(approved.status.success(), "{approved:?}");
    assert!(text(&approved.stdout).contains("✔ completed"), "{approved:?}");
}

/// A run that reached its budget is raised from the command line with new limits; an approval
/// without them is refused here, naming the flags, and sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reached_budget_is_raised_with_new_limits() {
    let server = TestServer::start(planner_then(&[("draft", "writer"), ("polish", "editor")], post(0.9))).await;
    let mut budgeted = envelope();
    budgeted["policies"] = json!({"budget": {"maxModelCalls": 2}});
    let run_id = server.run(&budgeted).await[0].run_id.clone();
    server.wait_for_status(&run_id, "awaiting_hitl").await;

    let approved = cli(&server, &["resume", &run_id, "--approve"]).await;
    let stderr = text(&approved.stderr);
    assert_eq!(approved.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--max-cost-usd, --max-tokens, --max-model-calls"), "{stderr}");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions"), 0, "nothing was sent");

    let raised = cli(&server, &["resume", &run_id, "--approve", "--max-model-calls", "4"]).await;
    assert!(raised.status.success(), "{raised:?}");
    assert!(text(&raised.stdout).contains("✔ completed"), "{raised:?}");
    assert_eq!(server.capability_calls("editor"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_shown_escaped_and_wants_an_answer() {
    let server = TestServer::start(script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]);
        }
        if call.user.contains("### CLARIFICATIONS") {
            return post(0.9);
        }
        Reply::json(json!({"signal": "CLARIFY", "question": format!("Formal or casual?\nReply {HOSTILE}")}))
    }))
    .await;
    let envelope_file = write_envelope(server.dir.path(), &envelope());
    let paused = cli(&server, &["run", &envelope_file]).await;
    let shown = text(&paused.stdout);
    assert!(paused.status.success(), "{paused:?}");
    assert_eq!(controls(&shown), Vec::<char>::new(), "{shown}");
    // In the progress display a question stays on its line.
    assert!(
        shown.contains("Formal or casual?\\x0aReply \\x1b[2J\\x1b[H\\x1b]0;owned\\x07 \\u{9b}31mred\\x7f"),
        "{shown}"
    );
    let run_id = shown.lines().next().unwrap().strip_prefix("▶ run ").unwrap().to_string();

    // `runs show` prints the pending question as a block under its request.
    let show = cli(&server, &["runs", "show", &run_id]).await;
    let shown = text(&show.stdout);
    assert_eq!(controls(&shown), Vec::<char>::new(), "{shown}");
    assert!(shown.contains("\n    Formal or casual?\n    Reply \\x1b[2J"), "{shown}");

    let approved = cli(&server, &["resume", &run_id, "--approve"]).await;
    let stderr = text(&approved.stderr);
    assert_eq!(approved.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("waits for an answer to a node's question"), "{stderr}");
    assert!(stderr.contains("not an approval: use --answer"), "{stderr}");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions"), 0);

    let answered = cli(&server, &["resume", &run_id, "--answer", "casual"]).await;
    assert!(answered.status.success(), "{answered:?}");
    let shown = text(&answered.stdout);
    assert!(shown.contains("answered: casual") && shown.contains("✔ completed"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_lists_the_run_statuses() {
    let help = flexrun(&["runs", "list", "--help"]).output().await.unwrap();
    let shown = text(&help.stdout);
    assert!(help.status.success(), "{help:?}");
    let statuses = flexrun::run::RunStatus::ALL.map(|s| s.as_str()).join(", ");
    assert!(shown.contains(&format!("[possible values: {statuses}]")), "{shown}");
    // The variable is named, not its value (a URL may hold credentials; unset it read as set empty).
    assert!(shown.contains("[env: FLEXRUN_SERVER]") && shown.contains("[env: FLEXRUN_API_KEY]"), "{shown}");
    let wrong = flexrun(&["runs", "list", "--status", "paused"]).output().await.unwrap();
    assert_eq!(wrong.status.code(), Some(2));
    assert!(text(&wrong.stderr).contains("invalid value 'paused' for '--status <STATUS>'"), "{wrong:?}");
}

/// A run id is checked as the server checks one before it goes into a URL's path: `../runs` was
/// sent as `GET /api/v1/flex/runs` (and its answer misread), `<id>/../<id>` reached the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_id_that_is_no_run_id_is_refused_before_anything_is_sent() {
    let cases: [&[&str]; 5] = [
        &["runs", "show", "../runs"],
        &["runs", "show", "0190b2d4-0000-7000-8000-000000000000/events"],
        &["cancel", "a/../b"],
        &["replan", "é"],
        &["resume", "x y", "--approve"],
    ];
    for args in cases {
        // Nothing listens at the address: a request sent would fail otherwise.
        let mut all = args.to_vec();
        all.extend(["--server", "http://127.0.0.1:9"]);
        let out = flexrun(&all).output().await.unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("not a run id: a run id is 1 to"), "{args:?}: {stderr}");
    }
}

/// A server address reqwest will not send to fails the command at once: it is not posted again
/// as an unreachable server is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_address_that_cannot_be_used_is_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let envelope = write_envelope(dir.path(), &envelope());
    let command = flexrun(&["run", "--server", "ftp://127.0.0.1:9", &envelope]).env("FLEXRUN_LOG", "warn").output();
    let out = tokio::time::timeout(Duration::from_secs(60), command).await.expect("flexrun ends").unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr.contains("cannot send to flexrun at ftp://127.0.0.1:9"), "{stderr}");
    assert!(!stderr.contains("posting again"), "not retried: {stderr}");
}

/// `dsl compile` without capability files says where a capability's facets come from, when the
/// expression names a variable it does not know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsl_compile_says_where_facets_come_from() {
    let expression = "facets.post_copy.quality_score >= 0.8";
    let without =
        flexrun(&["dsl", "compile", expression]).env_remove("FLEXRUN_CAPABILITIES_DIR").output().await.unwrap();
    assert_eq!(without.status.code(), Some(2), "{without:?}");
    assert!(text(&without.stderr).contains("set FLEXRUN_CAPABILITIES_DIR"), "{without:?}");
    let capabilities = concat!(env!("CARGO_MANIFEST_DIR"), "/config/capabilities");
    let with =
        flexrun(&["dsl", "compile", expression]).env("FLEXRUN_CAPABILITIES_DIR", capabilities).output().await.unwrap();
    assert!(with.status.success(), "{with:?}");
    let compiled: Value = serde_json::from_slice(&with.stdout).unwrap();
    assert_eq!(compiled["canonicalDsl"], expression, "{compiled}");
}

/// Runs `flexrun serve` with `env` until it exits (it must, within 20 s).
async fn serve_must_exit(dir: &Path, env: &[(&str, &str)]) -> Output {
    let mut command = flexrun(&["serve"]);
    command
        .env("FLEXRUN_DATABASE_URL", support::database::url(dir))
        .env("FLEXRUN_BIND", "127.0.0.1:0")
        .envs(env.iter().copied());
    tokio::time::timeout(Duration::from_secs(20), command.output())
        .await
        .expect("flexrun serve should have exited")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_log_filter_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = serve_must_exit(dir.path(), &[("FLEXRUN_LOG", "flexrun=loud")]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("flexrun: FLEXRUN_LOG=\"flexrun=loud\" is not a valid log filter"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!support::database::has_schema(dir.path()), "nothing started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_written_to_a_file_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    // An empty NO_COLOR does not turn colours off: only the log not being a terminal does.
    let server = ServerProcess::start(dir.path(), "http://127.0.0.1:9/v1", &[], &[("NO_COLOR", "")]).await;
    let log = server.log();
    assert!(log.contains("flexrun listening"), "{log}");
    assert!(!log.contains('\u{1b}'), "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_configuration_is_one_message() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flexrun.toml");
    std::fs::write(&config, "bnd = \"127.0.0.1:9000\"\n").unwrap();
    let output = serve_must_exit(dir.path(), &[("FLEXRUN_CONFIG", config.to_str().unwrap())]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("flexrun: configuration: unknown field `bnd`, expected one of `bind`"), "{stderr}");
    assert_eq!(stderr.matches("unknown field").count(), 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_url_that_is_no_url_stops_serve_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = serve_must_exit(dir.path(), &[("FLEXRUN_LLM_BASE_URL", "localhost:8000/v1")]).await;
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "flexrun: configuration: `llm.base_url` = \"localhost:8000/v1\" is not an http(s) URL (e.g. https://api.openai.com/v1)"
    );
}

/// A database that cannot be opened at start stops `serve` with the reason its backend gave — a
/// SQLite file in a directory that does not exist, a PostgreSQL server nobody listens for — not
/// with the connection type's generic "Invalid connection url".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_cannot_be_opened_stops_serve_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let missing = format!("sqlite://{}", dir.path().join("missing/flexrun.db").display());
    let mut cases = vec![(missing, "unable to open database file")];
    if cfg!(feature = "postgres") {
        let port = support::process::free_port();
        cases.push((format!("postgres://flexrun@127.0.0.1:{port}/flexrun"), "Connection refused"));
    }
    for (url, reason) in cases {
        let output = serve_must_exit(dir.path(), &[("FLEXRUN_DATABASE_URL", &url)]).await;
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{url}: {stderr}");
        assert!(stderr.starts_with("flexrun: database connection: "), "{url}: {stderr}");
        assert!(stderr.contains(reason), "{url}: the backend's reason, {reason:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_path_with_another_method_is_405() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let run_id = server.run(&envelope()).await[0].run_id.clone();
    let cases = [
        (reqwest::Method::DELETE, format!("/api/v1/flex/runs/{run_id}"), "GET, HEAD"),
        (reqwest::Method::GET, "/api/v1/flex/run.stream".to_string(), "POST"),
        (reqwest::Method::PUT, format!("/api/v1/flex/runs/{run_id}/cancel"), "POST"),
        (reqwest::Method::POST, "/api/v1/health".to_string(), "GET, HEAD"),
    ];
    for (method, path, allow) in cases {
        let response = server.http.request(method.clone(), server.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), 405, "{method} {path}");
        assert_eq!(response.headers()["allow"], allow, "{method} {path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
        assert_eq!(body["error"]["details"], json!([]), "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(allow), "{body}");
    }
    for path in ["/api/v1/flex/nope", "/api/v1/flex/runs/x/y/z", "/nope"] {
        let response = server.http.delete(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "not_found", "{body}");
    }
}

/// `HEAD` is answered wherever `GET` is, as the `GET` would be without its body: the same status
/// and headers (a JSON answer's `Content-Length` too), the API's, the console's and a 404 alike;
/// a path whose endpoints take no `GET` answers 405 naming `HEAD`. A `HEAD` of an endpoint that
/// streams (a running run's frames, the console's feed, which never ends) is answered at once
/// and leaves the connection free for the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_is_answered_as_get_without_a_body() {
    let server = TestServer::start(script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]);
        }
        post(0.9).after(Duration::from_secs(20))
    }))
    .await;
    let head = |path: String| {
        let server = &server;
        async move { server.http.head(server.url(&path)).bearer_auth(OPERATOR_KEY).send().await.unwrap() }
    };
    let get = server.http.get(server.url("/api/v1/openapi.json")).send().await.unwrap();
    let (get_type, get_body) = (get.headers()["content-type"].clone(), get.bytes().await.unwrap());
    let response = head("/api/v1/openapi.json".into()).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], get_type);
    assert_eq!(response.headers()["content-length"], get_body.len().to_string().as_str(), "as the GET's");
    assert!(response.bytes().await.unwrap().is_empty());
    assert_eq!(head("/api/v1/health".into()).await.status(), 200);

    let missing = head("/api/v1/flex/runs/01a20000-0000-7000-8000-000000000000".into()).await;
    assert_eq!((missing.status().as_u16(), &missing.headers()["content-type"]), (404, &get_type));
    let page = head("/ui/runs".into()).await;
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    assert!(page.headers().contains_key("content-security-policy"), "the console's headers");
    let refused = head("/api/v1/flex/runs/01a20000-0000-7000-8000-000000000000/cancel".into()).await;
    assert_eq!(refused.status(), 405);
    assert_eq!(refused.headers()["allow"], "POST");

    // A running run's frames and the console's feed: on one HTTP/1.1 connection, both answered
    // with their headers and nothing else, then the request after them.
    let run_id = read_frames(server.post_run(&envelope()).await, 1).await[0].run_id.clone();
    let host = server.base.trim_start_matches("http://");
    let mut connection = tokio::net::TcpStream::connect(host).await.unwrap();
    let requests = format!(
        "HEAD /api/v1/flex/runs/{run_id}/stream HTTP/1.1\r\nHost: {host}\r\n\r\n\
         HEAD /ui/feed?list=1 HTTP/1.1\r\nHost: {host}\r\n\r\n\
         GET /api/v1/health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut connection, requests.as_bytes()).await.unwrap();
    let mut answers = Vec::new();
    let read = tokio::io::AsyncReadExt::read_to_end(&mut connection, &mut answers);
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("answered at once, not streamed").unwrap();
    let answers = String::from_utf8(answers).unwrap();
    let heads: Vec<&str> = answers.split("HTTP/1.1 ").skip(1).collect();
    assert_eq!(heads.len(), 3, "{answers}");
    for streamed in &heads[..2] {
        assert!(streamed.starts_with("200 OK\r\n"), "{answers}");
        assert!(streamed.contains("content-type: text/event-stream"), "{answers}");
        assert!(streamed.ends_with("\r\n\r\n"), "headers only: {answers}");
    }
    assert!(heads[2].starts_with("200 OK\r\n") && heads[2].contains(r#""status""#), "{answers}");
}

/// `flexrun demo --serve` keeps its server up after the demo's run — a chat through its LangGraph
/// surface (what Agent Chat UI sends) completes against the demo's stand-in model — and stops on
/// SIGTERM (as a service manager or a container stops it) as it does on Ctrl-C.
#[tokio::test]
async fn the_demo_server_answers_a_chat_and_stops_on_sigterm() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bind = format!("127.0.0.1:{port}");
    let mut demo = flexrun(&["demo", "--serve", "--bind", &bind]).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    let waiting = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("stay up until") {
                return true;
            }
        }
        false
    };
    let up = tokio::time::timeout(Duration::from_secs(60), waiting).await.expect("the demo ran");
    assert!(up, "the demo ran and keeps its server up");
    let health = format!("http://{bind}/api/v1/health");
    assert!(reqwest::get(&health).await.unwrap().status().is_success());
    let chat = json!({"assistant_id": "flex", "input": {"messages": [{"role": "user", "content": "Hello flexrun"}]}});
    let answered = reqwest::Client::new().post(format!("http://{bind}/runs/wait")).json(&chat).send().await.unwrap();
    assert_eq!(answered.status(), 200);
    let values: Value = answered.json().await.unwrap();
    assert_eq!(values["status"], "completed", "{values}");
    let reply = values["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(reply["type"], "ai");
    let content = reply["content"].as_str().unwrap();
    assert!(
        content.starts_with("This is flexrun's demo stand-in model") && content.contains("Hello flexrun"),
        "{content}"
    );
    // A second turn on a thread, its message in content parts (as Agent Chat UI sends it): the
    // answer quotes it, not the thread's earlier answer.
    let answer = |text: &'static str| {
        let turn = json!({"assistant_id": "flex", "if_not_exists": "create",
                          "input": {"messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}});
        let url = format!("http://{bind}/threads/demo-chat/runs/wait");
        async move {
            let values: Value =
                reqwest::Client::new().post(url).json(&turn).send().await.unwrap().json().await.unwrap();
            values["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_string()
        }
    };
    assert!(answer("First turn").await.contains("(\"First turn\")"));
    let second = answer("Second turn").await;
    assert!(second.contains("(\"Second turn\")"), "{second}");
    let pid = demo.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = tokio::time::timeout(Duration::from_secs(20), demo.wait()).await.expect("it stops").unwrap();
    assert!(status.success(), "{status}");
    assert!(reqwest::get(&health).await.is_err(), "nothing listens any more");
}
