//! `flexrun demo`: the whole job on embedded defaults, with no API key and no server to install.
//!
//! It starts flexrun on a temporary SQLite file with the example capabilities, and a scripted
//! STAND-IN model on loopback (not a real LLM: its answers are fixed below), then posts the example
//! envelope. The first plan's post scores too low and the editor asks for revisions, so both goal
//! conditions fail; the repair replan adds a polish step and a final review, and the run completes.

use std::net::TcpListener;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::{Value, json};

use super::client::{Client, Outcome};
use super::progress::Progress;
use super::terminal::print_line;
use crate::config::Settings;
use crate::events::payload::CompleteStatus;
use crate::llm::standin::{self, ChatCall, Reply, StandIn};
use crate::services::Services;

/// The example capability registrations, compiled in so the demo runs from any directory.
const CAPABILITIES: [(&str, &str); 5] = [
    ("assistant.reply.json", include_str!("../../config/capabilities/assistant.reply.json")),
    ("research.audience.json", include_str!("../../config/capabilities/research.audience.json")),
    ("copywriter.draft.json", include_str!("../../config/capabilities/copywriter.draft.json")),
    ("copywriter.polish.json", include_str!("../../config/capabilities/copywriter.polish.json")),
    ("editor.review.json", include_str!("../../config/capabilities/editor.review.json")),
];

const ENVELOPE: &str = include_str!("../../examples/demo-envelope.json");

/// Runs the demo; with `serve` (an address), keeps the server up afterwards until Ctrl-C or
/// SIGTERM.
pub async fn run(serve: Option<&str>) -> anyhow::Result<ExitCode> {
    let mut stop = super::StopSignal::listen();
    print_line("flexrun demo");
    print_line("  The model is a scripted STAND-IN on loopback, not a real LLM: set FLEXRUN_LLM_BASE_URL,");
    print_line("  FLEXRUN_LLM_API_KEY and FLEXRUN_LLM_MODEL and use `flexrun serve` + `flexrun run` for a real one.\n");
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let capabilities_dir = dir.path().join("capabilities");
    std::fs::create_dir(&capabilities_dir)?;
    for (name, text) in CAPABILITIES {
        std::fs::write(capabilities_dir.join(name), text)?;
    }
    let stand_in = StandIn::start(demo_script())?;
    let database_url = format!("sqlite://{}", dir.path().join("flexrun.db").display());
    let settings = Settings::load_from(|name| {
        let value = match name {
            "FLEXRUN_DATABASE_URL" => database_url.clone(),
            "FLEXRUN_CAPABILITIES_DIR" => capabilities_dir.display().to_string(),
            "FLEXRUN_LLM_BASE_URL" => stand_in.base_url.clone(),
            "FLEXRUN_LLM_API_KEY" => "stand-in".into(),
            "FLEXRUN_LLM_MODEL" => "flexrun-stand-in".into(),
            // The demo's runs can be traced: the standard variables are read as `serve` reads them.
            otel if otel.starts_with("OTEL_") => return std::env::var(otel).ok(),
            _ => return None,
        };
        Some(value)
    })?;
    let services = Services::start(settings).await?;
    let address = serve.unwrap_or("127.0.0.1:0");
    let listener = TcpListener::bind(address).with_context(|| format!("listening on {address}"))?;
    let base = format!("http://{}", listener.local_addr()?);
    let server = crate::http::serve(services.clone(), listener, crate::surfaces)?;
    let handle = server.handle();
    tokio::spawn(server);

    let progress = Progress::new(false);
    let outcome = Client::new(&base, None).run(ENVELOPE.as_bytes().to_vec(), |f, raw| progress.frame(f, raw)).await;
    progress.finish();
    let calls = stand_in.calls();
    let planner_calls = calls.iter().filter(|c| c.is_planner()).count();
    print_line(&format!(
        "\nThe stand-in model answered {} calls: {planner_calls} planner, {} capability.",
        calls.len(),
        calls.len() - planner_calls
    ));
    let completed = matches!(&outcome, Ok(Outcome::Complete(c)) if c.status == CompleteStatus::Completed);
    if serve.is_some() {
        print_line(&format!("\nThe console: {base}/  (the run is at the top of the list; New run launches more)"));
        print_line("The server and the stand-in model stay up until Ctrl-C (or SIGTERM).");
        stop.arrived().await;
    }
    handle.stop(true).await;
    services.traces.flush(super::TRACE_FLUSH).await;
    stand_in.stop().await;
    outcome?;
    Ok(if completed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The demo's stand-in model: the plans and capability answers `flexrun demo` runs on.
pub fn demo_script() -> standin::Script {
    standin::script(|call| {
        if call.is_planner() {
            // A chat (the LangGraph surface's, e.g. Agent Chat UI) brings its conversation as the
            // `messages` input: one step answers it.
            if chat(call) {
                return Reply::json(json!({"nodes": [{"stage": "reply", "capabilityId": "assistant.reply"}]}));
            }
            let repair = call.user.contains("### GOAL CONDITION REPAIR");
            return Reply::json(if repair { repair_plan() } else { first_plan() });
        }
        match call.capability_id() {
            Some("assistant.reply") => Reply::content(chat_answer(call)),
            Some("research.audience") => Reply::json(json!({
                "segments": ["platform engineers", "ML infrastructure leads"],
                "pains": ["agent runs that silently stop halfway", "no audit trail of what a model planned"],
                "tone": "direct, technical, no hype"
            })),
            Some("copywriter.draft") => Reply::json(json!({
                "text": "flexrun is out. It runs agent plans. Try it.",
                "quality_score": 0.62
            })),
            Some("copywriter.polish") => Reply::json(json!({
                "text": "Your agent said it was done. Was it? flexrun checks every run against the goal \
                         conditions you set, and when one fails it asks the planner for a corrective plan, \
                         streaming and persisting every step so nothing is lost on a restart.",
                "quality_score": 0.91
            })),
            Some("editor.review") => review(call),
            other => Reply::error(400, format!("the demo stand-in has no script for capability {other:?}")),
        }
    })
}

/// Whether a planner call is for a chat run: its inputs are a conversation, not the demo's brief.
fn chat(call: &ChatCall) -> bool {
    let inputs =
        call.user.split("### INPUTS\n").nth(1).and_then(|rest| rest.split("\n### ").next()).unwrap_or_default();
    inputs.starts_with("- messages:") && !inputs.contains("\n- brief:")
}

/// The stand-in's answer to a chat: it says what it is, and what flexrun did with the message.
fn chat_answer(call: &ChatCall) -> String {
    let messages = inputs(call)["messages"].as_array().cloned().unwrap_or_default();
    let last = crate::langgraph::last_human_text(&messages).unwrap_or_default();
    let shown = crate::excerpt::excerpt(&last, 200);
    format!(
        "This is flexrun's demo stand-in model, not a real one. flexrun planned one step for your message \
         (\"{shown}\") and ran it; point FLEXRUN_LLM_BASE_URL at a real model for real answers."
    )
}

/// Approves a post whose self-assessed quality is at least 0.8, asks for revisions otherwise.
fn review(call: &ChatCall) -> Reply {
    let score = inputs(call)["post_copy"]["quality_score"].as_f64().unwrap_or(0.0);
    if score >= 0.8 {
        Reply::json(json!({"verdict": "approve", "notes": ["Clear hook, concrete benefit, right length."]}))
    } else {
        Reply::json(json!({"verdict": "revise", "notes": [
            "Open with the reader's problem, not the product name.",
            "Say what happens when a goal condition fails."
        ]}))
    }
}

/// The `### INPUTS` block of a capability prompt.
fn inputs(call: &ChatCall) -> Value {
    call.user
        .split("### INPUTS\n")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or(Value::Null)
}

fn first_plan() -> Value {
    json!({"nodes": [
        {"stage": "audience", "capabilityId": "research.audience", "rationale": "Know who the post is for."},
        {"stage": "draft", "capabilityId": "copywriter.draft", "rationale": "Write the post."},
        {"stage": "review", "capabilityId": "editor.review", "rationale": "Check the post against the brief."}
    ]})
}

fn repair_plan() -> Value {
    json!({"nodes": [
        {"stage": "audience", "capabilityId": "research.audience"},
        {"stage": "draft", "capabilityId": "copywriter.draft"},
        {"stage": "review", "capabilityId": "editor.review"},
        {"stage": "polish", "capabilityId": "copywriter.polish",
         "rationale": "quality_score was 0.62 and the editor asked for revisions; address the notes."},
        {"stage": "final_review", "capabilityId": "editor.review",
         "rationale": "The review verdict must be approve."}
    ]})
}
