//! Runs stored by an earlier flexrun still read and resume.
//!
//! `tests/fixtures/runs-75622db.sql` is a SQLite database written by flexrun at 75622db — before a
//! run's `start` frame recorded the inputs and replan caps it was started with — dumped as SQL:
//! the demo run (completed after a repair replan), a run paused on its plan approval with
//! `policies.replan.maxReplans: 3` and an input of its own, and a completed run with
//! `maxReplans: 5, maxGoalConditionReplans: 1`. Today's `flexrun serve` (real process, real
//! SQLite file) migrates it, lists and shows those runs with the caps and context their
//! envelopes gave them, replays their logs as stored, and drives the paused one to its end.
//!
//! The fixture is SQLite's, so this test runs on SQLite in both passes of `scripts/test`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

mod support;

use std::path::{Path, PathBuf};

use diesel::Connection;
use diesel::connection::SimpleConnection;
use flexrun::events::ReceivedFrame;
use flexrun::store::DbConn;
use serde_json::{Value, json};
use support::process::ServerProcess;
use support::*;

const DEMO_RUN: &str = "01a217bd-b66b-75fb-be9c-f67402c4148b";
const PAUSED_RUN: &str = "01a217bd-d7e8-745f-ad9a-e4e6b98b7621";
const PAUSED_REQUEST: &str = "01a217bd-d7f0-7127-9966-4df6f17e11f7";
const CAPPED_RUN: &str = "01a217bd-d81c-74ac-819c-bd93d5098943";

fn crate_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn sqlite_path(dir: &Path) -> PathBuf {
    dir.join("legacy.db")
}

/// The fixture's database, made in `dir` from its SQL dump.
fn legacy_database(dir: &Path) {
    let dump = std::fs::read_to_string(crate_path("tests/fixtures/runs-75622db.sql")).unwrap();
    let path = sqlite_path(dir);
    let mut db = DbConn::establish(path.to_str().unwrap()).unwrap();
    db.batch_execute(&dump).unwrap();
}

fn connect(dir: &Path) -> DbConn {
    DbConn::establish(sqlite_path(dir).to_str().unwrap()).unwrap()
}

/// The run's frames as stored, in `seq` order.
fn stored_frames(dir: &Path, run_id: &str) -> Vec<String> {
    let mut db = connect(dir);
    let frames = flexrun::store::events::after(&mut db, run_id, flexrun::events::Seq::ZERO, i64::MAX).unwrap();
    frames.into_iter().map(|f| f.json.to_string()).collect()
}

/// The example capabilities the fixture's runs were planned with (`config/capabilities/`).
fn demo_capabilities() -> Vec<Value> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(crate_path("config/capabilities")).unwrap().map(|entry| entry.unwrap().path()).collect();
    files.sort();
    files.iter().map(|path| serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()).collect()
}

/// Approves the paused run's request `request_id`: the frames it streams until the run ends or
/// waits again.
async fn approve(server: &ServerProcess, request_id: &str) -> Vec<ReceivedFrame> {
    let body = json!({"runId": PAUSED_RUN, "decision": {"requestId": request_id, "approved": true}});
    let response = server.http.post(server.url("/api/v1/flex/run.resume")).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    read_frames(response, usize::MAX).await
}

async fn get(server: &ServerProcess, path: &str) -> Value {
    let response = server.http.get(server.url(path)).send().await.unwrap();
    assert_eq!(response.status(), 200, "GET {path}");
    response.json().await.unwrap()
}

/// The replan budget a run's document shows: (maxReplans, maxGoalConditionReplans).
fn caps(view: &Value) -> (u64, u64) {
    let budget = &view["run"]["replanBudget"];
    (budget["maxReplans"].as_u64().unwrap(), budget["maxGoalConditionReplans"].as_u64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_stored_before_start_recorded_inputs_and_caps_read_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    legacy_database(dir.path());
    let before: Vec<Vec<String>> =
        [DEMO_RUN, PAUSED_RUN, CAPPED_RUN].iter().map(|r| stored_frames(dir.path(), r)).collect();
    assert!(!before[0][0].contains("replanLimits"), "the fixture's logs predate the recorded caps");

    let model = flexrun::llm::standin::StandIn::start(flexrun::cli::demo_script()).unwrap();
    let url = format!("sqlite://{}", sqlite_path(dir.path()).display());
    let env = [("FLEXRUN_DATABASE_URL", url.as_str())];
    let server = ServerProcess::start(dir.path(), &model.base_url, &demo_capabilities(), &env).await;

    // A run started today, for the configured caps and what a new `start` records.
    let envelope =
        serde_json::from_str::<Value>(&std::fs::read_to_string(crate_path("examples/demo-envelope.json")).unwrap())
            .unwrap();
    let (new_run, response) = server.post_run(&envelope).await;
    let frames = read_frames(response, usize::MAX).await;
    assert_eq!(frames.last().unwrap().payload["status"], "completed");
    let start = &frames[0].payload;
    assert_eq!(start["inputs"], envelope["inputs"], "a new run's start records its inputs");
    let configured = get(&server, &format!("/api/v1/flex/runs/{new_run}")).await;
    let configured = caps(&configured).0;
    assert_eq!(start["replanLimits"]["maxReplans"], configured);

    // The list shows each old run's cap as its envelope set it.
    let list = get(&server, "/api/v1/flex/runs?limit=10").await;
    let listed = |run_id: &str| {
        let entry = list["runs"].as_array().unwrap().iter().find(|r| r["runId"] == run_id).cloned();
        entry.unwrap_or_else(|| panic!("{run_id} is not listed: {list}"))["maxReplans"].clone()
    };
    assert_eq!(listed(PAUSED_RUN), 3);
    assert_eq!(listed(CAPPED_RUN), 5);
    assert_eq!(listed(DEMO_RUN), configured);

    // Each old run's document: the caps of its envelope, the context its inputs seeded.
    let capped = get(&server, &format!("/api/v1/flex/runs/{CAPPED_RUN}")).await;
    assert_eq!(capped["run"]["status"], "completed");
    assert_eq!(caps(&capped), (5, 1));
    assert_eq!(capped["run"]["replanBudget"]["used"]["goalCondition"], 1);
    let demo = get(&server, &format!("/api/v1/flex/runs/{DEMO_RUN}")).await;
    assert_eq!(caps(&demo), (configured, 2));
    // Its nodes are folded from its log (the table that kept them is gone), outputs and all.
    let nodes: Vec<(u64, &str, &str, bool)> = demo["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let (version, id, status) =
                (n["planVersion"].as_u64().unwrap(), n["nodeId"].as_str().unwrap(), n["status"].as_str().unwrap());
            (version, id, status, n["output"].is_object())
        })
        .collect();
    let expected = [
        (1, "audience"),
        (1, "draft"),
        (1, "review"),
        (2, "audience"),
        (2, "draft"),
        (2, "review"),
        (2, "polish"),
        (2, "final_review"),
    ];
    assert_eq!(nodes, expected.map(|(version, id)| (version, id, "completed", true)), "{}", demo["nodes"]);
    assert_eq!(demo["planVersions"].as_array().unwrap().len(), 2, "the plans are read from the log");
    let paused = get(&server, &format!("/api/v1/flex/runs/{PAUSED_RUN}")).await;
    assert_eq!(paused["run"]["status"], "awaiting_hitl");
    assert_eq!(caps(&paused).0, 3);
    let seeded = paused["context"].to_string();
    assert!(seeded.contains("seeded from the envelope"), "the paused run's context lacks its input: {seeded}");

    // Their logs replay as stored: nothing was rewritten.
    let replayed = read_frames(
        server.http.get(server.url(&format!("/api/v1/flex/runs/{DEMO_RUN}/stream"))).send().await.unwrap(),
        usize::MAX,
    )
    .await;
    assert_eq!(replayed.len(), before[0].len());
    for (run_id, frames) in [DEMO_RUN, PAUSED_RUN, CAPPED_RUN].iter().zip(&before) {
        assert_eq!(&stored_frames(dir.path(), run_id), frames, "{run_id}'s log changed");
    }

    // The paused run resumes: approved, it runs its plan and asks for the repair plan's approval
    // (the envelope wants every plan approved); approved again, it completes.
    let resumed = approve(&server, PAUSED_REQUEST).await;
    let asked = resumed.last().unwrap();
    assert_eq!(asked.kind, "hitl_request", "{:?}", kinds(&resumed));
    assert!(kinds(&resumed).contains(&"goal_condition_failed"), "{:?}", kinds(&resumed));
    let repaired = approve(&server, asked.payload["request"]["id"].as_str().unwrap()).await;
    let end = repaired.last().unwrap();
    assert_eq!((end.kind.as_str(), end.payload["status"].as_str()), ("complete", Some("completed")));
    let log = stored_frames(dir.path(), PAUSED_RUN);
    assert_eq!(log[..before[1].len()], before[1][..], "the resumed run's old frames are kept as they were");
    assert_eq!(resumed[0].seq as usize, before[1].len() + 1, "the resumed frames follow the old ones without a gap");
    let done = get(&server, &format!("/api/v1/flex/runs/{PAUSED_RUN}")).await;
    assert_eq!(done["run"]["replanBudget"]["used"]["total"], 1);
    assert!(done["context"].to_string().contains("seeded from the envelope"));
    assert_eq!(server.log().lines().filter(|l| l.contains("ERROR")).count(), 0, "{}", server.log());
}
