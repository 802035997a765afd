//! The `flexrun` command line (clap): `serve`, `run`, `runs`, `resume`, `replan`, `cancel`, `demo`,
//! `dsl`, `migrate`.

mod client;
mod demo;
mod descriptors;
mod dsl;
mod log_fields;
mod operate;
mod progress;
mod terminal;

pub use demo::demo_script;

use std::io::{IsTerminal, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use crate::budget::BudgetRaise;
use crate::config::Settings;
use crate::events::payload::CompleteStatus;
use crate::run::RunId;
use crate::services::Services;
use crate::store::Store;
use client::{Client, Outcome};
use operate::Verdict;
use progress::Progress;
use terminal::{print_line, safe, safe_block};

#[derive(Debug, Parser)]
#[command(name = "flexrun", version, about = "Runs LLM-planned agent runs and replans until goal conditions hold")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server (settings: config/flexrun.toml, FLEXRUN_CONFIG, FLEXRUN_* variables).
    Serve {
        /// Log as JSON lines instead of text.
        #[arg(long)]
        log_json: bool,
    },
    /// Post an envelope to a server and show the run live.
    Run {
        /// The task envelope (JSON file).
        envelope: PathBuf,
        /// The flexrun server.
        #[arg(long, env = "FLEXRUN_SERVER", hide_env_values = true, default_value = "http://127.0.0.1:8080")]
        server: String,
        /// API key for the server.
        #[arg(long, env = "FLEXRUN_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        /// Print every frame as a JSON line instead of the progress display.
        #[arg(long)]
        json: bool,
    },
    /// List runs or show one.
    Runs {
        #[command(subcommand)]
        command: operate::RunsCommand,
        #[command(flatten)]
        connection: operate::Connection,
    },
    /// Approve or reject the plan or result a paused run waits on, or answer a node's question,
    /// and follow the run.
    #[command(group = clap::ArgGroup::new("verdict").required(true).multiple(false))]
    Resume {
        /// The paused run's id.
        #[arg(value_parser = RunId::parse)]
        run: RunId,
        /// Approve the pending request.
        #[arg(long, group = "verdict")]
        approve: bool,
        /// Reject it: the run fails, or with --feedback (and replans left) plans again. For a
        /// node's question: decline to answer (the node fails).
        #[arg(long, group = "verdict")]
        reject: bool,
        /// Answer the question a node asked (a clarify request); the node runs again with it.
        #[arg(long, group = "verdict", value_name = "TEXT")]
        answer: Option<String>,
        /// What the planner should do differently (with --reject).
        #[arg(long, requires = "reject")]
        feedback: Option<String>,
        /// For a run that reached its budget: its new cost limit, in US dollars (with --approve).
        #[arg(long, requires = "approve", value_name = "USD")]
        max_cost_usd: Option<f64>,
        /// For a run that reached its budget: its new token limit (with --approve).
        #[arg(long, requires = "approve", value_name = "N")]
        max_tokens: Option<u64>,
        /// For a run that reached its budget: its new model-call limit (with --approve).
        #[arg(long, requires = "approve", value_name = "N")]
        max_model_calls: Option<u64>,
        #[command(flatten)]
        acting: operate::Acting,
        #[command(flatten)]
        connection: operate::Connection,
        /// Print every frame as a JSON line instead of the progress display.
        #[arg(long)]
        json: bool,
    },
    /// Drop the plan a paused run waits with and plan again (counts as a replan).
    Replan {
        /// The paused run's id.
        #[arg(value_parser = RunId::parse)]
        run: RunId,
        /// What the planner should do differently.
        #[arg(long)]
        feedback: Option<String>,
        #[command(flatten)]
        acting: operate::Acting,
        #[command(flatten)]
        connection: operate::Connection,
    },
    /// Cancel a run: in-flight work is dropped and the run ends `cancelled`.
    Cancel {
        /// The run's id.
        #[arg(value_parser = RunId::parse)]
        run: RunId,
        #[command(flatten)]
        acting: operate::Acting,
        #[command(flatten)]
        connection: operate::Connection,
    },
    /// The whole job on embedded defaults: a temporary database, example capabilities and a
    /// scripted stand-in model on loopback. Needs no API key.
    Demo {
        /// Keep the server (and the stand-in model) up after the run, and print the console's
        /// URL: click through the finished run and launch more. Ctrl-C (or SIGTERM) stops it.
        #[arg(long)]
        serve: bool,
        /// Where the server listens with `--serve`.
        #[arg(long, default_value = "127.0.0.1:8080", requires = "serve")]
        bind: String,
    },
    /// Apply pending database migrations and exit.
    Migrate,
    /// Compile, check or evaluate a condition expression.
    Dsl {
        #[command(subcommand)]
        command: dsl::DslCommand,
    },
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // One thread drives every run coordinator and model call: their work is short steps between
    // waits, the HTTP workers, the database writer and the blocking pool have threads of their
    // own, and on one thread a run's wake-ups need no cross-thread hand-off (about 5 % less CPU
    // per run than two work-stealing workers; docs/benchmarks.md).
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("flexrun: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(error) => {
            // The error may quote the server; when standard error is gone there is no one to tell.
            let _ = writeln!(std::io::stderr(), "flexrun: {}", safe_block(&report(&error)));
            ExitCode::from(2)
        }
    }
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve { log_json } => {
            init_tracing("info", log_json)?;
            serve().await
        }
        Command::Run { envelope, server, api_key, json } => {
            init_tracing("warn", false)?;
            run(envelope, &server, api_key, json).await
        }
        Command::Demo { serve, bind } => {
            init_tracing("warn", false)?;
            demo::run(serve.then_some(bind.as_str())).await
        }
        Command::Runs { command, connection } => operate::runs(command, &connection).await,
        Command::Resume {
            run,
            approve,
            answer,
            feedback,
            max_cost_usd,
            max_tokens,
            max_model_calls,
            acting,
            connection,
            json,
            ..
        } => {
            init_tracing("warn", false)?;
            let raise = BudgetRaise { max_cost_usd, max_tokens, max_model_calls };
            let verdict = match answer {
                Some(answer) => Verdict::Answer(answer),
                None if approve && raise != BudgetRaise::default() => Verdict::Raise(raise),
                None if approve => Verdict::Approve,
                None => Verdict::Reject { feedback },
            };
            operate::resume(run.as_str(), &verdict, &acting, &connection, json).await
        }
        Command::Replan { run, feedback, acting, connection } => {
            operate::act(run.as_str(), "replan", feedback, &acting, &connection).await
        }
        Command::Cancel { run, acting, connection } => {
            operate::act(run.as_str(), "cancel", None, &acting, &connection).await
        }
        Command::Dsl { command } => dsl::run(command),
        Command::Migrate => {
            init_tracing("info", false)?;
            let settings = Settings::load()?;
            Store::open(&settings.database_url)?;
            print_line(&format!("database at {} is up to date", settings.database_url));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// An error with its causes, `outer: inner`, where a cause the message before it already quotes
/// is not repeated (many errors print their source in their own message and also return it as
/// their source).
fn report(error: &anyhow::Error) -> String {
    let mut message = error.to_string();
    let mut previous = message.clone();
    for cause in error.chain().skip(1) {
        let text = cause.to_string();
        if !previous.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        previous = text;
    }
    message
}

/// Logs go to standard error: filtered by `FLEXRUN_LOG` (`default` when it is unset or empty),
/// coloured only when standard error is a terminal and `NO_COLOR` is not set, text with its fields'
/// control characters escaped ([`log_fields`]). A filter that does not parse is an error, not a
/// silent fallback to the default.
fn init_tracing(default: &str, json: bool) -> anyhow::Result<()> {
    let filter = log_filter(std::env::var("FLEXRUN_LOG"), default)?;
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour);
    let _ = if json { builder.json().try_init() } else { builder.fmt_fields(log_fields::EscapedFields).try_init() };
    Ok(())
}

/// The log filter from the value of `FLEXRUN_LOG`.
///
/// The HTTP library logs each malformed request it cannot even parse (a bad header, a broken
/// chunk) at ERROR, with the client's bytes in the message; the client gets its 400 all the same.
/// A client's mistake is not the server's error, so those lines are off unless the filter names
/// `actix_http` itself.
fn log_filter(variable: Result<String, std::env::VarError>, default: &str) -> anyhow::Result<EnvFilter> {
    let filter = match variable {
        Ok(value) if !value.trim().is_empty() => EnvFilter::try_new(&value).with_context(|| {
            format!("FLEXRUN_LOG={value:?} is not a valid log filter (e.g. `info` or `flexrun=debug,warn`)")
        })?,
        Ok(_) | Err(std::env::VarError::NotPresent) => EnvFilter::new(default),
        Err(std::env::VarError::NotUnicode(_)) => bail!("FLEXRUN_LOG is not valid UTF-8"),
    };
    if filter.to_string().contains("actix_http") {
        return Ok(filter);
    }
    Ok(filter.add_directive(CLIENT_PARSE_ERRORS.parse()?))
}

/// Where the HTTP library reports requests it could not parse.
const CLIENT_PARSE_ERRORS: &str = "actix_http::h1::dispatcher=off";

/// How long a stopping process waits for its last spans to reach the collector.
pub(crate) const TRACE_FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

async fn serve() -> anyhow::Result<ExitCode> {
    let settings = Settings::load()?;
    let bind = settings.bind_addr()?;
    let auth = settings.auth.enabled();
    descriptors::raise_and_log();
    let services = Services::start(settings).await?;
    let listener = TcpListener::bind(bind).with_context(|| format!("cannot listen on {bind}"))?;
    tracing::info!(address = %listener.local_addr()?, auth, "flexrun listening");
    if services.registry.snapshot().is_empty() {
        tracing::warn!("{}", crate::capability::NONE_REGISTERED);
    }
    let server = crate::http::serve(services.clone(), listener, crate::surfaces)?;
    let resumed = crate::run::recover(&services).await?;
    if resumed > 0 {
        tracing::info!(resumed, "resumed runs left unfinished by an earlier process");
    }
    // SIGTERM or SIGINT stops the HTTP server (actix's signal handling); with leases the node
    // drains: its runs go on elsewhere within a sweep, not after their leases run out.
    if services.claims.leasing().is_some() {
        tokio::spawn(drain_on_signal(services.clone()));
    }
    // A process that took this node's id while it was not held has taken its runs too: this one
    // stops at once, handing nothing back (the runs' leases name that process as well).
    let taken_over = async {
        match &services.identity {
            Some(identity) => identity.taken_over().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        served = server => served?,
        taken = taken_over => return Err(taken.into()),
    }
    let grace = std::time::Duration::from_secs(services.settings.cluster.drain_seconds);
    crate::run::stop(&services, grace).await?;
    if let Some(identity) = &services.identity {
        identity.release().await;
    }
    services.traces.flush(TRACE_FLUSH).await;
    Ok(ExitCode::SUCCESS)
}

/// The process being asked to stop: SIGTERM (a service manager, a container's stop) or SIGINT
/// (Ctrl-C). Listening starts when it is made, so a signal that arrives before anyone waits is
/// not missed (the HTTP servers handle these signals too, by stopping).
pub(crate) struct StopSignal {
    terminate: Option<tokio::signal::unix::Signal>,
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl StopSignal {
    pub(crate) fn listen() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self { terminate: signal(SignalKind::terminate()).ok(), interrupt: signal(SignalKind::interrupt()).ok() }
    }

    /// Resolves once either signal arrived (never, if neither could be listened to).
    pub(crate) async fn arrived(&mut self) {
        tokio::select! {
            _ = received(self.terminate.as_mut()) => {}
            _ = received(self.interrupt.as_mut()) => {}
        }
    }
}

/// The next delivery of `signal`; never for one not listened to.
async fn received(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Drains as soon as SIGTERM or SIGINT arrives, while the HTTP server closes its connections
/// (which may take its shutdown timeout): the coordinators stop at their next wait, and the
/// leases of the runs they stop are handed back as soon as they have. Waiting for the HTTP server
/// first would let those leases, no longer renewed once their coordinators stopped, run out
/// meanwhile, and another node would take the runs as a crashed node's. `serve` drains once more
/// when the server has closed, for runs an operator's command claimed meanwhile.
async fn drain_on_signal(services: std::sync::Arc<crate::services::Services>) {
    StopSignal::listen().arrived().await;
    let grace = std::time::Duration::from_secs(services.settings.cluster.drain_seconds);
    if let Err(error) = crate::run::lease::drain(&services, grace).await {
        tracing::warn!(error = %crate::excerpt::log(error), "handing back leases failed; they run out instead");
    }
}

async fn run(envelope: PathBuf, server: &str, api_key: Option<String>, json: bool) -> anyhow::Result<ExitCode> {
    let body = std::fs::read(&envelope).with_context(|| format!("cannot read {}", envelope.display()))?;
    let progress = Progress::new(json);
    let outcome = Client::new(server, api_key).run(body, |frame, raw| progress.frame(frame, raw)).await;
    progress.finish();
    exit_code(outcome?, json)
}

/// Success when the run completed or waits for an operator; failure when it failed or was cancelled.
fn exit_code(outcome: Outcome, json: bool) -> anyhow::Result<ExitCode> {
    match outcome {
        Outcome::Complete(complete) if complete.status == CompleteStatus::Completed => Ok(ExitCode::SUCCESS),
        Outcome::Complete(_) => Ok(ExitCode::FAILURE),
        Outcome::Paused { run_id, status } => {
            if !json {
                print_line(&safe(&format!(
                    "⏸ run {run_id} is {status}: it waits for an operator (flexrun resume / replan / cancel)"
                )));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::run::RunStatus;

    /// Every argument of `command` and its subcommands that has no help text, by path.
    fn undocumented(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{path} {}", arg.get_id()));
            }
        }
        for sub in command.get_subcommands() {
            undocumented(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }

    #[test]
    fn every_argument_has_help() {
        let mut missing = Vec::new();
        undocumented(&Cli::command(), "flexrun", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:?}");
    }

    #[test]
    fn status_takes_the_run_statuses() {
        let cli = Cli::command();
        let list = cli.find_subcommand("runs").and_then(|runs| runs.find_subcommand("list")).unwrap();
        let status = list.get_arguments().find(|arg| arg.get_id() == "status").unwrap();
        let values: Vec<String> = status.get_possible_values().iter().map(|v| v.get_name().to_string()).collect();
        assert_eq!(values, RunStatus::ALL.map(|s| s.as_str().to_string()));
        let parsed = Cli::try_parse_from(["flexrun", "runs", "list", "--status", "awaiting_hitl"]).unwrap();
        let Command::Runs { command: operate::RunsCommand::List { status, .. }, .. } = parsed.command else {
            panic!("runs list");
        };
        assert_eq!(status, Some(RunStatus::AwaitingHitl));
        let error = Cli::try_parse_from(["flexrun", "runs", "list", "--status", "waiting"]).unwrap_err();
        assert!(error.to_string().contains("awaiting_hitl"), "{error}");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("reading the file: {0}")]
    struct Quoting(#[source] std::io::Error);

    #[test]
    fn causes_are_shown_once() {
        let quoting = anyhow::Error::from(Quoting(std::io::Error::other("disk on fire")));
        assert_eq!(report(&quoting), "reading the file: disk on fire");
        let layered = anyhow::Error::from(std::io::Error::other("disk on fire")).context("cannot read x.json");
        assert_eq!(report(&layered), "cannot read x.json: disk on fire");
    }

    #[test]
    fn a_bad_log_filter_is_an_error_that_names_the_variable() {
        let error = log_filter(Ok("flexrun=loud".into()), "info").unwrap_err();
        let message = report(&error);
        assert!(message.starts_with("FLEXRUN_LOG=\"flexrun=loud\" is not a valid log filter"), "{message}");
        assert_eq!(message.matches("error parsing level filter").count(), 1, "{message}");
        assert!(log_filter(Ok("flexrun=debug,warn".into()), "info").is_ok());
        assert!(log_filter(Ok(" ".into()), "info").is_ok());
        assert!(log_filter(Err(std::env::VarError::NotPresent), "info").is_ok());
    }
}
