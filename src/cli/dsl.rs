//! `flexrun dsl compile|check|eval`: the condition DSL from the command line, with errors shown
//! under the offending text like a compiler's.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use serde_json::Value;

use super::terminal::print_line;
use crate::capability::{self, Capabilities, Capability, EndpointAllowlist};
use crate::condition::Rule;
use crate::condition::dsl::{self, Catalog, DslError, Scope};
use crate::config::Settings;

#[derive(Debug, Subcommand)]
pub enum DslCommand {
    /// Compile an expression and print its JSON-Logic, canonical form and variables.
    Compile {
        /// The expression, e.g. "facets.post_copy.quality_score >= 0.8" (the facets of the
        /// capability files in FLEXRUN_CAPABILITIES_DIR, e.g. config/capabilities, and of
        /// [facets] in the configuration).
        expression: String,
        /// Read names that are not catalog variables relative to the condition's value.
        #[arg(long)]
        relative: bool,
    },
    /// Check the expression in a file; exits non-zero (2) when it has errors.
    Check {
        /// A file holding one expression.
        file: PathBuf,
        /// Read names that are not catalog variables relative to the condition's value.
        #[arg(long)]
        relative: bool,
    },
    /// Evaluate an expression against JSON data (names are read relative to the data).
    Eval {
        /// The expression, e.g. "quality_score >= 0.8".
        expression: String,
        /// The data, as JSON text.
        #[arg(long)]
        data: String,
    },
}

pub fn run(command: DslCommand) -> anyhow::Result<ExitCode> {
    let known = known()?;
    match command {
        DslCommand::Compile { expression, relative } => {
            let compiled = compile(&expression, &known, relative)?;
            print_line(&serde_json::to_string_pretty(&compiled)?);
            Ok(ExitCode::SUCCESS)
        }
        DslCommand::Check { file, relative } => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
            compile(text.trim_end(), &known, relative)?;
            print_line(&format!("{}: ok", file.display()));
            Ok(ExitCode::SUCCESS)
        }
        DslCommand::Eval { expression, data } => {
            let data: Value = serde_json::from_str(&data).context("--data is not valid JSON")?;
            let compiled = compile(&expression, &known, true)?;
            let rule = Rule::from_dsl(compiled.json_logic, compiled.eval_logic).map_err(anyhow::Error::msg)?;
            let result = rule.evaluate(&data).map_err(anyhow::Error::msg)?;
            let holds = rule.holds(&data).map_err(anyhow::Error::msg)?;
            print_line(&holds.to_string());
            if result != Value::Bool(holds) {
                print_line(&format!("(the expression evaluates to {result})"));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Compiles, or fails with every error rendered under the source.
fn compile(source: &str, known: &Known, relative: bool) -> anyhow::Result<dsl::Compiled> {
    let scope = if relative { Scope::Relative { schema: None } } else { Scope::Catalog };
    dsl::compile(source, &known.catalog, scope).map_err(|errors| {
        let shown: Vec<String> = errors.iter().map(|e| show(source, e)).collect();
        let unknown = errors.iter().any(|e| e.code == dsl::ErrorCode::UnknownVariable);
        let hint = if unknown && !known.capability_files {
            "\nNo capability files were read, so no capability's facets are known: set \
             FLEXRUN_CAPABILITIES_DIR (for example to config/capabilities).\n"
        } else {
            ""
        };
        anyhow::anyhow!("{} error(s) in the expression\n\n{}{hint}", errors.len(), shown.join("\n"))
    })
}

/// `error[code]: message`, then the source line with carets under the error's range.
pub fn show(source: &str, error: &DslError) -> String {
    let code = serde_json::to_value(error.code).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
    let (start, end) = (error.range.start, error.range.end);
    let line = source.lines().nth(start.line.saturating_sub(1)).unwrap_or("");
    let width = if end.line == start.line { end.column.saturating_sub(start.column).max(1) } else { 1 };
    let number = start.line.to_string();
    let gutter = " ".repeat(number.len());
    format!(
        "error[{code}]: {}\n{gutter}--> line {}, column {}\n{gutter} |\n{number} | {line}\n{gutter} | {}{}\n",
        error.message,
        start.line,
        start.column,
        " ".repeat(start.column.saturating_sub(1)),
        "^".repeat(width)
    )
}

/// The variables an expression may name, as a server with the current configuration knows them.
struct Known {
    catalog: Catalog,
    /// Whether capability files were read (`FLEXRUN_CAPABILITIES_DIR` is set): without them an
    /// unknown facet is most likely one of theirs.
    capability_files: bool,
}

/// What a server with the current configuration would know: configured facets and the
/// capability files of `FLEXRUN_CAPABILITIES_DIR`.
fn known() -> anyhow::Result<Known> {
    let settings = Settings::load()?;
    let configured: Vec<(String, Value)> =
        settings.facets.iter().filter_map(|(f, d)| d.schema.clone().map(|s| (f.clone(), s))).collect();
    let mut capabilities = Capabilities::new();
    if let Some(dir) = settings.capabilities_dir() {
        for (path, registration) in capability::registration_files(&dir)? {
            match Capability::parse(registration, &EndpointAllowlist::default()) {
                Ok(c) => {
                    capabilities.insert(c.id.clone(), std::sync::Arc::new(c));
                }
                Err(_) => {
                    eprintln!("warning: {} is not a valid registration; its facets are not known", path.display())
                }
            }
        }
    }
    Ok(Known {
        catalog: capability::catalog(&configured, &capabilities),
        capability_files: settings.capabilities_dir().is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carets_sit_under_the_range() {
        let source = "run.latencyMs > 1 &&\n  facets.nope == 2";
        let errors = dsl::compile(source, &Catalog::builtin(), Scope::Catalog).unwrap_err();
        let shown = show(source, &errors[0]);
        assert!(shown.starts_with("error[unknown_variable]: Variable `facets.nope` is not registered"), "{shown}");
        assert!(shown.contains("2 |   facets.nope == 2\n  |   ^^^^^^^^^^^\n"), "{shown}");
    }
}
