//! Operator commands of the command line: `runs list|show`, `resume`, `replan`, `cancel`. Each is
//! one call to a flexrun server's API.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use super::client::Client;
use super::progress::Progress;

/// Where the server is and how to authenticate.
#[derive(Debug, Args)]
pub struct Connection {
    /// The flexrun server.
    #[arg(long, env = "FLEXRUN_SERVER", default_value = "http://127.0.0.1:8080", global = true)]
    server: String,
    /// API key for the server (an operator key for resume, replan and cancel).
    #[arg(long, env = "FLEXRUN_API_KEY", hide_env_values = true, global = true)]
    api_key: Option<String>,
}

impl Connection {
    fn client(&self) -> Client {
        Client::new(&self.server, self.api_key.clone())
    }
}

/// Who acts, recorded with the decision.
#[derive(Debug, Args)]
pub struct Acting {
    /// Your operator id (recorded with the decision).
    #[arg(long)]
    operator: Option<String>,
    /// A note recorded with the decision.
    #[arg(long)]
    note: Option<String>,
}

impl Acting {
    fn fields(&self) -> serde_json::Map<String, Value> {
        let mut fields = serde_json::Map::new();
        if let Some(id) = &self.operator {
            fields.insert("operator".into(), json!({"id": id}));
        }
        if let Some(note) = &self.note {
            fields.insert("note".into(), json!(note));
        }
        fields
    }
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List runs, newest first.
    List {
        /// Only runs with this status (e.g. awaiting_hitl).
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Continue after a previous page (its `next cursor`).
        #[arg(long)]
        cursor: Option<String>,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one run: status, plan versions, nodes, operator requests.
    Show {
        run: String,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `flexrun runs list|show`.
pub async fn runs(command: RunsCommand, connection: &Connection) -> anyhow::Result<ExitCode> {
    let client = connection.client();
    match command {
        RunsCommand::List { status, limit, cursor, json } => {
            let mut query = vec![format!("limit={limit}")];
            query.extend(status.map(|s| format!("status={s}")));
            query.extend(cursor.map(|c| format!("cursor={c}")));
            let page = client.call(Method::GET, &format!("/api/v1/flex/runs?{}", query.join("&")), None).await?;
            if json {
                println!("{page}");
                return Ok(ExitCode::SUCCESS);
            }
            for run in page["runs"].as_array().into_iter().flatten() {
                println!(
                    "{}  {:<15} {}  {}",
                    text(&run["runId"]),
                    text(&run["status"]),
                    text(&run["createdAt"]),
                    text(&run["objective"]).chars().take(60).collect::<String>()
                );
            }
            if let Some(cursor) = page["nextCursor"].as_str() {
                println!("more: --cursor {cursor}");
            }
        }
        RunsCommand::Show { run, json } => {
            let body = client.call(Method::GET, &format!("/api/v1/flex/runs/{run}"), None).await?;
            if json {
                println!("{body}");
                return Ok(ExitCode::SUCCESS);
            }
            show(&body);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A run for people: its status, plans, nodes and requests.
fn show(body: &Value) {
    let run = &body["run"];
    println!("run {}  {}", text(&run["runId"]), text(&run["status"]));
    println!("  objective: {}", text(&run["objective"]));
    let replans = &run["replans"];
    let by_reason: Vec<String> = ["goalCondition", "capabilitySignal", "runtimePolicy", "postCondition", "operator"]
        .iter()
        .filter(|reason| replans[**reason].as_u64().is_some_and(|n| n > 0))
        .map(|reason| format!("{reason} {}", replans[*reason]))
        .collect();
    let by_reason = if by_reason.is_empty() { String::new() } else { format!(" ({})", by_reason.join(", ")) };
    println!("  plan version {}, replans {}{by_reason}", text(&run["planVersion"]), text(&replans["total"]));
    if !run["error"].is_null() {
        println!("  error: {} — {}", text(&run["error"]["code"]), text(&run["error"]["message"]));
    }
    for node in body["nodes"].as_array().into_iter().flatten() {
        println!(
            "  v{} {:<20} {:<16} {}",
            text(&node["planVersion"]),
            text(&node["nodeId"]),
            text(&node["status"]),
            text(&node["capabilityId"])
        );
    }
    for request in body["hitlRequests"].as_array().into_iter().flatten() {
        let decision = request["decision"]["decision"].as_str().map(|d| format!(" {d}")).unwrap_or_default();
        println!(
            "  request {} {} {} v{}: {}{}",
            text(&request["id"]),
            text(&request["kind"]),
            text(&request["subject"]),
            text(&request["planVersion"]),
            text(&request["status"]),
            decision
        );
        // What an operator answering from here needs to read.
        if request["status"] == "pending" {
            println!("    {}", text(&request["question"]));
        }
    }
}

/// `flexrun resume <run> --approve|--reject [--feedback]|--answer`: answers a pending approval or
/// question (`text` is the feedback or the answer) and follows the run until it ends or pauses
/// again.
pub async fn resume(
    run: &str,
    approved: bool,
    text: Option<String>,
    acting: &Acting,
    connection: &Connection,
    json_output: bool,
) -> anyhow::Result<ExitCode> {
    let mut body = acting.fields();
    body.insert("runId".into(), json!(run));
    let mut decision = json!({"approved": approved});
    if let Some(text) = text {
        decision["freeformText"] = json!(text);
    }
    body.insert("decision".into(), decision);
    let progress = Progress::new(json_output);
    let outcome = connection.client().resume(&Value::Object(body), |frame, raw| progress.frame(frame, raw)).await;
    progress.finish();
    super::exit_code(outcome?, json_output)
}

/// `flexrun replan <run>` and `flexrun cancel <run>`: one operator action; prints the run's status.
pub async fn act(
    run: &str,
    action: &str,
    feedback: Option<String>,
    acting: &Acting,
    connection: &Connection,
) -> anyhow::Result<ExitCode> {
    let mut body = acting.fields();
    if let Some(feedback) = feedback {
        body.insert("feedback".into(), json!(feedback));
    }
    let path = format!("/api/v1/flex/runs/{run}/{action}");
    let answer = connection.client().call(Method::POST, &path, Some(&Value::Object(body))).await?;
    println!("run {} is {}", text(&answer["runId"]), text(&answer["status"]));
    Ok(ExitCode::SUCCESS)
}
