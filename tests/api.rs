//! Boundary behaviour over real HTTP: envelope validation, capability registration and the `http`
//! executor, authentication, request limits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::*;

fn always_plan(stages: &'static [(&'static str, &'static str)]) -> flexrun::llm::standin::Script {
    planner_then(stages, post(0.9))
}

async fn error_body(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON error body"))
}

fn detail_paths(body: &Value) -> Vec<String> {
    body["error"]["details"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_envelopes_get_400_with_every_problem_and_create_nothing() {
    let server = TestServer::start(always_plan(&[("draft", "writer")])).await;
    let mut missing_objective = envelope();
    missing_objective.as_object_mut().unwrap().remove("objective");
    let mut unknown_key = envelope();
    unknown_key["goalConditions"] = unknown_key["goal_condition"].take();
    unknown_key.as_object_mut().unwrap().remove("goal_condition");
    let mut bad_contract = envelope();
    bad_contract["outputContract"] = json!({"mode": "facets", "facets": []});
    let mut bad_pointer = envelope();
    bad_pointer["goal_condition"][0]["path"] = json!("quality_score");
    let mut bad_rule = envelope();
    bad_rule["goal_condition"][0]["condition"] = json!({"jsonLogic": {">==": [1, 2]}});

    let mut unknown_facet = envelope();
    unknown_facet["goal_condition"][0]["facet"] = json!("post_kopy");

    let cases: [(&str, Value, &str, &str); 6] = [
        ("missing objective", missing_objective, "/objective", "required"),
        ("unknown key", unknown_key, "/goalConditions", "unknown_field"),
        ("bad outputContract", bad_contract, "/outputContract/facets", "minItems"),
        ("bad pointer", bad_pointer, "/goal_condition/0/path", "invalid_pointer"),
        ("bad JSON-Logic", bad_rule, "/goal_condition/0/condition/jsonLogic", "invalid_json_logic"),
        ("a facet nothing provides", unknown_facet, "/goal_condition/0/facet", "undeclared_facet"),
    ];
    for (name, body, path, code) in cases {
        let (status, error) = error_body(server.post_run(&body).await).await;
        assert_eq!(status, 400, "{name}: {error}");
        assert_eq!(error["error"]["code"], "invalid_envelope", "{name}");
        let detail = error["error"]["details"].as_array().unwrap().iter().find(|d| d["path"] == path);
        let detail = detail.unwrap_or_else(|| panic!("{name}: no detail at {path}: {error}"));
        assert_eq!(detail["code"], code, "{name}: {detail}");
    }
    let (_, unknown) = error_body(server.post_run(&json!({"objective": "x", "outputContract": {"mode": "freeform", "instructions": "x"}, "goalConditions": []})).await).await;
    assert!(unknown["error"]["message"].as_str().unwrap().contains("did you mean `goal_condition`"), "{unknown}");

    let (status, not_json) = error_body(
        server
            .http
            .post(server.url("/api/v1/flex/run.stream"))
            .header("content-type", "application/json")
            .body("{\"objective\": ")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, not_json["error"]["code"].as_str()), (400, Some("invalid_json")));

    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0, "no run for a rejected envelope");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM run_events"), 0);
    assert!(server.llm_calls().is_empty());
}

/// PostgreSQL's `text` cannot hold U+0000: a body or URL carrying it is refused up front with a
/// 400 on both backends, instead of failing mid-write as an internal error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nul_character_is_refused_in_bodies_and_urls_and_stores_nothing() {
    let server = TestServer::start(always_plan(&[("draft", "writer")])).await;
    let mut in_objective = envelope();
    in_objective["objective"] = json!("Write a post\u{0}");
    let (status, error) = error_body(server.post_run(&in_objective).await).await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_envelope")), "{error}");
    assert_eq!(detail_paths(&error), ["/objective"]);
    assert_eq!(error["error"]["details"][0]["code"], "nul_character");

    let mut in_a_key = envelope();
    in_a_key["inputs"] = json!({"brief": {"a\u{0}b": 1}});
    let (status, error) = error_body(server.post_run(&in_a_key).await).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(detail_paths(&error), ["/inputs/brief/a\u{0}b"]);

    let thread = server.http.post(server.url("/threads")).json(&json!({"metadata": {"topic": "\u{0}"}}));
    let (status, error) = error_body(thread.send().await.unwrap()).await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_request")), "{error}");
    assert_eq!(detail_paths(&error), ["/metadata/topic"]);

    for path in ["/threads/a%00b", "/api/v1/flex/runs?status=running%00", "/api/v1/flex/schemas/task%00"] {
        let (status, error) = error_body(server.http.get(server.url(path)).send().await.unwrap()).await;
        assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_url")), "{path}: {error}");
    }

    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0, "no run for a refused envelope");
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM threads"), 0, "no thread for a refused body");
    assert!(server.llm_calls().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_integer_written_with_a_fraction_is_an_integer_as_the_schema_says() {
    let server = TestServer::start(always_plan(&[("draft", "writer")])).await;
    let mut body = envelope();
    body["policies"] = json!({"replan": {"maxGoalConditionReplans": 2.0}, "retry": {"maxRetries": 1e0},
                              "timeouts": {"runSeconds": 600.0}});
    let frames = server.run(&body).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let run_id = frames[0].payload["runId"].as_str().unwrap();
    let run: Value =
        server.http.get(server.url(&format!("/api/v1/flex/runs/{run_id}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(run["envelope"]["policies"]["replan"]["maxGoalConditionReplans"], json!(2));

    body["policies"]["replan"]["maxGoalConditionReplans"] = json!(2.5);
    let (status, error) = error_body(server.post_run(&body).await).await;
    assert_eq!(status, 400);
    assert_eq!(detail_paths(&error), ["/policies/replan/maxGoalConditionReplans"]);
}

/// `X-Correlation-Id` and `metadata.correlationId` take the same ids, 1 to 200 visible ASCII
/// characters: one the envelope took before (a space, a newline, a letter beyond ASCII) is
/// refused both ways and nothing is stored; one within the rule names the run either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correlation_id_is_held_to_one_rule_in_the_header_and_the_envelope() {
    let server = TestServer::start(always_plan(&[("draft", "writer")])).await;
    let with_header = |body: &Value, id: &[u8]| {
        let value = reqwest::header::HeaderValue::from_bytes(id).unwrap();
        server
            .http
            .post(server.url("/api/v1/flex/run.stream"))
            .bearer_auth(OPERATOR_KEY)
            .header("x-correlation-id", value)
            .json(body)
    };
    for id in ["order 42", "line\nbreak", "café", &"x".repeat(201)] {
        let mut body = envelope();
        body["metadata"] = json!({"correlationId": id});
        let response = server.post_run(&body).await;
        assert_eq!(response.status(), 400, "{id:?} in the envelope");
        let (_, error) = error_body(response).await;
        assert_eq!(error["error"]["code"], "invalid_envelope", "{id:?}: {error}");
        assert_eq!(detail_paths(&error), ["/metadata/correlationId"], "{id:?}");
        if id.len() <= 200 {
            assert_eq!(error["error"]["details"][0]["code"], "invalid_correlation_id", "{id:?}: {error}");
        }
        // Refused in the envelope even beside a header within the rule.
        assert_eq!(with_header(&body, b"ok-1").send().await.unwrap().status(), 400, "{id:?}");
        // A newline cannot be sent in a header at all.
        if !id.contains('\n') {
            let (status, error) = error_body(with_header(&envelope(), id.as_bytes()).send().await.unwrap()).await;
            let code = error["error"]["code"].as_str();
            assert_eq!((status, code), (400, Some("invalid_correlation_id")), "{id:?}: {error}");
            assert!(error["error"]["message"].as_str().unwrap().contains("visible ASCII"), "{error}");
        }
    }
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0, "no run for a refused correlation id");

    let id = "order:42/retry#3~!";
    let response = with_header(&envelope(), id.as_bytes()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(read_frames(response, usize::MAX).await.iter().all(|f| f.correlation_id == id));
    let mut body = envelope();
    body["metadata"] = json!({"correlationId": id});
    assert!(server.run(&body).await.iter().all(|f| f.correlation_id == id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_problem_of_one_envelope_is_reported() {
    let server = TestServer::start(always_plan(&[("draft", "writer")])).await;
    let body = json!({"objective": "", "outputContract": {"mode": "poem"}, "policies": {"replan": {"maxReplans": 500}}, "extra": 1});
    let (status, error) = error_body(server.post_run(&body).await).await;
    assert_eq!(status, 400);
    let paths = detail_paths(&error);
    for path in ["/objective", "/outputContract/mode", "/policies/replan/maxReplans", "/extra"] {
        assert!(paths.contains(&path.to_string()), "{path} missing from {paths:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_get_413() {
    let server = TestServer::start(always_plan(&[("draft", "writer")])).await;
    let mut big = envelope();
    big["inputs"]["blob"] = json!("x".repeat(2 * 1024 * 1024));
    let (status, error) = error_body(server.post_run(&big).await).await;
    assert_eq!((status, error["error"]["code"].as_str()), (413, Some("payload_too_large")));
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_register_list_and_survive_a_restart() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let options = || Options { dir: Some(dir.clone()), capabilities: vec![], ..Options::default() };
    let server = TestServer::start_with(always_plan(&[("draft", "writer")]), options()).await;
    let registration = ai_capability("summariser", &["doc"], &["summary"], json!({"type": "object"}));
    let response =
        server.http.post(server.url("/api/v1/flex/capabilities/register")).json(&registration).send().await.unwrap();
    assert_eq!(response.status(), 201);
    let mut invalid = registration.clone();
    invalid["kind"] = json!("magic");
    invalid["endpoint"] = json!(12);
    let (status, error) = error_body(
        server.http.post(server.url("/api/v1/flex/capabilities/register")).json(&invalid).send().await.unwrap(),
    )
    .await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_capability")));
    assert_eq!(detail_paths(&error), ["/endpoint", "/kind"]);
    server.stop().await;

    let restarted = TestServer::start_with(always_plan(&[("draft", "writer")]), options()).await;
    let list: Value =
        restarted.http.get(restarted.url("/api/v1/flex/capabilities")).send().await.unwrap().json().await.unwrap();
    let ids: Vec<&str> =
        list["capabilities"].as_array().unwrap().iter().map(|c| c["capabilityId"].as_str().unwrap()).collect();
    assert_eq!(ids, ["summariser"]);
    assert_eq!(list["capabilities"][0]["outputFacets"], json!(["summary"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_capabilities_receive_the_context_bundle() {
    let endpoint = HttpCapability::start(200, json!({"text": "from http", "quality_score": 0.85}));
    let server = http_writer_server(&endpoint, json!({"type": "object", "required": ["quality_score"]})).await;
    let mut envelope = envelope();
    envelope["specialInstructions"] = json!(["Be brief"]);
    let frames = server.run(&envelope).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed", "{:?}", kinds(&frames));
    assert_eq!(frames[3].payload["executorType"], "http");
    let bodies = endpoint.received();
    assert_eq!(bodies.len(), 1);
    let bundle = &bodies[0];
    assert_eq!(bundle["runId"], frames[0].run_id.as_str());
    assert_eq!(bundle["nodeId"], "draft");
    assert_eq!(bundle["capabilityId"], "http.writer");
    assert_eq!(bundle["inputs"]["brief"]["topic"], "flexrun");
    assert!(bundle["instructions"].as_array().unwrap().contains(&json!("Be brief")));
    assert_eq!(server.llm_calls().len(), 1, "only the planner used the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_capability_errors_fail_the_node() {
    let endpoint = HttpCapability::start(503, json!({"error": "overloaded"}));
    let server = http_writer_server(&endpoint, json!({"type": "object"})).await;
    let mut envelope = envelope();
    envelope["policies"] = json!({"retry": {"maxRetries": 1, "baseDelay": 0.1}});
    let frames = server.run(&envelope).await;
    assert_eq!(kinds(&frames)[3..], ["node_start", "retry", "node_error", "complete"]);
    assert_eq!(frames[5].payload["error"]["code"], "capability_http_error");
    assert!(frames[5].message.as_deref().unwrap().contains("503"));
    assert_eq!(endpoint.received().len(), 2, "one call and one retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_need_a_key_and_operators_own_registration() {
    let server = TestServer::start_with(
        always_plan(&[("draft", "writer")]),
        Options {
            env: vec![("FLEXRUN_API_KEYS", "caller-key".into()), ("FLEXRUN_OPERATOR_KEYS", OPERATOR_KEY.into())],
            ..Options::default()
        },
    )
    .await;
    let run_stream = server.url("/api/v1/flex/run.stream");
    let anonymous = server.http.post(&run_stream).json(&envelope()).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = server.http.post(&run_stream).bearer_auth("guess").json(&envelope()).send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let caller = server.http.post(&run_stream).bearer_auth("caller-key").json(&envelope()).send().await.unwrap();
    assert_eq!(caller.status(), 200);
    let frames = read_frames(caller, usize::MAX).await;
    assert_eq!(frames.last().unwrap().kind, "complete");

    let register = server.url("/api/v1/flex/capabilities/register");
    let registration = ai_capability("extra", &[], &["x"], json!({"type": "object"}));
    let as_caller = server.http.post(&register).bearer_auth("caller-key").json(&registration).send().await.unwrap();
    assert_eq!(as_caller.status(), 403);
    let as_operator =
        server.http.post(&register).header("x-api-key", OPERATOR_KEY).json(&registration).send().await.unwrap();
    assert_eq!(as_operator.status(), 201);
    let health = server.http.get(server.url("/api/v1/health")).send().await.unwrap();
    assert_eq!(health.status(), 200, "health needs no key");

    // Steering runs is for operators; callers may read.
    let run_id = &frames[0].run_id;
    for path in ["/api/v1/flex/run.resume".to_string(), format!("/api/v1/flex/runs/{run_id}/cancel")] {
        let body = json!({"runId": run_id, "decision": {"approved": true}});
        let as_caller = server.http.post(server.url(&path)).bearer_auth("caller-key").json(&body).send().await.unwrap();
        assert_eq!(as_caller.status(), 403, "{path}");
    }
    let list = server.http.get(server.url("/api/v1/flex/runs")).bearer_auth("caller-key").send().await.unwrap();
    assert_eq!(list.json::<Value>().await.unwrap()["runs"][0]["runId"], run_id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics() {
    let server = TestServer::start(always_plan(&[("draft", "writer")])).await;
    let health: Value = server.http.get(server.url("/api/v1/health")).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "healthy");
    assert_eq!(health["services"]["database"]["ok"], true);
    assert!(!health.to_string().contains("test-key"), "no secret in health");
    server.run(&envelope()).await;
    let metrics = server.http.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("flexrun_runs_started_total"), "{metrics}");
}

/// Writes `toml` as the file named by `FLEXRUN_CONFIG` of a test server.
fn config_file(dir: &tempfile::TempDir, toml: &str) -> (&'static str, String) {
    let path = dir.path().join("flexrun.toml");
    std::fs::write(&path, toml).unwrap();
    ("FLEXRUN_CONFIG", path.display().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_matched_against_allowed_prefixes_as_urls() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let config = config_file(
        &dir,
        "[http_capabilities]\nallowed_url_prefixes = [\"http://localhost\", \"https://tools.internal/api\"]\n",
    );
    let options = Options { env: vec![config], dir: Some(dir.clone()), ..Options::default() };
    let server = TestServer::start_with(always_plan(&[("draft", "writer")]), options).await;
    let register = server.url("/api/v1/flex/capabilities/register");
    let registration =
        |endpoint: &str| http_capability("scorer", &["post_copy"], &["score"], json!({"type": "object"}), endpoint);

    for refused in [
        "http://localhost.evil.example/score",
        "http://localhost:8080/score",
        "https://localhost/score",
        "https://tools.internal/apix",
        "https://tools.internal.evil.example/api",
        "https://tools.internal:8443/api/score",
        "http://tools.internal/api/score",
        "https://tools.internal/api/../admin",
        "https://tools.internal/api/..%2Fadmin",
        "http://127.0.0.1/score",
    ] {
        let (status, error) =
            error_body(server.http.post(&register).json(&registration(refused)).send().await.unwrap()).await;
        assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_capability")), "{refused}: {error}");
        let detail = &error["error"]["details"][0];
        assert_eq!(
            (detail["path"].as_str(), detail["code"].as_str()),
            (Some("/endpoint"), Some("invalid_endpoint")),
            "{refused}"
        );
        let message = detail["message"].as_str().unwrap();
        assert!(message.contains("http://localhost/, https://tools.internal/api"), "{refused}: {message}");
    }
    for allowed in [
        "http://localhost/score",
        "https://tools.internal/api",
        "https://tools.internal:443/api/score?v=2#top",
        "http://localhost:80/score?v=2",
    ] {
        let response = server.http.post(&register).json(&registration(allowed)).send().await.unwrap();
        assert_eq!(response.status(), 201, "{allowed}");
    }
    let list: Value =
        server.http.get(server.url("/api/v1/flex/capabilities")).send().await.unwrap().json().await.unwrap();
    let scorer = list["capabilities"].as_array().unwrap().iter().find(|c| c["capabilityId"] == "scorer").unwrap();
    assert_eq!(
        scorer["registration"]["endpoint"], "http://localhost:80/score",
        "the last allowed registration is active (shown without its query string)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_local_endpoints_are_refused_by_default() {
    let server = TestServer::start(always_plan(&[("draft", "writer")])).await;
    let register = server.url("/api/v1/flex/capabilities/register");
    for endpoint in
        ["http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/", "http://[fe80::1%25eth0]/"]
    {
        let registration = http_capability("metadata", &[], &["x"], json!({"type": "object"}), endpoint);
        let (status, error) = error_body(server.http.post(&register).json(&registration).send().await.unwrap()).await;
        assert_eq!(status, 400, "{endpoint}: {error}");
        assert_eq!(error["error"]["details"][0]["code"], "invalid_endpoint", "{endpoint}: {error}");
    }
    let registration =
        http_capability("metadata", &[], &["x"], json!({"type": "object"}), "http://169.254.169.254/latest/meta-data/");
    let (status, error) = error_body(server.http.post(&register).json(&registration).send().await.unwrap()).await;
    assert_eq!(status, 400);
    let message = error["error"]["details"][0]["message"].as_str().unwrap();
    assert!(message.contains("link-local") && message.contains("allow_link_local"), "{message}");

    let dir = Arc::new(tempfile::tempdir().unwrap());
    let config = config_file(&dir, "[http_capabilities]\nallow_link_local = true\n");
    let options = Options { env: vec![config], dir: Some(dir.clone()), ..Options::default() };
    let allowing = TestServer::start_with(always_plan(&[("draft", "writer")]), options).await;
    let response = allowing
        .http
        .post(allowing.url("/api/v1/flex/capabilities/register"))
        .json(&registration)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "an operator may allow them");
}

/// Names resolved from a table, never from DNS: every address test traffic reaches is loopback.
struct Table(Vec<(&'static str, std::net::IpAddr)>);

impl reqwest::dns::Resolve for Table {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let found: Vec<std::net::SocketAddr> = self
            .0
            .iter()
            .filter(|(host, _)| *host == name.as_str())
            .map(|(_, ip)| std::net::SocketAddr::new(*ip, 0))
            .collect();
        Box::pin(async move {
            let found: reqwest::dns::Addrs = Box::new(found.into_iter());
            Ok(found)
        })
    }
}

/// A server whose `http.writer` calls `endpoint`'s port at `host`, which `Table` resolves.
async fn named_writer_server(endpoint: &HttpCapability, host: &str) -> TestServer {
    let url = endpoint.url.replace("127.0.0.1", host);
    let writer = http_capability("http.writer", &["brief"], &["post_copy"], json!({"type": "object"}), &url);
    let table = Table(vec![
        ("metadata.test", "169.254.169.254".parse().unwrap()),
        ("mapped.test", "::ffff:169.254.169.254".parse().unwrap()),
        ("tools.test", "127.0.0.1".parse().unwrap()),
    ]);
    let options = Options { capabilities: vec![writer], lookup: Some(Arc::new(table)), ..Options::default() };
    TestServer::start_with(planner_then(&[("draft", "http.writer")], post(0.9)), options).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_resolving_to_link_local_addresses_fail_the_node_without_a_retry() {
    let endpoint = HttpCapability::start(200, json!({"text": "from http", "quality_score": 0.85}));
    let mut envelope = envelope();
    envelope["policies"] = json!({"retry": {"maxRetries": 2, "baseDelay": 0.1}});

    // The same endpoint under a name that resolves to loopback is called: the table is in use.
    let allowed = named_writer_server(&endpoint, "tools.test").await;
    let frames = allowed.run(&envelope).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed", "{:?}", kinds(&frames));
    assert_eq!(endpoint.received().len(), 1);

    for host in ["metadata.test", "mapped.test"] {
        let refused = named_writer_server(&endpoint, host).await;
        let frames = refused.run(&envelope).await;
        assert_eq!(kinds(&frames)[3..], ["node_start", "node_error", "complete"], "{host}: never retried");
        assert_eq!(frames[4].payload["error"]["code"], "capability_address_refused", "{host}");
        let message = frames[4].message.as_deref().unwrap();
        assert!(message.contains(host) && message.contains("169.254.169.254"), "{host}: {message}");
        assert_eq!(frames[5].payload["status"], "failed");
        assert_eq!(endpoint.received().len(), 1, "{host}: nothing was sent");
    }
}

/// An operator unregisters a capability: it leaves the list and the planner's prompt at once, and
/// stays gone after a restart; a caller may not, an unknown id is 404, and a file's capability is
/// registered again by its file at the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_unregisters_a_capability_and_the_planner_no_longer_sees_it() {
    const CALLER: &str = "caller-secret";
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let env =
        vec![("FLEXRUN_API_KEYS", format!("alice:{CALLER}")), ("FLEXRUN_OPERATOR_KEYS", format!("ops:{OPERATOR_KEY}"))];
    let options = || Options { dir: Some(dir.clone()), env: env.clone(), ..Options::default() };
    let server = TestServer::start_with(always_plan(&[("draft", "writer")]), options()).await;
    let registration = ai_capability("summariser", &["doc"], &["summary"], json!({"type": "object"}));
    let register = server.url("/api/v1/flex/capabilities/register");
    let registered = server.http.post(&register).bearer_auth(OPERATOR_KEY).json(&registration).send().await.unwrap();
    assert_eq!(registered.status(), 201);
    let unregister = |id: &str, key: &'static str| {
        server.http.delete(server.url(&format!("/api/v1/flex/capabilities/{id}"))).bearer_auth(key).send()
    };
    let ids = |server: &TestServer| {
        let list = server.http.get(server.url("/api/v1/flex/capabilities")).bearer_auth(OPERATOR_KEY).send();
        async move {
            let list: Value = list.await.unwrap().json().await.unwrap();
            let mut ids: Vec<String> =
                list["capabilities"].as_array().unwrap().iter().map(|c| c["capabilityId"].to_string()).collect();
            ids.sort();
            ids
        }
    };
    assert!(ids(&server).await.contains(&"\"summariser\"".to_string()));

    let (status, error) = error_body(unregister("summariser", CALLER).await.unwrap()).await;
    assert_eq!((status, error["error"]["code"].as_str()), (403, Some("forbidden")));
    let removed = unregister("summariser", OPERATOR_KEY).await.unwrap();
    assert_eq!(removed.status(), 200);
    let body: Value = removed.json().await.unwrap();
    assert_eq!((&body["ok"], &body["capabilityId"]), (&json!(true), &json!("summariser")));
    assert!(!ids(&server).await.contains(&"\"summariser\"".to_string()));
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM capabilities WHERE capability_id = 'summariser'"), 0);
    let (status, error) = error_body(unregister("summariser", OPERATOR_KEY).await.unwrap()).await;
    assert_eq!((status, error["error"]["code"].as_str()), (404, Some("capability_not_found")));

    // The planner is no longer offered it; the file's writer is unregistered until the next start.
    let removed = unregister("writer", OPERATOR_KEY).await.unwrap();
    assert_eq!(removed.status(), 200);
    server.run(&envelope()).await;
    let prompt = &server.llm_calls()[0];
    assert!(prompt.is_planner());
    let offered = format!("{}{}", prompt.system, prompt.user);
    assert!(!offered.contains("summariser") && !offered.contains("| writer |"), "{offered}");
    assert!(offered.contains("| editor |"), "the other capabilities are offered: {offered}");
    server.stop().await;

    let restarted = TestServer::start_with(always_plan(&[("draft", "writer")]), options()).await;
    let after = ids(&restarted).await;
    assert!(!after.contains(&"\"summariser\"".to_string()), "{after:?}");
    assert!(after.contains(&"\"writer\"".to_string()), "its file registers it again: {after:?}");
}
