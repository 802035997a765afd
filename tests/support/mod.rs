//! Test harness: the real flexrun server on a loopback port with a real SQLite file, a stand-in
//! model server on loopback, and an SSE client. Only the model (and HTTP capabilities) are mocked,
//! at their HTTP boundary.
#![allow(dead_code)]

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use diesel::{QueryableByName, RunQueryDsl};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

use flexrun::config::Settings;
use flexrun::events::ReceivedFrame;
use flexrun::llm::standin::{ChatCall, Script, StandIn};
use flexrun::services::{Hooks, Services};
use flexrun::store::DbConn;

pub use flexrun::llm::standin::{Reply, script};

pub mod browser;
pub mod database;
pub mod mcp;
pub mod otlp;
pub mod process;

pub const OPERATOR_KEY: &str = "operator-test-key";

pub struct TestServer {
    pub base: String,
    pub llm: StandIn,
    /// The server's `FLEXRUN_DATABASE_URL` (see [`database`]).
    pub db_url: String,
    pub http: reqwest::Client,
    handle: ServerHandle,
    services: Arc<Services>,
    pub dir: Arc<tempfile::TempDir>,
    env: Vec<(String, String)>,
}

/// Options of a test server.
pub struct Options {
    pub env: Vec<(&'static str, String)>,
    pub capabilities: Vec<Value>,
    pub dir: Option<Arc<tempfile::TempDir>>,
    /// Sees every commit of every run's log.
    pub observer: Option<flexrun::services::CommitObserver>,
    /// Resolves `http` capability host names (instead of the system resolver).
    pub lookup: Option<Arc<dyn reqwest::dns::Resolve>>,
}

impl Default for Options {
    fn default() -> Self {
        Self { env: Vec::new(), capabilities: default_capabilities(), dir: None, observer: None, lookup: None }
    }
}

impl TestServer {
    pub async fn start(script: Script) -> Self {
        Self::start_with(script, Options::default()).await
    }

    pub async fn start_with(script: Script, options: Options) -> Self {
        let llm = StandIn::start(script).expect("stand-in model starts");
        let dir = options.dir.unwrap_or_else(|| Arc::new(tempfile::tempdir().unwrap()));
        let capabilities_dir = dir.path().join("capabilities");
        std::fs::create_dir_all(&capabilities_dir).unwrap();
        for capability in &options.capabilities {
            let name = format!("{}.json", capability["capabilityId"].as_str().unwrap());
            std::fs::write(capabilities_dir.join(name), capability.to_string()).unwrap();
        }
        let db_url = database::url(dir.path());
        let mut env: Vec<(String, String)> = vec![
            ("FLEXRUN_DATABASE_URL".into(), db_url.clone()),
            ("FLEXRUN_CAPABILITIES_DIR".into(), capabilities_dir.display().to_string()),
            ("FLEXRUN_LLM_BASE_URL".into(), llm.base_url.clone()),
            ("FLEXRUN_LLM_API_KEY".into(), "test-key".into()),
            ("FLEXRUN_LLM_MODEL".into(), "test-model".into()),
        ];
        env.extend(options.env.into_iter().map(|(k, v)| (k.to_string(), v)));
        let lookup = env.clone();
        let settings = Settings::load_from(|name| lookup.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
            .expect("test settings load");
        let hooks = Hooks { observer: options.observer, lookup: options.lookup };
        let services = Services::start_with(settings, hooks).await.expect("services start");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = flexrun::http::serve(services.clone(), listener, flexrun::surfaces).unwrap();
        let handle = server.handle();
        tokio::spawn(server);
        flexrun::run::recover(&services).await.expect("recovery reads the database");
        Self { base, llm, db_url, http: http_client(), handle, services, dir, env }
    }

    /// Stops serving, and lets go of the node id (PostgreSQL) as an ending process does: a server
    /// started next on the same database takes it.
    pub async fn stop(&self) {
        self.handle.stop(false).await;
        // As `serve` stops: its coordinators stop at their next wait and nothing of this server
        // drives a run again (a server started next on the database drives them).
        self.services.claims.drain();
        if let Some(identity) = &self.services.identity {
            identity.release().await;
        }
        self.llm.stop().await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Posts an envelope to `run.stream` (with the operator key when auth is on).
    pub async fn post_run(&self, envelope: &Value) -> reqwest::Response {
        self.http
            .post(self.url("/api/v1/flex/run.stream"))
            .bearer_auth(OPERATOR_KEY)
            .json(envelope)
            .send()
            .await
            .expect("run.stream request")
    }

    /// Posts an envelope and reads every frame until the stream ends.
    pub async fn run(&self, envelope: &Value) -> Vec<ReceivedFrame> {
        let response = self.post_run(envelope).await;
        assert_eq!(response.status(), 200, "run.stream failed: {:?}", response.text().await);
        read_frames(response, usize::MAX).await
    }

    /// `GET path` with the operator key, its body as JSON.
    pub async fn get_json(&self, path: &str) -> Value {
        let response = self.http.get(self.url(path)).bearer_auth(OPERATOR_KEY).send().await.expect("GET request");
        response.json().await.expect("a JSON body")
    }

    /// The nodes of every plan version of run `run_id`, as its document (`GET /runs/{id}`) shows
    /// them.
    pub async fn nodes(&self, run_id: &str) -> Vec<Value> {
        let document = self.get_json(&format!("/api/v1/flex/runs/{run_id}")).await;
        document["nodes"].as_array().cloned().unwrap_or_else(|| panic!("a run document with nodes: {document}"))
    }

    /// How many nodes of run `run_id`'s plan versions have `status`.
    pub async fn nodes_with_status(&self, run_id: &str, status: &str) -> usize {
        self.nodes(run_id).await.iter().filter(|n| n["status"] == status).count()
    }

    pub fn llm_calls(&self) -> Vec<ChatCall> {
        self.llm.calls()
    }

    pub fn planner_calls(&self) -> Vec<ChatCall> {
        self.llm.calls().into_iter().filter(|c| c.is_planner()).collect()
    }

    pub fn capability_calls(&self, capability: &str) -> usize {
        self.llm.calls().iter().filter(|c| c.capability_id() == Some(capability)).count()
    }

    /// A direct connection to the server's database, for checking what was persisted.
    pub fn db(&self) -> DbConn {
        database::connect(self.dir.path())
    }

    pub fn count(&self, sql: &str) -> i64 {
        #[derive(QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        diesel::sql_query(sql).get_result::<Count>(&mut self.db()).expect(sql).n
    }

    /// Polls until the run reaches `status` (or panics after 10 s).
    pub async fn wait_for_status(&self, run_id: &str, status: &str) {
        for _ in 0..200 {
            let run = flexrun::store::runs::get(&mut self.db(), run_id).unwrap();
            if run.status.as_str() == status {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("run {run_id} never reached {status}");
    }

    /// Polls until no coordinator drives the run (it ended or waits for an operator; panics
    /// after 10 s).
    pub async fn wait_for_settled(&self, run_id: &str) {
        for _ in 0..200 {
            let status = flexrun::store::runs::get(&mut self.db(), run_id).unwrap().status;
            if !["pending", "planning", "running"].contains(&status.as_str()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("run {run_id} never settled");
    }

    /// The frames of the run's event log, parsed.
    pub fn event_log(&self, run_id: &str) -> Vec<(u64, String, Value)> {
        event_log(self.dir.path(), run_id)
    }

    /// The frames of the run's event log, as stored.
    pub fn event_log_text(&self, run_id: &str) -> Vec<String> {
        let mut db = self.db();
        let frames = flexrun::store::events::after(&mut db, run_id, flexrun::events::Seq::ZERO, i64::MAX).unwrap();
        frames.into_iter().map(|f| f.json.to_string()).collect()
    }
}

/// `run.resume` with `body` (operator key): the status and, for a 200, every frame until the
/// stream ends; otherwise the error body.
pub async fn resume(server: &TestServer, body: Value) -> (u16, Vec<ReceivedFrame>, Value) {
    let url = server.url("/api/v1/flex/run.resume");
    let response = server.http.post(url).bearer_auth(OPERATOR_KEY).json(&body).send().await.expect("run.resume");
    let status = response.status().as_u16();
    if status == 200 {
        return (status, read_frames(response, usize::MAX).await, Value::Null);
    }
    (status, Vec::new(), response.json().await.unwrap())
}

/// A `run.resume` body deciding request `request_id` (with `freeformText` when `text` is given).
pub fn decision(run_id: &str, request_id: &str, approved: bool, text: Option<&str>) -> Value {
    let mut decision = json!({"requestId": request_id, "approved": approved});
    if let Some(text) = text {
        decision["freeformText"] = json!(text);
    }
    json!({"runId": run_id, "operator": {"id": "op-7"}, "decision": decision})
}

/// The frames of a run's event log in the test database of `dir`, parsed.
pub fn event_log(dir: &std::path::Path, run_id: &str) -> Vec<(u64, String, Value)> {
    let mut db = database::connect(dir);
    flexrun::store::events::after(&mut db, run_id, flexrun::events::Seq::ZERO, 10_000)
        .unwrap()
        .into_iter()
        .map(|f| (f.seq.get(), f.event_type, serde_json::from_str(&f.json).unwrap()))
        .collect()
}

/// Reads up to `max` frames of an SSE response (until it ends), within 30 s.
pub async fn read_frames(response: reqwest::Response, max: usize) -> Vec<ReceivedFrame> {
    read_frames_within(response, max, Duration::from_secs(30)).await
}

/// Reads up to `max` frames of an SSE response (until it ends), within `patience`.
pub async fn read_frames_within(response: reqwest::Response, max: usize, patience: Duration) -> Vec<ReceivedFrame> {
    try_read_frames_within(response, max, patience)
        .await
        .unwrap_or_else(|frames| panic!("stream did not end within {patience:?}; got {:?}", kinds(&frames)))
}

/// Reads up to `max` frames of an SSE response (until it ends); the frames read so far as the
/// error when `patience` runs out first.
pub async fn try_read_frames_within(
    response: reqwest::Response,
    max: usize,
    patience: Duration,
) -> Result<Vec<ReceivedFrame>, Vec<ReceivedFrame>> {
    let mut frames = Vec::new();
    let mut events = response.bytes_stream().eventsource();
    let deadline = tokio::time::sleep(patience);
    tokio::pin!(deadline);
    while frames.len() < max {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(event)) => {
                    let frame: ReceivedFrame = serde_json::from_str(&event.data).expect("frame JSON");
                    assert_eq!(event.id, frame.seq.to_string(), "SSE id is the frame seq");
                    assert_eq!(event.event, frame.kind, "SSE event is the frame type");
                    frames.push(frame);
                }
                Some(Err(error)) => panic!("SSE error: {error}"),
                None => break,
            },
            _ = &mut deadline => return Err(frames),
        }
    }
    Ok(frames)
}

/// The HTTP client tests talk to the server with. Its idle connections are dropped after 2 s,
/// before the server's keep-alive (5 s) closes them: a request sent on a connection the server is
/// closing at that moment fails (`IncompleteMessage`) through no fault of either side.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder().pool_idle_timeout(Duration::from_secs(2)).build().expect("an HTTP client")
}

/// A Chat Completions `usage` block: `prompt` and `completion` tokens, with the cached and
/// reasoning details when given.
pub fn usage_block(prompt: u64, completion: u64, cached: Option<u64>, reasoning: Option<u64>) -> Value {
    let mut usage =
        json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
    if let Some(cached) = cached {
        usage["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    if let Some(reasoning) = reasoning {
        usage["completion_tokens_details"] = json!({"reasoning_tokens": reasoning});
    }
    usage
}

/// The first frame of type `kind` (panics, listing what there is, when none is).
pub fn frame_of<'a>(frames: &'a [ReceivedFrame], kind: &str) -> &'a ReceivedFrame {
    frames.iter().find(|f| f.kind == kind).unwrap_or_else(|| panic!("no {kind} in {:?}", kinds(frames)))
}

/// The id of the first request the run opened (its first `hitl_request`).
pub fn hitl_request_id(frames: &[ReceivedFrame]) -> String {
    frame_of(frames, "hitl_request").payload["request"]["id"].as_str().expect("a request id").to_string()
}

pub fn kinds(frames: &[ReceivedFrame]) -> Vec<&str> {
    frames.iter().map(|f| f.kind.as_str()).collect()
}

/// An `ai` capability with a JSON Schema output.
pub fn ai_capability(id: &str, inputs: &[&str], outputs: &[&str], schema: Value) -> Value {
    json!({
        "capabilityId": id, "version": "1.0", "displayName": id, "summary": format!("{id} capability"),
        "kind": "execution", "agentType": "ai", "inputFacets": inputs, "outputFacets": outputs,
        "instructions": format!("You are {id}."),
        "outputContract": {"mode": "json_schema", "schema": schema}
    })
}

/// An `http` capability registration pointing at `endpoint`.
pub fn http_capability(id: &str, inputs: &[&str], outputs: &[&str], schema: Value, endpoint: &str) -> Value {
    let mut registration = ai_capability(id, inputs, outputs, schema);
    registration["agentType"] = json!("http");
    registration["endpoint"] = json!(endpoint);
    registration
}

/// A server whose only plan is one `draft` step by the `http` capability `http.writer` (output
/// checked against `schema`), calling `endpoint`.
pub async fn http_writer_server(endpoint: &HttpCapability, schema: Value) -> TestServer {
    let writer = http_capability("http.writer", &["brief"], &["post_copy"], schema, &endpoint.url);
    TestServer::start_with(
        planner_then(&[("draft", "http.writer")], post(0.9)),
        Options { capabilities: vec![writer], ..Options::default() },
    )
    .await
}

/// A model that always plans `stages` and answers every capability call with `capability`.
pub fn planner_then(stages: &'static [(&'static str, &'static str)], capability: Reply) -> Script {
    script(move |call| if call.is_planner() { plan(stages) } else { capability.clone() })
}

/// The first plan drafts with `writer` (scoring `first`); the repair plan keeps the draft and adds a
/// polish by `editor` (scoring `repaired`).
pub fn repair_script(first: f64, repaired: f64) -> Script {
    script(move |call| {
        if call.is_planner() {
            if call.user.contains("### GOAL CONDITION REPAIR") {
                return plan(&[("draft", "writer"), ("polish", "editor")]);
            }
            return plan(&[("draft", "writer")]);
        }
        match call.capability_id() {
            Some("writer") => post(first),
            _ => post(repaired),
        }
    })
}

/// Plans `draft` (writer); once an operator's feedback is in the planner prompt, `draft` and
/// `polish` (editor). Every capability call scores 0.9.
pub fn feedback_replan_script() -> Script {
    script(|call| {
        if call.is_planner() {
            if call.user.contains("### OPERATOR FEEDBACK") {
                return plan(&[("draft", "writer"), ("polish", "editor")]);
            }
            return plan(&[("draft", "writer")]);
        }
        post(0.9)
    })
}

/// [`envelope`] with a plan approval required before any step runs.
pub fn gated_envelope() -> Value {
    let mut gated = envelope();
    gated["policies"] = json!({"approval": {"plan": "required"}});
    gated
}

/// writer: brief → post_copy {text, quality_score}; editor: post_copy → post_copy; tagger: brief → tags.
pub fn default_capabilities() -> Vec<Value> {
    let post = json!({"type": "object", "required": ["text", "quality_score"],
                      "properties": {"text": {"type": "string"}, "quality_score": {"type": "number"}}});
    vec![
        ai_capability("writer", &["brief"], &["post_copy"], post.clone()),
        ai_capability("editor", &["post_copy"], &["post_copy"], post),
        ai_capability("tagger", &["brief"], &["tags"], json!({"type": "object", "required": ["tags"]})),
    ]
}

/// An envelope asking for `post_copy` with `quality_score >= 0.8`.
pub fn envelope() -> Value {
    json!({
        "objective": "Write a post about flexrun",
        "inputs": {"brief": {"topic": "flexrun"}},
        "outputContract": {"mode": "facets", "facets": ["post_copy"]},
        "goal_condition": [{"facet": "post_copy", "path": "/quality_score",
                            "condition": {"jsonLogic": {">=": [{"var": "quality_score"}, 0.8]}}}]
    })
}

/// [`envelope`] on thread `thread` (`constraints.threadId`).
pub fn envelope_on_thread(thread: &str) -> Value {
    let mut envelope = envelope();
    envelope["constraints"] = json!({"threadId": thread});
    envelope
}

pub fn plan(stages: &[(&str, &str)]) -> Reply {
    let nodes: Vec<Value> = stages.iter().map(|(stage, cap)| json!({"stage": stage, "capabilityId": cap})).collect();
    Reply::json(json!({"nodes": nodes}))
}

pub fn post(score: f64) -> Reply {
    Reply::json(json!({"text": format!("post scored {score}"), "quality_score": score}))
}

type EndpointState = actix_web::web::Data<(Arc<Mutex<Vec<Value>>>, Vec<(u16, Value)>, Arc<Mutex<Vec<Option<String>>>>)>;

/// A scripted HTTP capability endpoint on loopback that records the bodies it receives (and
/// their `traceparent` headers).
pub struct HttpCapability {
    pub url: String,
    pub bodies: Arc<Mutex<Vec<Value>>>,
    pub traceparents: Arc<Mutex<Vec<Option<String>>>>,
    handle: ServerHandle,
}

impl HttpCapability {
    /// Answers every call with `status` and `response`.
    pub fn start(status: u16, response: Value) -> Self {
        Self::sequence(vec![(status, response)])
    }

    /// Answers the n-th call with the n-th reply, and every call after the last with the last.
    pub fn sequence(replies: Vec<(u16, Value)>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/capability", listener.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let traceparents = Arc::new(Mutex::new(Vec::new()));
        let state = actix_web::web::Data::new((bodies.clone(), replies, traceparents.clone()));
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new().app_data(state.clone()).route(
                "/capability",
                actix_web::web::post().to(
                    |state: EndpointState, req: actix_web::HttpRequest, body: actix_web::web::Json<Value>| async move {
                        let traceparent =
                            req.headers().get("traceparent").and_then(|v| v.to_str().ok()).map(String::from);
                        state.2.lock().unwrap().push(traceparent);
                        let mut bodies = state.0.lock().unwrap();
                        bodies.push(body.into_inner());
                        let (status, response) = &state.1[(bodies.len() - 1).min(state.1.len() - 1)];
                        actix_web::HttpResponse::build(actix_web::http::StatusCode::from_u16(*status).unwrap())
                            .json(response)
                    },
                ),
            )
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Self { url, bodies, traceparents, handle }
    }

    pub fn received(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }
}
