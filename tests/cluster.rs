//! Several flexrun nodes on one PostgreSQL database (always PostgreSQL: these tests are about
//! it): real `flexrun serve` processes killed (SIGKILL), paused (SIGSTOP) and drained (SIGTERM)
//! mid-run, with a 2-second lease; PostgreSQL restarted and a node's LISTEN connection cut
//! mid-run. A run goes on elsewhere without repeating a completed step, its log stays gap-free, a
//! stale node writes nothing, and clients follow runs across nodes. And a node's id: a single
//! node killed and restarted takes its run back at once, a second process under a node id in
//! use refuses to start, and a node whose id lock connection is cut takes it again. And a
//! capability registered or unregistered through one node is offered or withdrawn by the others.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use diesel::Connection;
use flexrun::events::ReceivedFrame;
use flexrun::llm::standin::{ChatCall, StandIn};
use flexrun::store::DbConn;
use serde_json::{Value, json};
use support::process::ServerProcess;
use support::*;

/// A cluster of `n` nodes on one new database, the model shared.
struct Cluster {
    nodes: Vec<ServerProcess>,
    url: String,
    _dirs: Vec<tempfile::TempDir>,
}

impl Cluster {
    /// `n` nodes with a 2-second lease on a new database of the test server.
    async fn start(n: usize, model: &StandIn) -> Self {
        Self::on(support::database::fresh_postgres(), n, model, "2").await
    }

    /// `n` nodes named node-a, node-b, … with a lease of `lease_seconds` on the database at `url`.
    async fn on(url: String, n: usize, model: &StandIn, lease_seconds: &str) -> Self {
        let names: Vec<String> = ["a", "b", "c"].iter().take(n).map(|letter| format!("node-{letter}")).collect();
        let nodes: Vec<Vec<(&str, &str)>> = names
            .iter()
            .map(|name| {
                vec![
                    ("FLEXRUN_NODE_ID", name.as_str()),
                    ("FLEXRUN_LEASE_SECONDS", lease_seconds),
                    ("FLEXRUN_DRAIN_SECONDS", "10"),
                ]
            })
            .collect();
        Self::of(url, model, &nodes).await
    }

    /// A node for each entry of `nodes`, with those settings, on the database at `url`.
    async fn of(url: String, model: &StandIn, nodes: &[Vec<(&str, &str)>]) -> Self {
        let mut started = Vec::new();
        let mut dirs = Vec::new();
        for settings in nodes {
            let dir = tempfile::tempdir().unwrap();
            let mut env = vec![("FLEXRUN_DATABASE_URL", url.as_str())];
            env.extend(settings.iter().copied());
            started.push(ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &env).await);
            dirs.push(dir);
        }
        Self { nodes: started, url, _dirs: dirs }
    }

    fn db(&self) -> DbConn {
        DbConn::establish(&self.url).unwrap()
    }

    /// The run's stored frames: (seq, type).
    fn log(&self, run_id: &str) -> Vec<(u64, String)> {
        let frames = flexrun::store::events::after(&mut self.db(), run_id, flexrun::events::Seq::ZERO, 10_000).unwrap();
        frames.into_iter().map(|f| (f.seq.get(), f.event_type)).collect()
    }

    /// `GET /runs/{id}` on node `i`.
    async fn run(&self, i: usize, run_id: &str) -> Value {
        let node = &self.nodes[i];
        let response = node.http.get(node.url(&format!("/api/v1/flex/runs/{run_id}"))).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }
}

/// Plans draft (writer) → polish (editor), both scoring 0.9; the first `slow` call answers after
/// `delay`, everything else at once. Counts calls per capability.
fn model(slow: &'static str, delay: Duration) -> (StandIn, Arc<AtomicUsize>) {
    let slowed = Arc::new(AtomicUsize::new(0));
    let seen = slowed.clone();
    let model = StandIn::start(script(move |call: &ChatCall| {
        if call.is_planner() {
            return plan(&[("draft", "writer"), ("polish", "editor")]);
        }
        if call.capability_id() == Some(slow) && seen.fetch_add(1, Ordering::SeqCst) == 0 {
            return post(0.9).after(delay);
        }
        post(0.9)
    }))
    .unwrap();
    (model, slowed)
}

/// `GET /api/v1/health` of `node`.
async fn health(node: &ServerProcess) -> Value {
    node.http.get(node.url("/api/v1/health")).send().await.unwrap().json().await.unwrap()
}

/// `GET /metrics` of `node`.
async fn metrics(node: &ServerProcess) -> String {
    node.http.get(node.url("/metrics")).send().await.unwrap().text().await.unwrap()
}

/// Waits up to 10 s for `node` to log `text`.
async fn logged(node: &ServerProcess, text: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !node.log().contains(text) {
        assert!(std::time::Instant::now() < deadline, "never logged {text:?}:\n{}", node.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn calls(model: &StandIn, capability: &str) -> usize {
    model.calls().iter().filter(|c| c.capability_id() == Some(capability)).count()
}

/// Reads frames of `response` until one of kind `kind` arrives.
async fn frames_until(response: reqwest::Response, kind: &str) -> Vec<ReceivedFrame> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let mut events = response.bytes_stream().eventsource();
    let mut frames = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(20), events.next()).await.expect("a frame") {
        let frame: ReceivedFrame = serde_json::from_str(&event.unwrap().data).unwrap();
        let done = frame.kind == kind;
        frames.push(frame);
        if done {
            return frames;
        }
    }
    panic!("the stream ended before {kind}: {:?}", kinds(&frames));
}

fn seqs(frames: &[ReceivedFrame]) -> Vec<u64> {
    frames.iter().map(|f| f.seq).collect()
}

/// The checks of a run that went on elsewhere: completed once, every seq once in order, each
/// step's model call made once (`editor_calls` for the step that was in flight).
fn assert_finished_once(cluster: &Cluster, run_id: &str, seen: &[ReceivedFrame]) {
    let log = cluster.log(run_id);
    let numbers: Vec<u64> = log.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(numbers, (1..=log.len() as u64).collect::<Vec<_>>(), "gap-free: {log:?}");
    assert_eq!(log.iter().filter(|(_, kind)| kind == "complete").count(), 1, "{log:?}");
    assert_eq!(log.iter().filter(|(_, kind)| kind == "node_complete").count(), 2, "each node once: {log:?}");
    assert_eq!(seqs(seen), numbers, "the client saw every frame once");
    assert_eq!(seen.last().unwrap().payload["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_node_is_killed_mid_step_finishes_on_another_node() {
    let (model, _) = model("editor", Duration::from_secs(600));
    let mut cluster = Cluster::start(3, &model).await;
    let (run_id, response) = cluster.nodes[0].post_run(&envelope()).await;
    let before = frames_until(response, "node_complete").await;
    // The draft is committed; wait for the polish's call, in flight on node a.
    while calls(&model, "editor") == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.nodes[0].kill();
    // The client re-attaches to node b after the last frame it saw; node b or c goes on.
    let after = cluster.nodes[1].reattach(&run_id, before.last().unwrap().seq).await;
    assert_finished_once(&cluster, &run_id, &[before, after].concat());
    assert_eq!(calls(&model, "writer"), 1, "the completed draft is not written again");
    assert_eq!(calls(&model, "editor"), 2, "the polish in flight on the dead node runs again, once");
    let run = cluster.run(2, &run_id).await;
    assert_eq!(run["lease"]["epoch"], 2, "claimed once more after the first lease: {run}");
    assert_eq!(run["lease"]["crashAttempts"], 1);
    assert_eq!(run["lease"]["owner"], Value::Null, "an ended run holds no lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_past_its_lease_writes_nothing_when_it_wakes() {
    // Node a's polish answers after 4 s; a is paused meanwhile, past its 2 s lease.
    let (model, _) = model("editor", Duration::from_secs(4));
    let cluster = Cluster::start(2, &model).await;
    let (run_id, response) = cluster.nodes[0].post_run(&envelope()).await;
    drop(response);
    while calls(&model, "editor") == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.nodes[0].signal("STOP");
    // Node b claims the run once a's lease ran out and finishes it.
    let finished = cluster.nodes[1].reattach(&run_id, 0).await;
    assert_eq!(finished.last().unwrap().payload["status"], "completed");
    let log_before_waking = cluster.log(&run_id);
    cluster.nodes[0].signal("CONT");
    // a's polish answer is there by now: give it time to try to commit it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(cluster.log(&run_id), log_before_waking, "nothing written from the stale epoch");
    assert_finished_once(&cluster, &run_id, &finished);
    assert_eq!(calls(&model, "writer"), 1);
    assert_eq!(cluster.run(1, &run_id).await["lease"]["epoch"], 2);
    let log = cluster.nodes[0].log();
    assert!(log.contains("lease moved to another node"), "node a noticed it lost the run:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_one_node_follows_a_run_driven_by_another_and_a_third_approves_it() {
    let (model, _) = model("writer", Duration::from_millis(800));
    let cluster = Cluster::start(3, &model).await;
    // Live across nodes: posted on a, followed on b from its first frame.
    let (run_id, response) = cluster.nodes[0].post_run(&envelope()).await;
    let on_b = cluster.nodes[1].reattach(&run_id, 0).await;
    let on_a = read_frames(response, usize::MAX).await;
    assert_eq!(seqs(&on_b), seqs(&on_a), "b saw what a sent, live");
    assert_finished_once(&cluster, &run_id, &on_b);

    // Approved on c: the paused run holds no lease, c takes it and drives the run to its end.
    let (run_id, response) = cluster.nodes[0].post_run(&gated_envelope()).await;
    let paused = read_frames(response, usize::MAX).await;
    assert_eq!(kinds(&paused).last(), Some(&"hitl_request"));
    assert_eq!(cluster.run(1, &run_id).await["lease"]["owner"], Value::Null, "a waiting run holds no lease");
    let request_id = paused.last().unwrap().payload["request"]["id"].as_str().unwrap().to_string();
    let body = json!({"runId": run_id, "decision": {"requestId": request_id, "approved": true}});
    let node_c = &cluster.nodes[2];
    let response = node_c.http.post(node_c.url("/api/v1/flex/run.resume")).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let rest = read_frames(response, usize::MAX).await;
    assert_eq!(rest.last().unwrap().payload["status"], "completed", "{:?}", kinds(&rest));
    let run = cluster.run(0, &run_id).await;
    assert_eq!(run["lease"]["epoch"], 2, "c took the lease the pause let go of: {run}");
    assert_eq!(run["lease"]["crashAttempts"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_node_finishes_its_step_and_hands_the_run_over() {
    // a's draft takes 1.5 s; a is told to stop (SIGTERM) meanwhile.
    let (model, _) = model("writer", Duration::from_millis(1500));
    let mut cluster = Cluster::start(2, &model).await;
    let (run_id, response) = cluster.nodes[0].post_run(&envelope()).await;
    drop(response);
    while calls(&model, "writer") == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.nodes[0].signal("TERM");
    let status = cluster.nodes[0].exited(Duration::from_secs(20)).await;
    assert!(status.success(), "a drained and exited cleanly: {status:?}");
    let finished = cluster.nodes[1].reattach(&run_id, 0).await;
    assert_finished_once(&cluster, &run_id, &finished);
    assert_eq!(calls(&model, "writer"), 1, "the step in flight finished on a, not again on b");
    assert_eq!(calls(&model, "editor"), 1);
    let run = cluster.run(1, &run_id).await;
    assert_eq!(run["lease"]["crashAttempts"], 0, "handed back, not crashed: {run}");
    let health = health(&cluster.nodes[1]).await;
    assert_eq!(health["node"]["id"], "node-b", "{health}");
    assert_eq!(health["node"]["draining"], false);
    let metrics = metrics(&cluster.nodes[1]).await;
    assert!(metrics.contains("flexrun_lease_claims_total{why=\"stale\"} 1"), "b claimed the run once:\n{metrics}");
    assert!(cluster.nodes[0].log().contains("drained: leases handed back"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_mid_step_only_delays_the_run() {
    // The draft answers after 3 s; PostgreSQL restarts meanwhile (its own server: the other tests
    // share one). A 10 s lease outlasts the restart, so no node gives the run up.
    let server = support::database::OwnServer::start();
    let (model, _) = model("writer", Duration::from_secs(3));
    let cluster = Cluster::on(server.url.clone(), 2, &model, "10").await;
    let (run_id, response) = cluster.nodes[0].post_run(&envelope()).await;
    let follower = {
        let node_b = &cluster.nodes[1];
        let request = node_b.http.get(node_b.url(&format!("/api/v1/flex/runs/{run_id}/stream")));
        request.send().await.unwrap()
    };
    while calls(&model, "writer") == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let restart = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    });
    let on_a = frames_until(response, "complete").await;
    let on_b = frames_until(follower, "complete").await;
    let _server = restart.await.unwrap();
    assert_finished_once(&cluster, &run_id, &on_a);
    assert_eq!(seqs(&on_b), seqs(&on_a), "the client on b lost nothing either");
    assert_eq!((calls(&model, "writer"), calls(&model, "editor")), (1, 1), "no step ran twice");
    let run = cluster.run(1, &run_id).await;
    assert_eq!((run["lease"]["epoch"].as_i64(), run["lease"]["crashAttempts"].as_i64()), (Some(1), Some(0)), "{run}");
    let log = cluster.nodes[0].log();
    assert!(log.contains("database writer reconnected"), "a's writer made a new connection:\n{log}");
    assert!(cluster.nodes[1].log().contains("LISTEN connection lost"), "b's listener was cut by the restart");
    // The restart ended the sessions holding the nodes' ids: each takes its own again.
    for node in &cluster.nodes {
        logged(node, "holding the node id again").await;
        assert_eq!(health(node).await["node"]["idHeld"], true);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_listen_connection_is_cut_catches_up() {
    let (model, _) = model("writer", Duration::from_millis(1500));
    let cluster = Cluster::start(2, &model).await;
    let (run_id, response) = cluster.nodes[0].post_run(&envelope()).await;
    let node_b = &cluster.nodes[1];
    let follower = node_b.http.get(node_b.url(&format!("/api/v1/flex/runs/{run_id}/stream"))).send().await.unwrap();
    while calls(&model, "writer") == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Cut b's LISTEN connection while the draft is in flight on a.
    let cut = "SELECT pg_terminate_backend(pid)::int AS n FROM pg_stat_activity \
               WHERE application_name = 'flexrun-listener node-b' AND datname = current_database()";
    assert_eq!(sum(&mut cluster.db(), cut), 1, "b listens on one connection");
    let on_a = frames_until(response, "complete").await;
    let on_b = frames_until(follower, "complete").await;
    assert_eq!(seqs(&on_b), seqs(&on_a), "b's client caught up with every frame, once each");
    assert_finished_once(&cluster, &run_id, &on_b);
    assert!(node_b.log().contains("LISTEN connection lost"));
    // And b listens again.
    let listening = "SELECT COUNT(*)::int AS n FROM pg_stat_activity WHERE application_name = 'flexrun-listener node-b' AND datname = current_database()";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sum(&mut cluster.db(), listening) != 1 {
        assert!(std::time::Instant::now() < deadline, "b's listener did not come back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_killed_mid_step_takes_its_run_back_at_once_when_restarted() {
    // The default node id and lease (30 s): the restarted node proves, by taking its id, that the
    // process which leased the run is gone, and does not wait for the lease to run out.
    let (model, _) = model("editor", Duration::from_secs(600));
    let mut cluster = Cluster::of(support::database::fresh_postgres(), &model, &[vec![]]).await;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let health = health(&cluster.nodes[0]).await;
    let node = format!("{host}-{}", cluster.nodes[0].port());
    assert_eq!((&health["node"]["id"], &health["node"]["leaseSeconds"]), (&json!(node), &json!(30)), "{health}");
    assert_eq!(health["node"]["idHeld"], true);
    let (run_id, response) = cluster.nodes[0].post_run(&envelope()).await;
    let before = frames_until(response, "node_complete").await;
    while calls(&model, "editor") == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.nodes[0].kill();
    let killed = std::time::Instant::now();
    cluster.nodes[0].restart().await;
    let after = cluster.nodes[0].reattach(&run_id, before.last().unwrap().seq).await;
    let recovered = killed.elapsed();
    assert!(recovered < Duration::from_secs(10), "the run waited for its 30 s lease: {recovered:?}");
    assert_finished_once(&cluster, &run_id, &[before, after].concat());
    assert_eq!(calls(&model, "writer"), 1, "the completed draft is not written again");
    assert_eq!(calls(&model, "editor"), 2, "the polish in flight when the node was killed runs again, once");
    let run = cluster.run(0, &run_id).await;
    assert_eq!(run["lease"]["epoch"], 2, "taken back once, under a new epoch: {run}");
    assert_eq!(run["lease"]["crashAttempts"], 1, "a killed node is a crash: {run}");
    let metrics = metrics(&cluster.nodes[0]).await;
    assert!(metrics.contains("flexrun_lease_claims_total{why=\"restart\"} 1"), "{metrics}");
    assert!(metrics.contains("flexrun_lease_claims_total{why=\"stale\"} 0"), "{metrics}");
}

/// A run whose node dies in the same step again and again is failed at the third crash
/// (`crash_limit_reached`), with that step: it ends as failed, not left running in an ended run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_keeps_killing_its_node_is_failed_with_its_step() {
    let slow = StandIn::start(script(|call| match (call.is_planner(), call.capability_id()) {
        (true, _) => plan(&[("draft", "writer"), ("polish", "editor")]),
        (false, Some("editor")) => post(0.9).after(Duration::from_secs(600)),
        _ => post(0.9),
    }))
    .unwrap();
    let mut cluster = Cluster::of(support::database::fresh_postgres(), &slow, &[vec![]]).await;
    let (run_id, _response) = cluster.nodes[0].post_run(&envelope()).await;
    for crashes in 1..=3 {
        while calls(&slow, "editor") < crashes {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cluster.nodes[0].kill();
        cluster.nodes[0].restart().await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cluster.run(0, &run_id).await["run"]["status"] != "failed" {
        assert!(std::time::Instant::now() < deadline, "{}", cluster.run(0, &run_id).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = cluster.log(&run_id);
    let ending: Vec<&str> = log.iter().rev().take(2).rev().map(|(_, kind)| kind.as_str()).collect();
    assert_eq!(ending, ["node_error", "complete"], "{log:?}");
    let run = cluster.run(0, &run_id).await;
    assert_eq!(
        (&run["run"]["status"], &run["run"]["error"]["code"]),
        (&json!("failed"), &json!("crash_limit_reached"))
    );
    assert_eq!(run["lease"]["crashAttempts"], 3, "{run}");
    let nodes: Vec<(&Value, &Value)> =
        run["nodes"].as_array().unwrap().iter().map(|n| (&n["nodeId"], &n["status"])).collect();
    assert_eq!(nodes, [(&json!("draft"), &json!("completed")), (&json!("polish"), &json!("failed"))]);
    assert_eq!(calls(&slow, "editor"), 3, "tried three times, not a fourth");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_with_the_same_node_id_refuses_to_start_and_the_first_serves_on() {
    // Node a's polish answers after 5 s; a second process named node-a is started meanwhile.
    let (model, _) = model("editor", Duration::from_secs(5));
    let cluster = Cluster::on(support::database::fresh_postgres(), 1, &model, "30").await;
    let (run_id, response) = cluster.nodes[0].post_run(&envelope()).await;
    while calls(&model, "editor") == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let env = [("FLEXRUN_DATABASE_URL", cluster.url.as_str()), ("FLEXRUN_NODE_ID", "node-a")];
    let (status, log) = ServerProcess::refused(dir.path(), &model.base_url, &default_capabilities(), &env).await;
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains(
            "flexrun: node id `node-a` is in use: another live flexrun process on this database goes by it. \
             Give this process a node id of its own with FLEXRUN_NODE_ID (or `cluster.node_id`)."
        ),
        "{log}"
    );
    assert!(!log.contains("flexrun listening") && !log.contains("joining the cluster"), "it served nothing:\n{log}");
    // Node a's run goes on as if nothing happened: the refused process claimed nothing.
    let frames = read_frames(response, usize::MAX).await;
    assert_finished_once(&cluster, &run_id, &frames);
    assert_eq!((calls(&model, "writer"), calls(&model, "editor")), (1, 1), "no step ran twice");
    let run = cluster.run(0, &run_id).await;
    assert_eq!((run["lease"]["epoch"].as_i64(), run["lease"]["crashAttempts"].as_i64()), (Some(1), Some(0)), "{run}");
    let health = health(&cluster.nodes[0]).await;
    assert_eq!(
        (&health["status"], &health["node"]["id"], &health["node"]["idHeld"]),
        (&json!("healthy"), &json!("node-a"), &json!(true))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_id_lock_connection_is_cut_takes_its_id_again_or_stops_if_another_took_it() {
    let (model, _) = model("writer", Duration::from_millis(1500));
    let mut cluster = Cluster::start(1, &model).await;
    let lock_session = "application_name = 'flexrun-identity node-a' AND datname = current_database()";
    let cut = format!("SELECT pg_terminate_backend(pid)::int AS n FROM pg_stat_activity WHERE {lock_session}");
    let held = format!(
        "SELECT COUNT(*)::int AS n FROM pg_locks JOIN pg_stat_activity USING (pid) \
         WHERE locktype = 'advisory' AND granted AND {lock_session}"
    );
    assert_eq!(sum(&mut cluster.db(), &held), 1, "node a holds its id");

    // Cut while a step is in flight: the run goes on, and a takes its id again.
    let (run_id, response) = cluster.nodes[0].post_run(&envelope()).await;
    while calls(&model, "writer") == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(sum(&mut cluster.db(), &cut), 1);
    let frames = read_frames(response, usize::MAX).await;
    assert_finished_once(&cluster, &run_id, &frames);
    assert_eq!(cluster.run(0, &run_id).await["lease"]["epoch"], 1, "no node claimed the run");
    logged(&cluster.nodes[0], "holding the node id again").await;
    assert_eq!(sum(&mut cluster.db(), &held), 1, "on a new connection");
    assert_eq!(health(&cluster.nodes[0]).await["node"]["idHeld"], true);

    // Cut, and another session takes the id before a can: a stops rather than share it.
    let key = flexrun::run::lease::identity::lock_key("node-a");
    let mut other = cluster.db();
    diesel::connection::SimpleConnection::batch_execute(&mut other, &format!("{cut}; SELECT pg_advisory_lock({key})"))
        .unwrap();
    let status = cluster.nodes[0].exited(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(2));
    let log = cluster.nodes[0].log();
    assert!(
        log.contains(
            "flexrun: node id `node-a` was taken by another flexrun process while this one's connection to \
             PostgreSQL was lost; two processes may not share a node id, so this one stops"
        ),
        "{log}"
    );
    // Once the other lets go, a starts again under its id.
    drop(other);
    cluster.nodes[0].restart().await;
    assert_eq!(health(&cluster.nodes[0]).await["node"]["idHeld"], true);
}

/// LangGraph's `multitask_strategy: reject` across nodes: starts raced on one thread through two
/// nodes make one run; every other start is refused `thread_busy` (409), and a start after that
/// run has ended is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_raced_on_one_thread_through_two_nodes_make_one_run() {
    // The planner answers after 1.5 s: the first run is still planning while the others race it.
    let model = StandIn::start(script(|call: &ChatCall| {
        if call.is_planner() {
            return plan(&[("draft", "writer")]).after(Duration::from_millis(1500));
        }
        post(0.9)
    }))
    .unwrap();
    let cluster = Cluster::start(2, &model).await;
    let (a, b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let created = a.http.post(a.url("/threads")).json(&json!({})).send().await.unwrap();
    assert_eq!(created.status(), 200);
    let thread: Value = created.json().await.unwrap();
    let runs_path = format!("/threads/{}/runs", thread["thread_id"].as_str().unwrap());
    let body = json!({"assistant_id": "flex", "input": envelope()});
    let starts = (0..16).map(|i| {
        let node = if i % 2 == 0 { a } else { b };
        node.http.post(node.url(&runs_path)).json(&body).send()
    });
    let answers = futures::future::join_all(starts).await;
    let mut statuses = Vec::new();
    for answer in answers {
        let answer = answer.unwrap();
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap();
        if status == 409 {
            assert!(text.contains("\"thread_busy\""), "{text}");
        }
        statuses.push(status);
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "one start taken: {statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 409).count(), 15, "the others refused: {statuses:?}");
    let on_thread = |cluster: &Cluster| {
        let id = thread["thread_id"].as_str().unwrap().replace('\'', "''");
        sum(&mut cluster.db(), &format!("SELECT count(*)::int AS n FROM runs WHERE thread_id = '{id}'"))
    };
    assert_eq!(on_thread(&cluster), 1, "one run stored on the thread");

    // Once that run has ended the thread takes the next start, on either node.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let thread_path = format!("/threads/{}", thread["thread_id"].as_str().unwrap());
        let thread_now: Value = b.http.get(b.url(&thread_path)).send().await.unwrap().json().await.unwrap();
        if thread_now["status"] == "idle" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the first run never ended: {thread_now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let next = b.http.post(b.url(&runs_path)).json(&body).send().await.unwrap();
    assert_eq!(next.status(), 200, "{}", next.text().await.unwrap());
    assert_eq!(on_thread(&cluster), 2);
}

/// The capability ids `node` lists (`GET /capabilities`).
async fn listed(node: &ServerProcess) -> Vec<String> {
    let list: Value = node.http.get(node.url("/api/v1/flex/capabilities")).send().await.unwrap().json().await.unwrap();
    list["capabilities"].as_array().unwrap().iter().map(|c| c["capabilityId"].as_str().unwrap().to_string()).collect()
}

/// Waits up to 5 s for `node` to list capability `id` (`offered`), or to no longer list it.
async fn listing(node: &ServerProcess, id: &str, offered: bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let ids = listed(node).await;
        if ids.iter().any(|listed| listed == id) == offered {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{id} offered: {}, expected {offered}: {ids:?}", !offered);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The CAPABILITIES table of the newest planner prompt.
fn offered_to_planner(model: &StandIn) -> String {
    let planner = model.calls().into_iter().rfind(ChatCall::is_planner).expect("a planner call");
    let table = planner.user.split("### CAPABILITIES\n").nth(1).expect("a CAPABILITIES section");
    table.split("\n\n###").next().unwrap().to_string()
}

/// A capability registered through one node is offered by the other without a restart — listed,
/// and in the CAPABILITIES table of a run's planner there — and no longer once unregistered
/// through the first. Node b checks the registrations only every minute: within the test's
/// bounds only the notification reaches it. A registration b's allowlist refuses is stored (a
/// allows it) but not offered by b, which says so and serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_registered_and_unregistered_through_one_node_is_offered_and_withdrawn_by_the_other() {
    let model = StandIn::start(planner_then(&[("draft", "writer")], post(0.9))).unwrap();
    let config = tempfile::tempdir().unwrap();
    let toml = config.path().join("flexrun.toml");
    std::fs::write(
        &toml,
        "[cluster]\npoll_millis = 60000\n\n[http_capabilities]\nallowed_url_prefixes = [\"http://127.0.0.1:9/allowed/\"]\n",
    )
    .unwrap();
    let toml = toml.display().to_string();
    let lease = [("FLEXRUN_LEASE_SECONDS", "2"), ("FLEXRUN_DRAIN_SECONDS", "10")];
    let a = [&lease[..], &[("FLEXRUN_NODE_ID", "node-a")]].concat();
    let b = [&lease[..], &[("FLEXRUN_NODE_ID", "node-b"), ("FLEXRUN_CONFIG", toml.as_str())]].concat();
    let cluster = Cluster::of(support::database::fresh_postgres(), &model, &[a, b]).await;
    let (node_a, node_b) = (&cluster.nodes[0], &cluster.nodes[1]);
    let register = |registration: Value| {
        node_a.http.post(node_a.url("/api/v1/flex/capabilities/register")).json(&registration).send()
    };

    let outsider =
        http_capability("outsider", &["brief"], &["notes"], json!({"type": "object"}), "http://127.0.0.1:9/elsewhere");
    assert_eq!(register(outsider).await.unwrap().status(), 201, "a allows any endpoint");
    let summariser = ai_capability("summariser", &["brief"], &["summary"], json!({"type": "object"}));
    assert_eq!(register(summariser).await.unwrap().status(), 201);
    listing(node_b, "summariser", true).await;
    let on_b = listed(node_b).await;
    assert!(!on_b.contains(&"outsider".to_string()), "b's allowlist refuses its endpoint: {on_b:?}");
    assert!(listed(node_a).await.contains(&"outsider".to_string()));
    let log = node_b.log();
    assert!(
        log.lines().any(|line| line.contains("stored capability registration is no longer valid") && line.contains("outsider")),
        "b said why it does not offer it:\n{log}"
    );

    // A run started on b: its planner is offered the new capability beside the others.
    let (run_id, response) = node_b.post_run(&envelope()).await;
    let frames = read_frames(response, usize::MAX).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed", "{:?}", kinds(&frames));
    assert_eq!(cluster.run(1, &run_id).await["lease"]["epoch"], 1, "b drove it");
    let table = offered_to_planner(&model);
    assert!(table.contains("| summariser |") && table.contains("| writer |"), "{table}");
    assert!(!table.contains("outsider"), "{table}");

    // Unregistered through a: b no longer offers it, to the next run's planner either.
    let removed = node_a.http.delete(node_a.url("/api/v1/flex/capabilities/summariser")).send().await.unwrap();
    assert_eq!(removed.status(), 200);
    listing(node_b, "summariser", false).await;
    let (_, response) = node_b.post_run(&envelope()).await;
    let frames = read_frames(response, usize::MAX).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed", "{:?}", kinds(&frames));
    let table = offered_to_planner(&model);
    assert!(!table.contains("summariser") && table.contains("| writer |"), "{table}");
    assert_eq!(health(node_b).await["status"], "healthy");
}

/// A registration written to the database without a notification (by hand, with SQL) is offered
/// within a few of the node's checks (every `cluster.poll_millis`, 1 s), and withdrawn once deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_written_without_a_notification_is_followed_by_the_nodes_check() {
    let model = StandIn::start(planner_then(&[("draft", "writer")], post(0.9))).unwrap();
    let cluster = Cluster::start(1, &model).await;
    let registration = ai_capability("by-hand", &["brief"], &["summary"], json!({"type": "object"}));
    let now = flexrun::store::now();
    let row = flexrun::store::capabilities::CapabilityRow {
        capability_id: "by-hand".into(),
        version: "1.0".into(),
        agent_type: flexrun::capability::ExecutorType::Ai,
        kind: flexrun::capability::CapabilityKind::Execution,
        registration: registration.to_string(),
        source: "sql".into(),
        registered_at: now,
        updated_at: now,
    };
    flexrun::store::capabilities::save(&mut cluster.db(), row).unwrap();
    listing(&cluster.nodes[0], "by-hand", true).await;
    assert!(flexrun::store::capabilities::remove(&mut cluster.db(), "by-hand").unwrap());
    listing(&cluster.nodes[0], "by-hand", false).await;
}

/// The sum of the integer column `n` over the rows of `query`.
fn sum(conn: &mut DbConn, query: &str) -> i32 {
    use diesel::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Integer)]
        n: i32,
    }
    diesel::sql_query(query).load::<Row>(conn).unwrap().iter().map(|row| row.n).sum()
}
