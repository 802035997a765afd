//! Operator commands of the command line: `runs list|show`, `resume`, `replan`, `cancel`. Each is
//! one call to a flexrun server's API.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use super::client::Client;
use super::progress::Progress;
use crate::run::view::{RunList, RunView};

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
            let path = format!("/api/v1/flex/runs?{}", query.join("&"));
            if json {
                println!("{}", client.call(Method::GET, &path, None).await?);
                return Ok(ExitCode::SUCCESS);
            }
            let page: RunList = client.get(&path).await?;
            for run in &page.runs {
                let objective: String = run.objective.chars().take(60).collect();
                println!("{}  {:<15} {}  {objective}", run.run_id, run.status, run.created_at.to_rfc3339());
            }
            if let Some(cursor) = page.next_cursor {
                println!("more: --cursor {cursor}");
            }
        }
        RunsCommand::Show { run, json } => {
            let path = format!("/api/v1/flex/runs/{run}");
            if json {
                println!("{}", client.call(Method::GET, &path, None).await?);
                return Ok(ExitCode::SUCCESS);
            }
            show(&client.get(&path).await?);
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

/// A run for people: its status, plans, nodes, requests, goal results and output.
fn show(view: &RunView) {
    let run = &view.run;
    println!("run {}  {}", run.run_id, run.status);
    println!("  objective: {}", run.objective);
    let counts = &run.replans;
    let by_reason: Vec<String> = [
        ("goalCondition", counts.goal_condition),
        ("capabilitySignal", counts.capability_signal),
        ("runtimePolicy", counts.runtime_policy),
        ("postCondition", counts.post_condition),
        ("operator", counts.operator),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(reason, n)| format!("{reason} {n}"))
    .collect();
    let by_reason = if by_reason.is_empty() { String::new() } else { format!(" ({})", by_reason.join(", ")) };
    println!("  plan version {}, replans {}{by_reason}", run.plan_version, counts.total);
    if let Some(error) = run.error.as_object() {
        let field = |key: &str| error.get(key).map(text).unwrap_or_default();
        println!("  error: {} — {}", field("code"), field("message"));
    }
    for node in &view.nodes {
        println!("  v{} {:<20} {:<16} {}", node.plan_version, node.node_id, node.status, node.capability_id);
    }
    for request in &view.hitl_requests {
        let info = &request.request;
        let decision = request.decision.as_ref().map(|d| format!(" {}", d.decision)).unwrap_or_default();
        println!(
            "  request {} {} {} v{}: {}{decision}",
            info.id,
            info.kind.as_str(),
            info.subject.as_str(),
            info.plan_version,
            request.status
        );
        // What an operator answering from here needs to read.
        if request.status == "pending" {
            println!("    {}", info.question);
        }
    }
    if let Some(evaluation) = view.outputs.last() {
        println!("  goal conditions (plan v{}, {}):", evaluation.plan_version, evaluation.status);
        for result in &evaluation.goal_condition_results {
            let mark = if result.satisfied { "✓" } else { "✗" };
            let observed = result.observed_value.as_ref().map(|v| format!(" (observed {v})")).unwrap_or_default();
            println!("    {mark} {}{}: {}{observed}", result.facet, result.path, result.expression);
        }
    }
    if !run.result.is_null() {
        println!("  output:\n{}", serde_json::to_string_pretty(&run.result).unwrap_or_default());
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
