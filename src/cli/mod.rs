//! The `flexrun` command line (clap): `serve`, `run`, `runs`, `resume`, `replan`, `cancel`, `demo`,
//! `dsl`, `migrate`.

mod client;
mod demo;
mod dsl;
mod operate;
mod progress;

pub use demo::demo_script;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use crate::config::Settings;
use crate::events::payload::CompleteStatus;
use crate::services::Services;
use crate::store::Store;
use client::{Client, Outcome};
use progress::Progress;

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
        #[arg(long, env = "FLEXRUN_SERVER", default_value = "http://127.0.0.1:8080")]
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
        run: String,
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
        run: String,
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
        run: String,
        #[command(flatten)]
        acting: operate::Acting,
        #[command(flatten)]
        connection: operate::Connection,
    },
    /// The whole job on embedded defaults: a temporary database, example capabilities and a
    /// scripted stand-in model on loopback. Needs no API key.
    Demo,
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
            eprintln!("flexrun: {error:#}");
            ExitCode::from(2)
        }
    }
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve { log_json } => {
            init_tracing("info", log_json);
            serve().await
        }
        Command::Run { envelope, server, api_key, json } => {
            init_tracing("warn", false);
            run(envelope, &server, api_key, json).await
        }
        Command::Demo => {
            init_tracing("warn", false);
            demo::run().await
        }
        Command::Runs { command, connection } => operate::runs(command, &connection).await,
        Command::Resume { run, approve, answer, feedback, acting, connection, json, .. } => {
            init_tracing("warn", false);
            let (approved, text) = match answer {
                Some(answer) => (true, Some(answer)),
                None => (approve, feedback),
            };
            operate::resume(&run, approved, text, &acting, &connection, json).await
        }
        Command::Replan { run, feedback, acting, connection } => {
            operate::act(&run, "replan", feedback, &acting, &connection).await
        }
        Command::Cancel { run, acting, connection } => operate::act(&run, "cancel", None, &acting, &connection).await,
        Command::Dsl { command } => dsl::run(command),
        Command::Migrate => {
            init_tracing("info", false);
            let settings = Settings::load()?;
            Store::open(&settings.database_url)?;
            println!("database at {} is up to date", settings.database_url);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn init_tracing(default: &str, json: bool) {
    let filter = EnvFilter::try_from_env("FLEXRUN_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}

async fn serve() -> anyhow::Result<ExitCode> {
    let settings = Settings::load()?;
    let bind = settings.bind_addr()?;
    let auth = settings.auth.enabled();
    let services = Services::start(settings).await?;
    let listener = TcpListener::bind(bind).with_context(|| format!("cannot listen on {bind}"))?;
    tracing::info!(address = %listener.local_addr()?, auth, "flexrun listening");
    let server = crate::http::serve(services.clone(), listener)?;
    let resumed = crate::run::recover(&services).await?;
    if resumed > 0 {
        tracing::info!(resumed, "resumed runs left unfinished by an earlier process");
    }
    server.await?;
    Ok(ExitCode::SUCCESS)
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
                println!("⏸ run {run_id} is {status}: it waits for an operator (flexrun resume / replan / cancel)");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
