//! The LangGraph-compatible API driven by the unmodified official Python SDK (`langgraph-sdk`,
//! pinned in scripts/test), against the real server, a real SQLite file and a stand-in model on
//! loopback. Each test runs one scenario of tests/langgraph/drive.py and checks what the SDK saw
//! against the run's event log, the database and the model's calls.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code states what it expects.

mod support;

use std::process::Stdio;
use std::time::Duration;

use flexrun::llm::standin::StandIn;
use serde_json::{Value, json};
use support::*;
use tokio::io::{AsyncBufReadExt, BufReader};

fn python() -> String {
    std::env::var("FLEXRUN_LANGGRAPH_PYTHON").unwrap_or_else(|_| {
        panic!(
            "FLEXRUN_LANGGRAPH_PYTHON is not set: run the tests with scripts/test, which installs langgraph-sdk \
             into target/test-tools/langgraph-venv and points this variable at its python"
        )
    })
}

fn driver(scenario: &str, base: &str, args: &Value) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(python());
    command
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/langgraph/drive.py"))
        .args([scenario, base, &args.to_string()])
        .env_remove("LANGGRAPH_API_KEY")
        .env_remove("LANGSMITH_API_KEY")
        .env_remove("LANGCHAIN_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs a scenario to its end: what it printed last, as JSON.
async fn drive(scenario: &str, base: &str, args: Value) -> Value {
    let output = tokio::time::timeout(Duration::from_secs(120), driver(scenario, base, &args).output())
        .await
        .expect("the scenario ends within 2 minutes")
        .expect("python starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "scenario {scenario} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("the scenario prints JSON last")
}

/// The `custom` events' frames: (seq, type), in order.
fn custom_frames(parts: &Value) -> Vec<(u64, String)> {
    parts
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["event"] == "custom")
        .map(|p| (p["data"]["seq"].as_u64().unwrap(), p["data"]["type"].as_str().unwrap().to_string()))
        .collect()
}

fn events(parts: &Value) -> Vec<&str> {
    parts.as_array().unwrap().iter().map(|p| p["event"].as_str().unwrap()).collect()
}

fn log_frames(server: &TestServer, run_id: &str) -> Vec<(u64, String)> {
    server.event_log(run_id).into_iter().map(|(seq, kind, _)| (seq, kind)).collect()
}

/// A run streamed to its end in values, updates and custom: metadata first, every flex frame once
/// in order with its seq as the event id, the repair replan visible as a second plan, the final
/// values completed, then `end`; the thread, its state, runs, search and history agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_streams_to_completion_with_its_repair_replan() {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let seen = drive("stream", &server.base, json!({"input": envelope()})).await;
    let parts = &seen["parts"];
    let names = events(parts);
    assert_eq!(names.first(), Some(&"metadata"));
    assert_eq!(names.last(), Some(&"end"));
    let run_id = parts[0]["data"]["run_id"].as_str().unwrap().to_string();
    assert_eq!(seen["created"]["run_id"], run_id.as_str(), "Content-Location names the run");
    assert_eq!(seen["created"]["thread_id"], seen["thread_id"]);

    let frames = custom_frames(parts);
    assert_eq!(frames, log_frames(&server, &run_id), "every frame once, in order");
    for p in parts.as_array().unwrap().iter().filter(|p| p["event"] == "custom") {
        assert_eq!(p["id"].as_str().unwrap(), p["data"]["seq"].to_string(), "the event id is the frame's seq");
    }
    let plans: Vec<u64> =
        parts.as_array().unwrap().iter().filter_map(|p| p["data"]["planner"]["planVersion"].as_u64()).collect();
    assert_eq!(plans, vec![1, 2], "the repair replan is an update of its own");
    let values: Vec<&Value> = parts.as_array().unwrap().iter().filter(|p| p["event"] == "values").collect();
    let last = values.last().unwrap()["data"].clone();
    assert_eq!((last["status"].as_str(), last["planVersion"].as_u64()), (Some("completed"), Some(2)));
    assert_eq!(last["outputs"]["polish"]["quality_score"], 0.9);
    assert_eq!(last["goalConditionResults"][0]["satisfied"], true);
    assert_eq!(parts.as_array().unwrap().last().unwrap()["data"]["status"], "success");

    assert_eq!(seen["state"]["values"]["status"], "completed");
    assert_eq!(seen["state"]["next"], json!([]));
    assert_eq!(seen["thread"]["status"], "idle");
    assert_eq!(seen["thread"]["metadata"]["graph_id"], "flex");
    assert_eq!(seen["runs"][0]["status"], "success");
    assert_eq!(seen["runs"].as_array().unwrap().len(), 1);
    assert_eq!(seen["search"].as_array().unwrap().len(), 1);
    assert_eq!(seen["history"][0]["values"]["runId"], run_id.as_str());
    assert_eq!(server.planner_calls().len(), 2);
}

/// A plan approval is an interrupt: the stream ends `interrupted` with it, the state shows the
/// nodes to run next and the interrupt (with the plan and the Agent Inbox fields); a resume with
/// feedback (an Agent Inbox response) plans again, and `true` approves v2, which completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_interrupt_is_resumed_with_a_rejection_then_an_approval() {
    let server = TestServer::start(feedback_replan_script()).await;
    let gated = gated_envelope();
    let resumes = json!([[{"type": "response", "args": "add a polish step"}], true]);
    let seen = drive("interrupt_and_resume", &server.base, json!({"input": gated, "resumes": resumes})).await;
    let rounds = seen["rounds"].as_array().unwrap();

    let first = &rounds[0];
    let updates: Vec<&Value> = first["parts"].as_array().unwrap().iter().filter(|p| p["event"] == "updates").collect();
    let interrupt = &updates.last().unwrap()["data"]["__interrupt__"][0];
    assert_eq!(interrupt["value"]["kind"], "approval");
    assert_eq!(interrupt["value"]["planVersion"], 1);
    assert_eq!(interrupt["value"]["plan"]["nodes"][0]["capabilityId"], "writer");
    assert_eq!(interrupt["value"]["action_request"]["action"], "approve");
    assert_eq!(interrupt["value"]["config"]["allow_accept"], true);
    assert_eq!(first["parts"].as_array().unwrap().last().unwrap()["data"]["status"], "interrupted");
    assert_eq!(first["state"]["next"], json!(["draft"]));
    assert_eq!(first["state"]["interrupts"][0]["id"], interrupt["id"]);
    assert_eq!(first["thread"]["status"], "interrupted");
    let waiting = first["parts"].as_array().unwrap().iter().rev().find(|p| p["event"] == "values").unwrap();
    assert_eq!(waiting["data"]["outputs"], json!({}), "nothing runs before the approval");

    // Rejected with feedback: v2 is planned with it, and waits for approval again.
    let second = &rounds[1];
    let waiting = second["parts"].as_array().unwrap().iter().rev().find(|p| p["type"] == "values").unwrap();
    assert_eq!(waiting["interrupts"][0]["value"]["planVersion"], 2, "SDK v2 parts carry the interrupt");
    assert!(server.planner_calls().last().unwrap().user.contains("add a polish step"));
    assert_eq!(second["state"]["next"], json!(["draft", "polish"]));

    // Approved: v2 runs to the end.
    let third = &rounds[2];
    assert_eq!(third["state"]["values"]["status"], "completed");
    assert_eq!(third["state"]["interrupts"], json!([]));
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM hitl_decisions WHERE decision = 'approved'"), 1);
    assert_eq!(server.capability_calls("editor"), 1);
}

/// A budget reached is an interrupt (`raise_budget`, with the limit reached); a resume that
/// raises the limit — an Agent Inbox `edit` of the action (as Agent Chat UI sends it: the action
/// request's args, a budget added), or a flex decision — lets the same run go on with the step
/// that was held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_interrupt_is_resumed_with_a_raised_limit() {
    let server = TestServer::start(planner_then(&[("draft", "writer"), ("polish", "editor")], post(0.9))).await;
    let mut input = envelope();
    input["policies"] = json!({"budget": {"maxModelCalls": 1}});
    let edited = json!({"action": "raise_budget", "args": {"planVersion": 1, "budget": {"maxModelCalls": 2}}});
    let resumes = json!([[{"type": "edit", "args": edited}], {"approved": true, "budget": {"maxModelCalls": 5}}]);
    let seen = drive("interrupt_and_resume", &server.base, json!({"input": input, "resumes": resumes})).await;
    let rounds = seen["rounds"].as_array().unwrap();

    let first = &rounds[0];
    let interrupt = &first["state"]["interrupts"][0]["value"];
    assert_eq!(interrupt["kind"], "budget", "{first}");
    assert_eq!(interrupt["action_request"]["action"], "raise_budget");
    assert_eq!((&interrupt["context"]["limit"], &interrupt["context"]["spent"]), (&json!("modelCalls"), &json!(1)));
    assert_eq!(first["thread"]["status"], "interrupted");

    let second = &rounds[1];
    let interrupt = &second["state"]["interrupts"][0]["value"];
    assert_eq!((&interrupt["context"]["max"], &interrupt["context"]["spent"]), (&json!(2), &json!(2)), "{second}");
    assert_eq!(second["state"]["next"], json!(["polish"]));

    let third = &rounds[2];
    assert_eq!(third["state"]["values"]["status"], "completed", "{third}");
    assert_eq!(third["state"]["values"]["usage"]["calls"], 3);
    assert_eq!((server.capability_calls("writer"), server.capability_calls("editor")), (1, 1));
}

/// A background run, joined; its stream re-joined after `Last-Event-ID` gets exactly the frames
/// after it, and with `-1` all of them; `runs.wait` answers with the final values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_run_is_joined_and_its_stream_rejoined_after_an_event_id() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], post(0.9))).await;
    let seen = drive("background_and_join", &server.base, json!({"input": envelope(), "last_event_id": 3})).await;
    let run_id = seen["created"]["run_id"].as_str().unwrap();
    assert!(["pending", "running"].contains(&seen["created"]["status"].as_str().unwrap()));
    assert_eq!(seen["joined"]["status"], "completed");
    assert_eq!(seen["done"]["status"], "success");
    let log = log_frames(&server, run_id);
    assert_eq!(custom_frames(&seen["rest"]), log[3..].to_vec(), "exactly the frames after 3");
    assert_eq!(custom_frames(&seen["everything"]), log);
    assert_eq!(seen["waited"]["status"], "completed");
    assert_eq!(seen["waited"]["outputs"]["draft"]["quality_score"], 0.9);
}

/// The server is killed (SIGKILL) mid-run and started again: the SDK reconnects by itself through
/// `Location` with `Last-Event-ID` and sees every frame exactly once; no step ran twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_reconnects_by_itself_after_the_server_dies_mid_stream() {
    let model = StandIn::start(script(|call| {
        if call.is_planner() {
            return plan(&[("draft", "writer"), ("polish", "editor")]);
        }
        match call.capability_id() {
            Some("writer") => post(0.9).after(Duration::from_millis(200)),
            _ => post(0.9).after(Duration::from_millis(2000)),
        }
    }))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut server = process::ServerProcess::start(dir.path(), &model.base_url, &default_capabilities(), &[]).await;
    let args = json!({"input": envelope(), "announce_after": 6});
    let mut child = driver("reconnect", &server.base, &args).spawn().expect("python starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut last = String::new();
    let mut killed = false;
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("progress: received") && !killed {
                // Mid-run: the writer is done, the editor is running.
                server.kill();
                server.restart().await;
                killed = true;
            }
            last = line;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), read).await.expect("the scenario ends");
    let status = child.wait().await.unwrap();
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).await.unwrap();
    assert!(status.success(), "scenario failed: {last}\n{stderr}\n{}", server.log());
    assert!(killed, "the server was killed mid-stream");
    let seen: Value = serde_json::from_str(&last).unwrap();
    let frames = custom_frames(&seen["parts"]);
    let run_id = seen["parts"][0]["data"]["run_id"].as_str().unwrap();
    let log: Vec<(u64, String)> = event_log(dir.path(), run_id).into_iter().map(|(seq, kind, _)| (seq, kind)).collect();
    assert_eq!(frames, log, "every frame exactly once, across the restart");
    assert_eq!(log.last().unwrap().1, "complete");
    let writer_calls = model.calls().iter().filter(|c| c.capability_id() == Some("writer")).count();
    assert_eq!(writer_calls, 1, "the completed step did not run again");
}

/// A second run on a busy thread with `multitask_strategy="reject"` is refused with 409; the
/// running run is cancelled and reads `interrupted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_thread_refuses_a_second_run_and_a_run_is_cancelled() {
    let server =
        TestServer::start(planner_then(&[("draft", "writer")], post(0.9).after(Duration::from_secs(30)))).await;
    let seen = drive("cancel_and_busy", &server.base, json!({"input": envelope()})).await;
    assert_eq!(seen["busy"]["refused"], true);
    assert_eq!(seen["busy"]["status"], 409);
    assert_eq!(seen["thread_while_busy"]["status"], "busy");
    assert_eq!(seen["after_cancel"]["status"], "interrupted");
    let run_id = seen["run"]["run_id"].as_str().unwrap();
    server.wait_for_status(run_id, "cancelled").await;
    assert_eq!(server.count("SELECT COUNT(*) AS n FROM runs"), 1, "the refused run was not created");
}

/// A run that fails streams `error` (code and message) before `end`, and reads `error`; an
/// unknown assistant is a 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_run_streams_an_error_event() {
    let server = TestServer::start(planner_then(&[("draft", "writer")], Reply::error(400, "model refused"))).await;
    let seen = drive("failing", &server.base, json!({"input": envelope()})).await;
    let names = events(&seen["parts"]);
    assert_eq!(&names[names.len() - 2..], ["error", "end"]);
    let error = &seen["parts"][names.len() - 2]["data"];
    assert!(error["error"].as_str().unwrap().len() > 3, "a code: {error}");
    assert!(!error["message"].as_str().unwrap().is_empty());
    assert_eq!(seen["runs"][0]["status"], "error");
    assert_eq!(seen["thread"]["status"], "error");
    assert_eq!(seen["unknown_assistant"], json!({"refused": true, "status": 404}));
}

/// A stand-in that plans one `responder` step (messages → answer), which says how many human
/// messages it was given.
async fn chat_server() -> TestServer {
    let mut capabilities = default_capabilities();
    let answer = json!({"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}});
    capabilities.push(ai_capability("responder", &["messages"], &["answer"], answer));
    let options = Options { capabilities, ..Options::default() };
    let usage = |prompt: u64, completion: u64, cached: u64, reasoning: u64| {
        json!({"prompt_tokens": prompt, "completion_tokens": completion,
               "prompt_tokens_details": {"cached_tokens": cached},
               "completion_tokens_details": {"reasoning_tokens": reasoning}})
    };
    let script = script(move |call| {
        if call.is_planner() {
            return plan(&[("reply", "responder")]).usage(usage(100, 10, 0, 0));
        }
        let humans = call.user.matches("\"type\":\"human\"").count();
        Reply::json(json!({"text": format!("answered after {humans} messages")})).usage(usage(50, 5, 20, 2))
    });
    TestServer::start_with(script, options).await
}

/// A chat input becomes a run whose objective is the human message; the answer streams as an AI
/// message (`messages`), and `values.messages` keeps the conversation across runs of the thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_input_is_answered_with_an_ai_message() {
    let server = chat_server().await;
    let seen = drive("chat", &server.base, json!({"question": "Write a post about flexrun"})).await;
    assert_eq!(seen["assistants"][0]["assistant_id"], "flex");
    let message = seen["parts"].as_array().unwrap().iter().find(|p| p["event"] == "messages");
    let message = message.unwrap_or_else(|| panic!("no messages event: {}", seen["parts"]));
    assert_eq!(message["data"][0]["type"], "ai");
    assert!(message["data"][0]["content"].as_str().unwrap().contains("answered after 1 messages"), "{message}");
    // The run's two model calls, as LangChain's `usage_metadata`.
    let usage = json!({"input_tokens": 150, "output_tokens": 15, "total_tokens": 165,
                       "input_token_details": {"cache_read": 20}, "output_token_details": {"reasoning": 2}});
    assert_eq!(message["data"][0]["usage_metadata"], usage, "{message}");
    assert!(server.planner_calls()[0].user.contains("Write a post about flexrun"), "the message is the objective");
    let messages = seen["state"]["values"]["messages"].as_array().unwrap();
    let kinds: Vec<&str> = messages.iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["human", "ai", "human", "ai"], "the conversation so far");
    assert_eq!(messages[2]["content"], "And again?");
    assert_eq!(messages[3]["usage_metadata"], usage, "each answer carries its own run's usage");
    assert_eq!(seen["state"]["values"]["usage"]["calls"], 2, "values carry the run's usage");
    assert_eq!(seen["state"]["values"]["usage"]["inputTokens"], 150);
    assert!(
        messages[3]["content"].as_str().unwrap().contains("answered after 2 messages"),
        "the history reached the model"
    );
}

/// The official JS SDK, as `useStream` calls it: chat messages streamed in values,
/// messages-tuple and updates, the run learnt from `onRunCreated`, its stream re-joined from the
/// start, the thread's state read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_js_sdk_streams_a_chat_run_as_use_stream_does() {
    let modules = std::env::var("FLEXRUN_LANGGRAPH_JS").unwrap_or_else(|_| {
        panic!(
            "FLEXRUN_LANGGRAPH_JS is not set: run the tests with scripts/test, which installs @langchain/langgraph-sdk \
             into target/test-tools/langgraph-js and points this variable at it"
        )
    });
    // Node resolves the SDK from the script's folder: the script runs from beside node_modules.
    let script = std::path::Path::new(&modules).join("drive.mjs");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/langgraph/drive.mjs"), &script).unwrap();
    let server = chat_server().await;
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("node").arg(&script).args([&server.base, "Write a post"]).output(),
    )
    .await
    .expect("the JS scenario ends within a minute")
    .expect("node starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "JS scenario failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let names = events(&seen["parts"]);
    assert_eq!((names.first(), names.last()), (Some(&"metadata"), Some(&"end")), "{names:?}");
    let run_id = seen["parts"][0]["data"]["run_id"].as_str().unwrap();
    assert_eq!(seen["created"]["run_id"], run_id);
    assert_eq!(seen["created"]["thread_id"], seen["threadId"]);
    let message = seen["parts"].as_array().unwrap().iter().find(|p| p["event"] == "messages").unwrap();
    assert!(message["data"][0]["content"].as_str().unwrap().contains("answered after 1 messages"), "{message}");
    assert!(names.contains(&"updates"));
    let streamed: Vec<&Value> = seen["parts"].as_array().unwrap().iter().filter(|p| p["event"] == "values").collect();
    let rejoined: Vec<&Value> =
        seen["rejoined"].as_array().unwrap().iter().filter(|p| p["event"] == "values").collect();
    assert_eq!(rejoined, streamed, "the re-joined stream repeats the same values");
    assert_eq!(seen["state"]["values"]["messages"][1]["type"], "ai");
}

/// Time travel as LangGraph's guide does it: the history of a repaired run lists a checkpoint
/// per plan version and per completed step (and its last frame), newest first, each with its
/// values then and the one before it; a run from plan version 2's checkpoint reuses the draft and
/// runs only the polish, with no planner call; one with `command.update` runs the polish on the
/// draft it gives; one from the newest checkpoint (a `checkpoint` object) calls no model.
/// Checkpoints the thread does not have, and updates of what a run derives, are refused and
/// create nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_start_from_checkpoints_of_the_threads_history() {
    let server = TestServer::start(repair_script(0.5, 0.9)).await;
    let seen = drive("time_travel", &server.base, json!({"input": envelope()})).await;
    let parent = seen["parent"].as_str().unwrap().to_string();
    assert_eq!(server.planner_calls().len(), 2, "the repaired run planned twice, the forks never");

    // A checkpoint per plan_generated and node_complete, and the run's last frame, newest first.
    let log = log_frames(&server, &parent);
    let mut seqs: Vec<u64> =
        log.iter().filter(|(_, k)| k == "plan_generated" || k == "node_complete").map(|(s, _)| *s).collect();
    let last = log.last().unwrap().0;
    if seqs.last() != Some(&last) {
        seqs.push(last);
    }
    seqs.reverse();
    let history = seen["history"].as_array().unwrap();
    let ids: Vec<String> = history.iter().map(|s| s["checkpoint"]["checkpoint_id"].as_str().unwrap().into()).collect();
    assert_eq!(ids, seqs.iter().map(|s| format!("{parent}:{s}")).collect::<Vec<_>>());
    for pair in history.windows(2) {
        assert_eq!(pair[0]["parent_checkpoint"]["checkpoint_id"], pair[1]["checkpoint"]["checkpoint_id"]);
    }
    assert_eq!(history.last().unwrap()["parent_checkpoint"], Value::Null);
    assert_eq!(history[0]["checkpoint"], seen["state_before"]["checkpoint"], "the newest is the thread's state");
    assert!(history.iter().all(|s| s["checkpoint_id"] == s["checkpoint"]["checkpoint_id"]), "the guide's field");

    let v2 = history.iter().find(|s| s["checkpoint"]["checkpoint_id"] == seen["v2"]).unwrap();
    assert_eq!(
        (v2["metadata"]["frame"].as_str(), v2["metadata"]["planVersion"].as_u64()),
        (Some("plan_generated"), Some(2))
    );
    assert_eq!(v2["values"]["outputs"]["draft"]["quality_score"], 0.5);
    assert!(v2["values"]["outputs"].get("polish").is_none(), "nothing of v2 ran yet");
    assert_eq!(v2["next"], json!(["polish"]));
    let v1 = history.last().unwrap();
    assert_eq!(v1["next"], json!(["draft"]));
    let after_v2: Vec<&Value> = history
        .iter()
        .skip_while(|s| s["checkpoint"] != v2["checkpoint"])
        .skip(1)
        .take(2)
        .map(|s| &s["checkpoint"])
        .collect();
    let page = |key: &str| seen[key].as_array().unwrap().iter().map(|s| &s["checkpoint"]).collect::<Vec<_>>();
    assert_eq!((page("page_by_id"), page("page_by_checkpoint")), (after_v2.clone(), after_v2));
    let plans: Vec<u64> =
        seen["plans"].as_array().unwrap().iter().map(|s| s["metadata"]["planVersion"].as_u64().unwrap()).collect();
    assert_eq!(plans, [2, 1]);

    // Replayed from v2: the draft reused (from the parent's frame), the polish run again.
    let replayed = &seen["replayed"];
    let fork = replayed["run_id"].as_str().unwrap();
    assert_eq!(replayed["values"]["status"], "completed");
    assert_eq!(replayed["values"]["planVersion"], 1, "a fork's plan is its version 1");
    assert_eq!(replayed["values"]["outputs"]["draft"]["quality_score"], 0.5);
    assert_eq!(replayed["values"]["outputs"]["polish"]["quality_score"], 0.9);
    let frames = server.event_log(fork);
    let v2_seq = seen["v2"].as_str().unwrap().rsplit_once(':').unwrap().1.parse::<u64>().unwrap();
    assert_eq!(frames[0].2["payload"]["forkedFrom"], json!({"runId": parent, "version": 2, "asOf": v2_seq}));
    let draft_seq = log.iter().find(|(_, k)| k == "node_complete").unwrap().0;
    let reused = frames.iter().find(|(_, k, f)| k == "node_complete" && f["nodeId"] == "draft").unwrap();
    assert_eq!(reused.2["payload"]["reusedFrom"], json!({"runId": parent, "nodeId": "draft", "seq": draft_seq}));

    // With command.update: the polish ran on the draft given.
    let updated = seen["updated"]["parts"].as_array().unwrap();
    let last_values = updated.iter().rev().find(|p| p["event"] == "values").unwrap();
    assert_eq!(last_values["data"]["outputs"]["draft"]["text"], "an edited draft");
    assert_eq!(last_values["data"]["status"], "completed");
    let editor = server.llm.calls().into_iter().rev().find(|c| c.capability_id() == Some("editor")).unwrap();
    assert!(editor.user.contains("an edited draft"), "the polish read the update");

    // From the newest checkpoint: nothing left to run. Model calls overall: 2 planner, 1 writer,
    // 3 editor (the parent's, the replay's, the update's).
    assert_eq!(seen["from_head"]["joined"]["status"], "completed");
    assert_eq!((server.capability_calls("writer"), server.capability_calls("editor")), (1, 3));
    assert_eq!(server.planner_calls().len(), 2);

    // Refusals: nothing created.
    let refusals = &seen["refusals"];
    for (name, status) in [
        ("unknown", 404),
        ("not_a_checkpoint", 404),
        ("resume_too", 400),
        ("derived", 400),
        ("not_done", 400),
        ("stateless", 400),
    ] {
        let refusal = &refusals[name];
        assert_eq!(
            (refusal["refused"].as_bool(), refusal["status"].as_u64()),
            (Some(true), Some(status)),
            "{name}: {refusal}"
        );
    }
    assert_eq!(seen["runs_before_refusals"], seen["runs_after_refusals"]);

    // The forks are branches: the replay's first checkpoint hangs off v2.
    let after = seen["history_after"].as_array().unwrap();
    let first_of_fork = after.iter().rfind(|s| s["metadata"]["run_id"] == fork).unwrap();
    assert_eq!(first_of_fork["metadata"]["source"], "fork");
    assert_eq!(first_of_fork["parent_checkpoint"]["checkpoint_id"], seen["v2"]);
    assert_eq!(after[0]["checkpoint"], seen["state_after"]["checkpoint"]);
    assert_eq!(seen["runs"].as_array().unwrap().len(), 4);
}
