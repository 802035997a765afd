//! Clients that do not read cannot make the server hold a run's log for them: every replay and
//! read is bounded per client (a page of the log, a bounded run document, bounded LangGraph
//! values), and all of a node's slow readers together are bounded too, the slowest cut off
//! first. Over a run whose log is about 9 MB (10 outputs of 900 KB; `benches/slow_readers.rs`
//! measures the same over 27 MB).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use flexrun::llm::standin::{StandIn, script};
use support::process::ServerProcess;
use support::{HttpCapability, http_capability, plan, read_frames_within};

/// How long a 9 MB run may take in a debug build on a busy machine.
const PATIENCE: Duration = Duration::from_secs(300);

const OUTPUT_BYTES: usize = 900_000;

/// A model that plans `nodes` steps of the `big` capability.
fn planner(nodes: usize) -> flexrun::llm::standin::Script {
    let stages: Vec<(String, &str)> = (0..nodes).map(|i| (format!("s{i}"), "big")).collect();
    script(move |_| {
        let stages: Vec<(&str, &str)> = stages.iter().map(|(s, c)| (s.as_str(), *c)).collect();
        plan(&stages)
    })
}

/// The `big` capability and the endpoint answering every call with 900 KB.
fn big_capability() -> (HttpCapability, Value) {
    let output = json!({"text": "x".repeat(OUTPUT_BYTES), "quality_score": 0.9});
    let endpoint = HttpCapability::start(200, output);
    let schema = json!({"type": "object", "required": ["text", "quality_score"]});
    let registration = http_capability("big", &["brief"], &["post_copy"], schema, &endpoint.url);
    (endpoint, registration)
}

fn big_envelope() -> Value {
    let mut envelope = support::envelope();
    envelope["constraints"] = json!({"threadId": "big-thread"});
    envelope
}

/// The run's frames after `last_seen`, read to the end.
async fn reattach(server: &ServerProcess, run_id: &str, last_seen: u64) -> Vec<flexrun::events::ReceivedFrame> {
    let path = format!("/api/v1/flex/runs/{run_id}/stream");
    let response = server.http.get(server.url(&path)).header("last-event-id", last_seen.to_string()).send().await;
    read_frames_within(response.unwrap(), usize::MAX, PATIENCE).await
}

/// Opens a connection, sends `GET path`, and reads nothing.
async fn idle_reader(address: &str, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

#[tokio::test]
async fn a_hundred_clients_that_do_not_read_hold_a_bounded_amount_of_memory() {
    let model = StandIn::start(planner(10)).unwrap();
    let (_endpoint, capability) = big_capability();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &model.base_url, &[capability], &[]).await;
    let (run_id, response) = server.post_run(&big_envelope()).await;
    let frames = read_frames_within(response, usize::MAX, PATIENCE).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let log_bytes: usize = support::event_log(dir.path(), &run_id).iter().map(|(_, _, f)| f.to_string().len()).sum();
    assert!(log_bytes > 9_000_000, "a log of {log_bytes} bytes");

    let address = server.base.trim_start_matches("http://").to_string();
    let before = server.resident_bytes();
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(idle_reader(&address, &format!("/api/v1/flex/runs/{run_id}/stream")).await);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = server.resident_bytes();
    let grown = during.saturating_sub(before) >> 20;
    eprintln!("100 idle readers of a {log_bytes}-byte log: {} → {} MiB", before >> 20, during >> 20);
    // Unbounded, each replay held a page of 500 frames — the whole 9 MB log here, 900 MiB for
    // these readers. Now each holds a page of the log or the rest of an event, and all of them
    // together at most `limits.stream_backlog_bytes` (64 MiB): 64 MiB, plus a page of at most
    // 256 KiB per reader read from the database (its text, then its frames: 50 MiB for 100), plus
    // what the allocator keeps of pages already sent. Measured 120-170 MiB on a loaded machine,
    // and 164-223 MiB in back-to-back runs of one build on 2026-11-26: how much the allocator
    // keeps varies with how the readers' pages interleave. The bound stays far below the 900 MiB
    // the unbounded replay held.
    assert!(grown < 320, "100 idle readers grew the server by {grown} MiB");
    drop(idle);

    // A client that reads gets everything.
    let replay = reattach(&server, &run_id, 0).await;
    let seqs: Vec<u64> = replay.iter().map(|f| f.seq).collect();
    assert_eq!(seqs, (1..=frames.len() as u64).collect::<Vec<_>>(), "every frame once, in order");
}

/// The run document, a page of events and a LangGraph `values` stream are bounded whatever the
/// run's outputs weigh, and say where what they left out can be read whole.
#[tokio::test]
async fn reads_of_a_large_run_are_bounded_and_link_to_what_they_leave_out() {
    let model = StandIn::start(planner(10)).unwrap();
    let (_endpoint, capability) = big_capability();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path(), &model.base_url, &[capability], &[]).await;
    let (run_id, response) = server.post_run(&big_envelope()).await;
    let frames = read_frames_within(response, usize::MAX, PATIENCE).await;
    let text = |path: String| {
        let request = server.http.get(server.url(&path));
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    let whole_output = json!({"text": "x".repeat(OUTPUT_BYTES), "quality_score": 0.9}).to_string().len() as u64;

    let document = text(format!("/api/v1/flex/runs/{run_id}")).await;
    assert!(document.len() < 2_500_000, "a run document of {} bytes", document.len());
    let document: Value = serde_json::from_str(&document).unwrap();
    let elided = &document["nodes"][0]["output"]["$elided"];
    assert_eq!(elided["bytes"].as_u64(), Some(whole_output));
    let href = elided["href"].as_str().unwrap().to_string();
    let whole: Value = serde_json::from_str(&text(href.clone()).await).unwrap();
    assert_eq!(whole["value"]["text"].as_str().map(str::len), Some(OUTPUT_BYTES), "{href}");
    let nowhere = text(format!("/api/v1/flex/runs/{run_id}/value?pointer=/envelope")).await;
    assert!(nowhere.contains("value_not_found"), "only the places values are left out: {nowhere}");

    let page: Value =
        serde_json::from_str(&text(format!("/api/v1/flex/runs/{run_id}/events?limit=1000")).await).unwrap();
    let events = page["events"].as_array().unwrap();
    assert!(events.len() < frames.len() && page["hasMore"] == true, "a page of {} frames", events.len());
    let shown: usize = events.iter().map(|e| e.to_string().len()).sum();
    assert!(shown < 1_000_000 || events.len() == 1, "a page of {shown} bytes");

    let path = format!("/threads/big-thread/runs/{run_id}/stream?stream_mode=values&stream_mode=updates");
    let stream = text(path).await;
    let mut values = 0;
    for event in stream.split("\n\n") {
        let kind = event.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or_default();
        let data = event.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or_default();
        match kind {
            "values" => {
                values += 1;
                assert!(data.len() < 400_000, "a values event of {} bytes", data.len());
            }
            "updates" if data.contains("\"output\"") => {
                assert!(data.len() as u64 > whole_output, "an update carries its node's output whole");
            }
            _ => {}
        }
    }
    assert!(values >= 10, "{values} values events");
}

/// A client cut off for reading too slowly re-attaches where it stopped and misses nothing.
#[tokio::test]
async fn the_slowest_readers_are_cut_off_and_lose_nothing_when_they_re_attach() {
    let model = StandIn::start(planner(10)).unwrap();
    let (_endpoint, capability) = big_capability();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("flexrun.toml");
    // Room for about two 900 KB frames, node-wide.
    std::fs::write(&config, "[limits]\nstream_backlog_bytes = 2000000\n").unwrap();
    let config = config.display().to_string();
    let server = ServerProcess::start(dir.path(), &model.base_url, &[capability], &[("FLEXRUN_CONFIG", &config)]).await;
    let (run_id, response) = server.post_run(&big_envelope()).await;
    let frames = read_frames_within(response, usize::MAX, PATIENCE).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let cuts = || async {
        let metrics = server.http.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
        let line = metrics.lines().find_map(|l| l.strip_prefix("flexrun_slow_readers_cut_total "));
        line.map_or(0.0, |v| v.parse::<f64>().unwrap())
    };

    let address = server.base.trim_start_matches("http://").to_string();
    let path = format!("/api/v1/flex/runs/{run_id}/stream");
    let mut first = idle_reader(&address, &path).await;
    let mut others = Vec::new();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        others.push(idle_reader(&address, &path).await);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(cuts().await >= 1.0, "a backlog beyond the node's bound cut off the slowest reader");

    // The first (slowest) reader reads now: its stream ends early, after the frames it had.
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), first.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the cut stream ends");
    let text = String::from_utf8_lossy(&received);
    let ids = text.lines().filter_map(|l| l.strip_prefix("id: ")).filter_map(|id| id.parse::<u64>().ok());
    let last_id = ids.max().unwrap_or(0);
    assert!(last_id < frames.len() as u64, "cut before the end ({last_id} of {})", frames.len());
    drop(others);
    let rest = reattach(&server, &run_id, last_id).await;
    let seqs: Vec<u64> = rest.iter().map(|f| f.seq).collect();
    assert_eq!(seqs, ((last_id + 1)..=frames.len() as u64).collect::<Vec<_>>(), "the rest, once each");
}
