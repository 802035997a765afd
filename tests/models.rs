//! Models as a routed pool: two stand-in model servers on loopback, the `[llm]` one (`default`)
//! and a `backup` endpoint; calls go along their route, fall over on rate limits and outages but
//! not on content errors, each fallback a `retry` frame naming both entries, and a circuit
//! breaker skips an endpoint that keeps failing until a probe finds it well again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use flexrun::llm::standin::{ChatCall, Script, StandIn};
use serde_json::{Value, json};
use support::*;

/// The backup endpoint: plans `draft` (writer) and answers every capability call with 0.9.
fn backup() -> StandIn {
    StandIn::start(script(|call: &ChatCall| if call.is_planner() { plan(&[("draft", "writer")]) } else { post(0.9) }))
        .unwrap()
}

/// A server whose `[llm]` model answers with `primary`, with `backup` as a second endpoint and
/// `routes` (TOML lines under `[llm.routes]`).
async fn pooled(primary: Script, backup: &StandIn, routes: &str) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flexrun.toml");
    let toml = format!(
        "[llm.endpoints.backup]\nbase_url = \"{}\"\nmodels = [\"backup-model\"]\nplanner_response_format = \"none\"\n\n\
         [llm.routes]\n{routes}\n\n\
         [llm.breaker]\nfailures = 2\ncool_down_secs = 1\n",
        backup.base_url
    );
    std::fs::write(&config, toml).unwrap();
    let options = Options { env: vec![("FLEXRUN_CONFIG", config.display().to_string())], ..Options::default() };
    (TestServer::start_with(primary, options).await, dir)
}

const BOTH: &str = "planner = [\"default/test-model\", \"backup/backup-model\"]\n\
                    capabilities = [\"default/test-model\", \"backup/backup-model\"]";

fn planner_calls(model: &StandIn) -> usize {
    model.calls().iter().filter(|c| c.is_planner()).count()
}

fn fallbacks(frames: &[flexrun::events::ReceivedFrame]) -> Vec<Value> {
    frames.iter().filter(|f| f.kind == "retry").map(|f| f.payload["fallback"].clone()).collect()
}

#[tokio::test]
async fn an_overloaded_endpoint_falls_over_to_the_next_and_the_frames_say_which_answered() {
    let backup = backup();
    let primary = script(|call| if call.is_planner() { Reply::error(503, "overloaded") } else { post(0.9) });
    let (server, _dir) = pooled(primary, &backup, BOTH).await;

    let frames = server.run(&envelope()).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));
    assert_eq!(fallbacks(&frames), [json!({"failed": "default/test-model", "next": "backup/backup-model"})]);
    let retry = frame_of(&frames, "retry");
    assert_eq!((retry.payload["scope"].as_str(), retry.payload["delayMs"].as_u64()), (Some("planner"), Some(0)));
    assert!(retry.payload["error"].as_str().unwrap().contains("503"), "{}", retry.payload);
    let generated = frame_of(&frames, "plan_generated");
    assert_eq!(generated.payload["usage"]["answeredBy"], json!(["backup/backup-model"]));
    assert_eq!(generated.payload["plan"]["metadata"]["plannerModel"], "backup-model");
    assert_eq!((planner_calls(&server.llm), planner_calls(&backup)), (1, 1));
    // Each endpoint is asked for its model, in its own answer format (the backup's: plain text).
    let asked = |model: &StandIn| model.calls().into_iter().find(ChatCall::is_planner).unwrap().body;
    let (first, second) = (asked(&server.llm), asked(&backup));
    assert_eq!(
        (first["model"].as_str(), first["response_format"]["type"].as_str()),
        (Some("test-model"), Some("json_schema"))
    );
    assert_eq!((second["model"].as_str(), second.get("response_format")), (Some("backup-model"), None));
    // The capability's route starts with the primary, which answers capability calls.
    let draft = frames.iter().find(|f| f.kind == "node_complete").unwrap();
    assert_eq!(draft.payload["usage"]["answeredBy"], json!(["default/test-model"]));

    // Which model answered each step: in the run document and the console's step panel.
    let run_id = &frames[0].run_id;
    let document = server.get_json(&format!("/api/v1/flex/runs/{run_id}")).await;
    assert_eq!(document["nodes"][0]["usage"]["answeredBy"], json!(["default/test-model"]));
    let page = server.http.get(server.url(&format!("/ui/runs/{run_id}"))).send().await.unwrap().text().await.unwrap();
    assert!(
        page.contains(r#"data-testid="node-answered-by">default/test-model (the responses named test-model)"#),
        "{page}"
    );
}

/// An endpoint that does not answer within its `timeout_secs`, or drops the connection, is fallen
/// over at once.
#[tokio::test]
async fn a_timeout_or_a_dropped_connection_falls_over() {
    let backup = backup();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    let slow = StandIn::start(script(move |_| match count.fetch_add(1, Ordering::SeqCst) {
        0 => plan(&[("draft", "writer")]).after(Duration::from_secs(5)),
        _ => Reply::reset(),
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flexrun.toml");
    let toml = format!(
        "[llm.endpoints.slow]\nbase_url = \"{}\"\ntimeout_secs = 1\n\n\
         [llm.endpoints.backup]\nbase_url = \"{}\"\n\n\
         [llm.routes]\nplanner = [\"slow/test-model\", \"backup/backup-model\"]\n",
        slow.base_url, backup.base_url
    );
    std::fs::write(&config, toml).unwrap();
    let options = Options { env: vec![("FLEXRUN_CONFIG", config.display().to_string())], ..Options::default() };
    let server = TestServer::start_with(script(|_| post(0.9)), options).await;
    let fell_over = [json!({"failed": "slow/test-model", "next": "backup/backup-model"})];
    for _ in 0..2 {
        let frames = server.run(&envelope()).await;
        assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));
        assert_eq!(fallbacks(&frames), fell_over);
    }
    assert_eq!((slow.calls().len(), planner_calls(&backup)), (2, 2));
}

/// Calls queued for an endpoint's slots when its breaker opens do not go to it: each is asked
/// again once it holds a slot, and falls over at once, instead of each waiting out the endpoint's
/// timeout in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_queued_for_a_dead_endpoint_fall_over_once_its_breaker_opens() {
    let backup = backup();
    let hanging = StandIn::start(script(|_| plan(&[("draft", "writer")]).after(Duration::from_secs(30)))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flexrun.toml");
    let toml = format!(
        "[llm.endpoints.hanging]\nbase_url = \"{}\"\ntimeout_secs = 1\nmax_concurrent_calls = 1\n\n\
         [llm.endpoints.backup]\nbase_url = \"{}\"\n\n\
         [llm.routes]\nplanner = [\"hanging/test-model\", \"backup/backup-model\"]\n\n\
         [llm.breaker]\nfailures = 1\ncool_down_secs = 60\n",
        hanging.base_url, backup.base_url
    );
    std::fs::write(&config, toml).unwrap();
    let options = Options { env: vec![("FLEXRUN_CONFIG", config.display().to_string())], ..Options::default() };
    let server = TestServer::start_with(script(|_| post(0.9)), options).await;
    let envelope = envelope();
    let runs = (0..3).map(|_| server.run(&envelope));
    for frames in futures::future::join_all(runs).await {
        assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{:?}", kinds(&frames));
    }
    assert_eq!((hanging.calls().len(), planner_calls(&backup)), (1, 3), "one call timed out; the queued two fell over");
}

/// A model whose planner calls get `replies` in turn (the last one from then on); other calls
/// are answered with a post.
fn planner_replies(replies: Vec<Reply>) -> Script {
    let count = AtomicUsize::new(0);
    script(move |call| {
        if !call.is_planner() {
            return post(0.9);
        }
        let n = count.fetch_add(1, Ordering::SeqCst).min(replies.len() - 1);
        replies[n].clone()
    })
}

#[tokio::test]
async fn rate_limits_fall_over_after_a_short_wait_or_at_once_and_a_bad_request_does_not() {
    let backup = backup();
    // The first planner call is rate-limited for 1 s, the second for a minute, the third is a 400.
    let primary = planner_replies(vec![
        Reply::error_retry_after(429, "slow down", "1"),
        Reply::error_retry_after(429, "come back later", "60"),
        Reply::error(400, "bad request"),
    ]);
    let (server, _dir) = pooled(primary, &backup, BOTH).await;
    let fell_over = [json!({"failed": "default/test-model", "next": "backup/backup-model"})];

    let started = std::time::Instant::now();
    let frames = server.run(&envelope()).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
    assert_eq!(fallbacks(&frames), fell_over);
    assert!(started.elapsed() >= Duration::from_secs(1), "the short Retry-After was honoured first");
    assert!(frame_of(&frames, "retry").payload["error"].as_str().unwrap().contains("429"));

    let frames = server.run(&envelope()).await;
    assert_eq!(fallbacks(&frames), fell_over, "a long Retry-After is not waited for");
    assert_eq!((planner_calls(&server.llm), planner_calls(&backup)), (2, 2));

    let frames = server.run(&envelope()).await;
    assert!(fallbacks(&frames).is_empty(), "a content error does not fall over");
    assert_eq!(planner_calls(&backup), 2);
    assert_eq!(frame_of(&frames, "complete").payload["status"], "failed");
}

/// A refusal that is the endpoint's own — its key refused (401, 403), the model not served there
/// (404) — is not the request's fault: another endpoint may answer, so the call falls over.
#[tokio::test]
async fn an_endpoint_refusing_the_key_or_not_serving_the_model_falls_over() {
    let backup = backup();
    let primary = planner_replies(vec![
        Reply::error(401, "invalid api key"),
        Reply::error(403, "forbidden"),
        Reply::error(404, "model not found"),
    ]);
    let (server, _dir) = pooled(primary, &backup, BOTH).await;
    for status in ["401", "403", "404"] {
        let frames = server.run(&envelope()).await;
        assert_eq!(frame_of(&frames, "complete").payload["status"], "completed", "{status}: {:?}", kinds(&frames));
        assert_eq!(fallbacks(&frames), [json!({"failed": "default/test-model", "next": "backup/backup-model"})]);
        assert!(frame_of(&frames, "retry").payload["error"].as_str().unwrap().contains(status));
    }
    assert_eq!(planner_calls(&backup), 3);
}

#[tokio::test]
async fn a_failing_endpoint_is_skipped_after_failures_in_a_row_then_probed_and_closed() {
    let backup = backup();
    let well = Arc::new(AtomicBool::new(false));
    let healthy = well.clone();
    let primary = script(move |call| match (call.is_planner(), healthy.load(Ordering::SeqCst)) {
        (_, false) => Reply::error(503, "down"),
        (true, true) => plan(&[("draft", "writer")]),
        (false, true) => post(0.9),
    });
    let (server, _dir) = pooled(primary, &backup, BOTH).await;
    let breaker = |health: &Value| {
        let endpoints = health["services"]["llm"]["endpoints"].as_array().unwrap();
        endpoints.iter().find(|e| e["name"] == "default").unwrap()["breaker"].as_str().unwrap().to_string()
    };

    // The planner's call and the draft's both fail on the primary: two in a row open it.
    let frames = server.run(&envelope()).await;
    assert_eq!(fallbacks(&frames).len(), 2, "{:?}", kinds(&frames));
    assert_eq!(breaker(&server.get_json("/api/v1/health").await), "open");
    let frames = server.run(&envelope()).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
    assert!(fallbacks(&frames).is_empty(), "the open endpoint is skipped, not tried");
    assert_eq!((server.llm.calls().len(), backup.calls().len()), (2, 4));

    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(breaker(&server.get_json("/api/v1/health").await), "half_open");
    well.store(true, Ordering::SeqCst);
    let frames = server.run(&envelope()).await;
    assert_eq!(frame_of(&frames, "plan_generated").payload["usage"]["answeredBy"], json!(["default/test-model"]));
    assert_eq!(breaker(&server.get_json("/api/v1/health").await), "closed");
    assert_eq!((server.llm.calls().len(), backup.calls().len()), (4, 4));
}

/// A probe whose call never ends — its run cancelled while the endpoint thinks — is no outcome:
/// the next call probes again, and a well endpoint closes its breaker; it is not skipped for good.
#[tokio::test]
async fn a_probe_cut_off_by_a_cancel_lets_the_next_call_probe() {
    let backup = backup();
    // 0: down; 1: well but slow to plan; 2: well.
    let state = Arc::new(AtomicUsize::new(0));
    let primary_state = state.clone();
    let primary = script(move |call| match (primary_state.load(Ordering::SeqCst), call.is_planner()) {
        (0, _) => Reply::error(503, "down"),
        (1, true) => plan(&[("draft", "writer")]).after(Duration::from_secs(600)),
        (_, true) => plan(&[("draft", "writer")]),
        (_, false) => post(0.9),
    });
    let (server, _dir) = pooled(primary, &backup, BOTH).await;
    let breaker = |health: &Value| {
        let endpoints = health["services"]["llm"]["endpoints"].as_array().unwrap();
        endpoints.iter().find(|e| e["name"] == "default").unwrap()["breaker"].as_str().unwrap().to_string()
    };
    server.run(&envelope()).await;
    assert_eq!(breaker(&server.get_json("/api/v1/health").await), "open");

    tokio::time::sleep(Duration::from_millis(1_100)).await;
    state.store(1, Ordering::SeqCst);
    let probed = server.llm.calls().len() + 1;
    let started = read_frames(server.post_run(&envelope()).await, 1).await;
    for _ in 0..200 {
        if server.llm.calls().len() == probed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(server.llm.calls().len(), probed, "the probe reached the primary, which holds it");
    let cancel = server.url(&format!("/api/v1/flex/runs/{}/cancel", started[0].run_id));
    let cancelled = server.http.post(cancel).bearer_auth(OPERATOR_KEY).send().await.unwrap();
    assert!(cancelled.status().is_success(), "{}", cancelled.status());

    state.store(2, Ordering::SeqCst);
    let frames = server.run(&envelope()).await;
    assert_eq!(frame_of(&frames, "plan_generated").payload["usage"]["answeredBy"], json!(["default/test-model"]));
    assert_eq!(breaker(&server.get_json("/api/v1/health").await), "closed");
}

#[tokio::test]
async fn the_planner_and_capabilities_follow_routes_of_their_own() {
    let backup = backup();
    let primary = script(|call| if call.is_planner() { plan(&[("draft", "writer")]) } else { post(0.2) });
    let routes = "planner = [\"default/test-model\"]\ncapabilities = [\"backup/backup-model\"]";
    let (server, _dir) = pooled(primary, &backup, routes).await;

    let frames = server.run(&envelope()).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
    assert_eq!(server.capability_calls("writer"), 0, "no capability call reached the planner's endpoint");
    assert_eq!(backup.calls().iter().filter(|c| c.capability_id() == Some("writer")).count(), 1);
    assert_eq!((planner_calls(&server.llm), planner_calls(&backup)), (1, 0));
}

#[test]
fn a_route_the_pool_cannot_serve_keeps_the_server_from_starting_naming_its_key() {
    let load = |toml: &str| {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("flexrun.toml");
        std::fs::write(&config, toml).unwrap();
        let path = config.display().to_string();
        let settings =
            flexrun::config::Settings::load_from(|name| (name == "FLEXRUN_CONFIG").then(|| path.clone())).unwrap();
        let prices = settings.prices().unwrap();
        flexrun::llm::pool::ModelPool::configure(&settings.llm, prices, |_| None).err().map(|e| e.to_string())
    };
    let refused = |toml: &str| load(toml).expect("refused");
    assert!(refused("[llm.routes]\nplanner = [\"nowhere/m\"]").contains("llm.routes.planner[0]"));
    assert!(refused("[llm.routes]\nplanner = [\"gpt-4o\"]").contains("not `<endpoint>/<model>`"));
    assert!(refused("[llm.routes]\ncapabilities = []").contains("llm.routes.capabilities` is empty"));
    let cycle = "[llm.endpoints.b]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
                 [llm.routes]\nplanner = [\"default/m\", \"b/x\", \"default/m\"]";
    let message = refused(cycle);
    assert!(message.contains("llm.routes.planner[2]") && message.contains("repeats `default/m`"), "{message}");
    let listed = "[llm.endpoints.b]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodels = [\"x\"]\n[llm.routes]\ncapabilities = [\"b/y\"]";
    assert!(refused(listed).contains("does not list"));
    let keyless = "[llm.endpoints.b]\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"FLEXRUN_TEST_NO_SUCH_KEY\"";
    let message = refused(keyless);
    assert!(
        message.contains("llm.endpoints.b.api_key_env") && message.contains("FLEXRUN_TEST_NO_SUCH_KEY"),
        "{message}"
    );
    assert!(refused("[llm.endpoints.b]\nbase_url = \"ftp://x\"").contains("llm.endpoints.b.base_url"));
    assert_eq!(
        load("[llm.endpoints.b]\nbase_url = \"http://127.0.0.1:9/v1\"\n[llm.routes]\nplanner = [\"b/any\"]"),
        None
    );
}

/// A run may choose its own chains among what the server serves (`policies.models`), and a
/// capability its own (`preferredModels`); an entry the server does not serve is refused with its
/// pointer, and nothing is created.
#[tokio::test]
async fn a_run_and_a_capability_choose_their_own_chains_among_what_the_server_serves() {
    let backup = backup();
    let primary = script(|call| if call.is_planner() { plan(&[("draft", "writer")]) } else { post(0.9) });
    let (server, _dir) = pooled(primary, &backup, BOTH).await;

    let mut own = envelope();
    own["policies"] = json!({"models": {"planner": ["backup/backup-model"]}});
    let frames = server.run(&own).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "completed");
    assert_eq!((planner_calls(&server.llm), planner_calls(&backup)), (0, 1), "the run's planner chain");
    assert_eq!(server.capability_calls("writer"), 1, "capabilities keep the server's route");

    let mut unknown = envelope();
    unknown["policies"] = json!({"models": {"capabilities": ["backup/backup-model", "elsewhere/x"]}});
    let response = server.post_run(&unknown).await;
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["details"][0]["path"], "/policies/models/capabilities/1", "{body}");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 1, "nothing was created");
    let mut repeated = envelope();
    repeated["policies"] =
        json!({"models": {"planner": ["default/test-model", "backup/backup-model", "default/test-model"]}});
    let response = server.post_run(&repeated).await;
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["details"][0]["path"], "/policies/models/planner/2", "{body}");
    assert_eq!(body["error"]["details"][0]["code"], "repeated_model", "{body}");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 1, "nothing was created");

    let mut writer = ai_capability("writer", &["brief"], &["post_copy"], json!({"type": "object"}));
    writer["preferredModels"] = json!(["backup/backup-model"]);
    let register = |registration: Value| {
        server
            .http
            .post(server.url("/api/v1/flex/capabilities/register"))
            .bearer_auth(OPERATOR_KEY)
            .json(&registration)
            .send()
    };
    assert_eq!(register(writer.clone()).await.unwrap().status().as_u16(), 201);
    server.run(&envelope()).await;
    assert_eq!(backup.calls().iter().filter(|c| c.capability_id() == Some("writer")).count(), 1);
    assert_eq!(server.capability_calls("writer"), 1, "the writer's own chain");

    writer["preferredModels"] = json!(["backup/other-model"]);
    let refused = register(writer).await.unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["details"][0]["path"], "/preferredModels/0", "{body}");
}

/// A capability registered from a file is not refused at start for its `preferredModels`: a chain
/// that repeats an entry goes along the route instead (with a warning), so a failing model is
/// not called twice for one attempt.
#[tokio::test]
async fn a_capability_files_chain_that_repeats_an_entry_is_not_followed() {
    let down =
        || script(|call| if call.is_planner() { plan(&[("draft", "writer")]) } else { Reply::error(503, "down") });
    let backup = StandIn::start(down()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flexrun.toml");
    let toml = format!(
        "[llm.endpoints.backup]\nbase_url = \"{}\"\nmodels = [\"backup-model\"]\n\n[llm.routes]\n{BOTH}\n",
        backup.base_url
    );
    std::fs::write(&config, toml).unwrap();
    let mut writer = ai_capability("writer", &["brief"], &["post_copy"], json!({"type": "object"}));
    writer["preferredModels"] = json!(["default/test-model", "backup/backup-model", "default/test-model"]);
    let env = vec![("FLEXRUN_CONFIG", config.display().to_string())];
    let server =
        TestServer::start_with(down(), Options { env, capabilities: vec![writer], ..Options::default() }).await;
    let mut envelope = envelope();
    envelope["policies"] = json!({"retry": {"maxRetries": 0}});
    let frames = server.run(&envelope).await;
    assert_eq!(frame_of(&frames, "complete").payload["status"], "failed", "{:?}", kinds(&frames));
    assert_eq!(server.capability_calls("writer"), 1, "the failing model once, not twice");
}

/// flexrun killed with SIGKILL while a call waits on the fallback endpoint: after the restart the
/// run plans again along its route and finishes, its one step run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_during_a_fallback_the_run_finishes_with_no_step_twice() {
    let hold = Arc::new(AtomicBool::new(true));
    let holding = hold.clone();
    let backup = StandIn::start(script(move |call| {
        let reply = if call.is_planner() { plan(&[("draft", "writer")]) } else { post(0.9) };
        if holding.load(Ordering::SeqCst) && call.is_planner() { reply.after(Duration::from_secs(600)) } else { reply }
    }))
    .unwrap();
    let primary =
        StandIn::start(script(|call| if call.is_planner() { Reply::error(503, "down") } else { post(0.9) })).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("models.toml");
    let toml = format!(
        "[llm.endpoints.backup]\nbase_url = \"{}\"\nmodels = [\"backup-model\"]\n\n[llm.routes]\n{BOTH}\n",
        backup.base_url
    );
    std::fs::write(&config, toml).unwrap();
    let path = config.display().to_string();
    let env = [("FLEXRUN_CONFIG", path.as_str())];
    let mut server = process::ServerProcess::start(dir.path(), &primary.base_url, &default_capabilities(), &env).await;
    let (run_id, _response) = server.post_run(&envelope()).await;
    for _ in 0..200 {
        if planner_calls(&backup) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(planner_calls(&backup), 1, "the call fell over to the backup, which holds it");
    server.kill();
    hold.store(false, Ordering::SeqCst);
    server.restart().await;

    let frames = server.reattach(&run_id, 0).await;
    let complete = frames.iter().find(|f| f.kind == "complete").expect("the run completes");
    assert_eq!(complete.payload["status"], "completed", "{:?}", kinds(&frames));
    let drafts = frames.iter().filter(|f| f.kind == "node_complete").count();
    let writer_calls =
        primary.calls().iter().chain(backup.calls().iter()).filter(|c| c.capability_id() == Some("writer")).count();
    assert_eq!((drafts, writer_calls), (1, 1), "the step ran once");
    assert_eq!(fallbacks(&frames), [json!({"failed": "default/test-model", "next": "backup/backup-model"})]);
}

/// `flexrun serve` with a route naming an endpoint it does not have, or an endpoint whose key
/// variable is not set, exits before listening, naming the key; the key's value is never printed.
#[tokio::test]
async fn serve_refuses_to_start_with_a_route_it_cannot_serve() {
    for (toml, key) in [
        ("[llm.routes]\nplanner = [\"nowhere/model\"]\n", "llm.routes.planner[0]"),
        (
            "[llm.endpoints.b]\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"FLEXRUN_TEST_UNSET_KEY\"\n",
            "llm.endpoints.b.api_key_env",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("flexrun.toml");
        std::fs::write(&config, toml).unwrap();
        let path = config.display().to_string();
        let env = [("FLEXRUN_CONFIG", path.as_str())];
        let (status, log) = process::ServerProcess::refused(dir.path(), "http://127.0.0.1:9/v1", &[], &env).await;
        assert!(!status.success(), "{log}");
        assert!(log.contains(key), "{key} named: {log}");
        assert!(!log.contains("test-key"), "no key's value: {log}");
    }
}
