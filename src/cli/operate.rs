//! Operator commands of the command line: `runs list|show`, `resume`, `replan`, `cancel`. Each is
//! one call to a flexrun server's API.

use std::process::ExitCode;

use anyhow::bail;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use super::client::Client;
use super::progress::Progress;
use super::terminal::{print_line, safe, safe_json};
use crate::budget::BudgetRaise;
use crate::events::payload::{HitlKind, HitlRequestInfo, HitlSubject, RequestStatus};
use crate::run::list::RunList;
use crate::run::view::RunView;
use crate::run::{RunId, RunStatus};

/// Where the server is and how to authenticate.
#[derive(Debug, Args)]
pub struct Connection {
    /// The flexrun server.
    #[arg(
        long,
        env = "FLEXRUN_SERVER",
        hide_env_values = true,
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
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
        /// Only runs with this status (awaiting_hitl: waiting for an approval or an answer).
        #[arg(long, value_parser = status_parser())]
        status: Option<RunStatus>,
        /// How many runs to show at most (one page).
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
        /// The run's id.
        #[arg(value_parser = RunId::parse)]
        run: RunId,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The statuses `--status` takes: every run status, listed in `--help`.
fn status_parser() -> impl TypedValueParser<Value = RunStatus> {
    PossibleValuesParser::new(RunStatus::ALL.map(RunStatus::as_str)).try_map(|status| status.parse::<RunStatus>())
}

/// Prints JSON text from the server as one line.
fn print_json(value: &Value) {
    print_line(&safe_json(&value.to_string()));
}

/// Prints lines made of text from the server, each escaped for the terminal.
fn print_lines(lines: &[String]) {
    for line in lines {
        print_line(&safe(line));
    }
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
                print_json(&client.call(Method::GET, &path, None).await?);
                return Ok(ExitCode::SUCCESS);
            }
            print_lines(&list(&client.get(&path).await?));
        }
        RunsCommand::Show { run, json } => {
            let path = format!("/api/v1/flex/runs/{run}");
            if json {
                print_json(&client.call(Method::GET, &path, None).await?);
                return Ok(ExitCode::SUCCESS);
            }
            print_lines(&show(&client.get(&path).await?));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A page of runs for people, one line each.
fn list(page: &RunList) -> Vec<String> {
    let mut lines: Vec<String> = page
        .runs
        .iter()
        .map(|run| {
            let objective: String = run.objective.chars().take(60).collect();
            format!("{}  {:<15} {}  {objective}", run.run_id, run.status, run.created_at.to_rfc3339())
        })
        .collect();
    if let Some(cursor) = &page.next_cursor {
        lines.push(format!("more: --cursor {cursor}"));
    }
    lines
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A run for people: its status, plans, nodes, requests, goal results and output; one line per
/// element (text of several lines — a question, the output — is a block of lines).
fn show(view: &RunView) -> Vec<String> {
    let mut lines = Vec::new();
    let run = &view.run;
    lines.push(format!("run {}  {}", run.run_id, run.status));
    lines.push(format!("  objective: {}", run.objective));
    let counts = &run.replans;
    let by_reason: Vec<String> = [
        ("goalCondition", counts.goal_condition),
        ("capabilitySignal", counts.capability_signal),
        ("runtimePolicy", counts.runtime_policy),
        ("postCondition", counts.post_condition),
        ("operator", counts.operator),
        ("nodeError", counts.node_error),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(reason, n)| format!("{reason} {n}"))
    .collect();
    let by_reason = if by_reason.is_empty() { String::new() } else { format!(" ({})", by_reason.join(", ")) };
    lines.push(format!("  plan version {}, replans {}{by_reason}", run.plan_version, counts.total));
    if let Some(usage) = &run.usage {
        lines.push(format!("  usage: {usage}"));
    }
    if let Some(error) = run.error.as_object() {
        let field = |key: &str| error.get(key).map(text).unwrap_or_default();
        lines.push(format!("  error: {} — {}", field("code"), field("message")));
    }
    for node in &view.nodes {
        let usage = node.usage.as_ref().map(|usage| format!("  {usage}")).unwrap_or_default();
        lines.push(format!(
            "  v{} {:<20} {:<16} {}{usage}",
            node.plan_version, node.node_id, node.status, node.capability_id
        ));
    }
    for request in &view.hitl_requests {
        let info = &request.request;
        let decision = request.decision.as_ref().map(|d| format!(" {}", d.decision)).unwrap_or_default();
        lines.push(format!(
            "  request {} {} {} v{}: {}{decision}",
            info.id,
            info.kind.as_str(),
            info.subject.as_str(),
            info.plan_version,
            request.status
        ));
        // What an operator answering from here needs to read, indented under its request.
        if request.status == RequestStatus::Pending {
            lines.extend(info.question.lines().map(|line| format!("    {line}")));
        }
    }
    if let Some(evaluation) = view.outputs.last() {
        lines.push(format!("  goal conditions (plan v{}, {}):", evaluation.plan_version, evaluation.status));
        for result in &evaluation.goal_condition_results {
            let mark = if result.satisfied { "✓" } else { "✗" };
            let observed = result.observed_value.as_ref().map(|v| format!(" (observed {v})")).unwrap_or_default();
            lines.push(format!("    {mark} {}{}: {}{observed}", result.facet, result.path, result.expression));
        }
    }
    if !run.result.is_null() {
        lines.push("  output:".into());
        lines.extend(serde_json::to_string_pretty(&run.result).unwrap_or_default().lines().map(String::from));
    }
    lines
}

/// What `flexrun resume` says to the request a run waits on.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Approve an approval request.
    Approve,
    /// Reject an approval (with feedback: plan again), or decline to answer a question.
    Reject { feedback: Option<String> },
    /// Answer a node's question.
    Answer(String),
    /// Approve a budget request with these new limits (`decision.budget`).
    Raise(BudgetRaise),
}

impl Verdict {
    /// The `decision` of a `run.resume` body, for request `request_id` when it is known.
    fn decision(&self, request_id: Option<&str>) -> Value {
        let (approved, text) = match self {
            Self::Approve => (true, None),
            Self::Reject { feedback } => (false, feedback.as_deref()),
            Self::Answer(answer) => (true, Some(answer.as_str())),
            Self::Raise(_) => (true, None),
        };
        let mut decision = json!({"approved": approved});
        if let Self::Raise(raise) = self {
            decision["budget"] = json!(raise);
        }
        if let Some(text) = text {
            decision["freeformText"] = json!(text);
        }
        if let Some(request_id) = request_id {
            decision["requestId"] = json!(request_id);
        }
        decision
    }
}

/// The request a run waits on, as its view shows it: the newest pending one, which is the one
/// `run.resume` answers.
fn pending(view: &RunView) -> Option<&HitlRequestInfo> {
    view.hitl_requests
        .iter()
        .rev()
        .find(|request| request.status == RequestStatus::Pending)
        .map(|request| &request.request)
}

/// Whether `verdict` is an answer to request `pending` of run `run`; if not, what to use instead.
///
/// The server reads `approved: true` with a text as an approval with feedback when the run waits
/// for an approval, so an `--answer` sent there would approve a plan or a result; and an
/// `--approve` cannot answer a question.
fn check_verdict(run: &str, pending: &HitlRequestInfo, verdict: &Verdict) -> Result<(), String> {
    let id = &pending.id;
    match (pending.kind, verdict) {
        (HitlKind::Approval, Verdict::Answer(_)) => Err(format!(
            "run {run} waits for an approval ({}, request {id}), not an answer: use --approve, or --reject \
             [--feedback \"…\"]",
            approval_of(pending.subject)
        )),
        (HitlKind::Clarify, Verdict::Approve) => Err(format!(
            "run {run} waits for an answer to a node's question (request {id}), not an approval: use --answer \
             \"…\", or --reject to decline the question"
        )),
        (HitlKind::HumanTask, _) => Err(format!(
            "run {run} waits for human node \"{}\" to do its task (request {id}), which `flexrun resume` cannot \
             answer: send the node's output with `run.resume` (`payload`), or decline the task with \
             POST /api/v1/flex/tasks/{id}/decline",
            pending.node_id.as_deref().unwrap_or_default()
        )),
        (HitlKind::Budget, Verdict::Approve | Verdict::Answer(_)) => Err(format!(
            "run {run} reached its budget (request {id}): raise it with --approve and the new limits \
             (--max-cost-usd, --max-tokens, --max-model-calls), or end the run with --reject"
        )),
        (HitlKind::Approval | HitlKind::Clarify, Verdict::Raise(_)) => Err(format!(
            "run {run} waits on a {} request (request {id}), not on its budget: the new limits apply only to a \
             run that reached its budget",
            pending.kind.as_str()
        )),
        (HitlKind::Approval, Verdict::Approve | Verdict::Reject { .. })
        | (HitlKind::Budget, Verdict::Raise(_) | Verdict::Reject { .. })
        | (HitlKind::Clarify, Verdict::Answer(_) | Verdict::Reject { .. }) => Ok(()),
    }
}

/// What an approval request asks to approve.
fn approval_of(subject: HitlSubject) -> &'static str {
    match subject {
        HitlSubject::Plan => "of its plan",
        HitlSubject::Completion => "of its result",
        HitlSubject::Policy => "asked by a runtime policy",
        HitlSubject::Node => "of a node",
        HitlSubject::Budget => "of a higher budget",
    }
}

/// `flexrun resume <run> --approve|--reject [--feedback]|--answer`: answers a pending approval or
/// question and follows the run until it ends or pauses again.
///
/// It reads the run first: a verdict that does not fit the request the run waits on is refused
/// here, with the flag that fits, and the decision names the request it was checked against (so
/// the server refuses it if another request is pending by the time it arrives).
pub async fn resume(
    run: &str,
    verdict: &Verdict,
    acting: &Acting,
    connection: &Connection,
    json_output: bool,
) -> anyhow::Result<ExitCode> {
    let client = connection.client();
    let view: RunView = client.get(&format!("/api/v1/flex/runs/{run}")).await?;
    let pending = pending(&view);
    if let Some(pending) = pending
        && let Err(hint) = check_verdict(run, pending, verdict)
    {
        bail!(hint);
    }
    let mut body = acting.fields();
    body.insert("runId".into(), json!(run));
    body.insert("decision".into(), verdict.decision(pending.map(|p| p.id.as_str())));
    let progress = Progress::new(json_output);
    let outcome = client.resume(&Value::Object(body), |frame, raw| progress.frame(frame, raw)).await;
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
    print_line(&safe(&format!("run {} is {}", text(&answer["runId"]), text(&answer["status"]))));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(kind: HitlKind, subject: HitlSubject) -> HitlRequestInfo {
        HitlRequestInfo {
            id: "req-1".into(),
            kind,
            subject,
            question: "Approve the plan?".into(),
            plan_version: 1,
            created_at: "2026-01-01T00:00:00Z".into(),
            node_id: (subject == HitlSubject::Node).then(|| "review".to_string()),
            context: Value::Null,
        }
    }

    fn answer() -> Verdict {
        Verdict::Answer("EU only".into())
    }

    fn reject() -> Verdict {
        Verdict::Reject { feedback: Some("add a polish step".into()) }
    }

    #[test]
    fn an_answer_is_not_sent_to_an_approval() {
        for subject in [HitlSubject::Plan, HitlSubject::Completion, HitlSubject::Policy] {
            let hint = check_verdict("r1", &request(HitlKind::Approval, subject), &answer()).unwrap_err();
            assert!(hint.starts_with("run r1 waits for an approval"), "{hint}");
            assert!(hint.contains("not an answer: use --approve, or --reject [--feedback \"…\"]"), "{hint}");
        }
        let plan = request(HitlKind::Approval, HitlSubject::Plan);
        assert!(check_verdict("r1", &plan, &Verdict::Approve).is_ok());
        assert!(check_verdict("r1", &plan, &reject()).is_ok());
    }

    #[test]
    fn an_approval_is_not_sent_to_a_question() {
        let question = request(HitlKind::Clarify, HitlSubject::Node);
        let hint = check_verdict("r1", &question, &Verdict::Approve).unwrap_err();
        assert!(hint.contains("waits for an answer to a node's question (request req-1)"), "{hint}");
        assert!(hint.contains("use --answer"), "{hint}");
        assert!(check_verdict("r1", &question, &answer()).is_ok());
        // Rejecting a question declines it (the node fails): a decision the server takes.
        assert!(check_verdict("r1", &question, &reject()).is_ok());
    }

    #[test]
    fn a_human_task_is_not_answered_from_here() {
        let task = request(HitlKind::HumanTask, HitlSubject::Node);
        for verdict in [Verdict::Approve, reject(), answer()] {
            let hint = check_verdict("r1", &task, &verdict).unwrap_err();
            assert!(hint.contains("human node \"review\""), "{hint}");
            assert!(hint.contains("/api/v1/flex/tasks/req-1/decline"), "{hint}");
        }
    }

    #[test]
    fn decisions_name_the_request_they_were_checked_against() {
        assert_eq!(
            answer().decision(Some("req-1")),
            json!({"approved": true, "freeformText": "EU only", "requestId": "req-1"})
        );
        assert_eq!(reject().decision(None), json!({"approved": false, "freeformText": "add a polish step"}));
        assert_eq!(Verdict::Approve.decision(None), json!({"approved": true}));
        let raise = Verdict::Raise(BudgetRaise { max_model_calls: Some(5), ..BudgetRaise::default() });
        assert_eq!(raise.decision(None), json!({"approved": true, "budget": {"maxModelCalls": 5}}));
    }

    #[test]
    fn a_budget_is_raised_with_new_limits_and_only_a_budget() {
        let budget = request(HitlKind::Budget, HitlSubject::Budget);
        let raise = Verdict::Raise(BudgetRaise { max_cost_usd: Some(2.0), ..BudgetRaise::default() });
        assert!(check_verdict("r1", &budget, &raise).is_ok());
        assert!(check_verdict("r1", &budget, &reject()).is_ok());
        let hint = check_verdict("r1", &budget, &Verdict::Approve).unwrap_err();
        assert!(hint.contains("--max-cost-usd, --max-tokens, --max-model-calls"), "{hint}");
        let plan = request(HitlKind::Approval, HitlSubject::Plan);
        let hint = check_verdict("r1", &plan, &raise).unwrap_err();
        assert!(hint.contains("not on its budget"), "{hint}");
    }
}
