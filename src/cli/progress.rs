//! Shows a run as it happens: one line per milestone (plan, node, goal results, replans) and a
//! spinner for the work in flight; or, with `--json`, every frame as one JSON line.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::events::ReceivedFrame;

pub struct Progress {
    json: bool,
    spinner: ProgressBar,
}

impl Progress {
    pub fn new(json: bool) -> Self {
        let spinner = if json { ProgressBar::hidden() } else { ProgressBar::new_spinner() };
        spinner.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        spinner.enable_steady_tick(Duration::from_millis(120));
        Self { json, spinner }
    }

    /// Prints a line above the spinner (also when output is not a terminal).
    fn line(&self, text: impl AsRef<str>) {
        self.spinner.suspend(|| println!("{}", text.as_ref()));
    }

    pub fn finish(&self) {
        self.spinner.finish_and_clear();
    }

    pub fn frame(&self, frame: &ReceivedFrame, raw: &str) {
        if self.json {
            println!("{raw}");
            return;
        }
        let p = &frame.payload;
        match frame.kind.as_str() {
            "start" => self.line(format!("▶ run {}", frame.run_id)),
            "plan_requested" => {
                let reason = p["replan"]["reason"].as_str().map(|r| format!(", replan: {r}")).unwrap_or_default();
                self.spinner.set_message(format!("planning (attempt {}{reason})", p["attempt"]));
            }
            "plan_rejected" => {
                let codes: Vec<&str> = items(&p["diagnostics"]).filter_map(|d| d["code"].as_str()).collect();
                self.line(format!("✗ plan draft rejected (attempt {}): {}", p["attempt"], codes.join(", ")));
            }
            "plan_generated" => self.line(plan_line(&p["plan"])),
            "plan_updated" => self.line(format!(
                "↻ plan v{} replaces v{} ({})",
                p["version"],
                p["previousVersion"],
                text(&p["trigger"]["reason"])
            )),
            "node_start" => self.spinner.set_message(format!(
                "running {} ({})",
                frame.node_id.as_deref().unwrap_or("?"),
                text(&p["capabilityId"])
            )),
            "node_complete" => {
                self.line(format!("  ✓ {} — {}", frame.node_id.as_deref().unwrap_or("?"), short(&p["output"])))
            }
            "node_error" => {
                self.line(format!("  ✗ {}: {}", frame.node_id.as_deref().unwrap_or("?"), text(&p["error"]["message"])))
            }
            "validation_error" => {
                for e in items(&p["errors"]) {
                    self.line(format!(
                        "  ✗ {} {}: {}",
                        text(&p["scope"]),
                        text(&e["instancePath"]),
                        text(&e["message"])
                    ));
                }
            }
            "goal_condition_failed" => {
                self.line(format!("✗ goal conditions failed — corrective replan {} of {}", p["attempt"], p["limit"]));
                for r in items(&p["failedGoalConditions"]) {
                    self.line(format!("    {}", goal_line(r)));
                }
            }
            "complete" => self.complete(p),
            "log" => self.line(format!("  · {}", frame.message.as_deref().unwrap_or(""))),
            "retry" => self.line(format!(
                "  ↻ {} retry {} of {} in {} ms: {}",
                frame.node_id.as_deref().unwrap_or("planner"),
                p["attempt"],
                p["maxRetries"],
                p["delayMs"],
                text(&p["error"])
            )),
            "hitl_request" => self.line(format!(
                "⏸ {} request {} ({}, plan v{}): {}",
                text(&p["request"]["kind"]),
                text(&p["request"]["id"]),
                text(&p["request"]["subject"]),
                p["request"]["planVersion"],
                text(&p["request"]["question"])
            )),
            "hitl_resolved" => self.line(format!(
                "  ✎ request {} {}{}",
                text(&p["request"]["id"]),
                p["decision"]["decision"].as_str().unwrap_or(p["request"]["status"].as_str().unwrap_or("")),
                p["decision"]["feedback"]
                    .as_str()
                    .or(p["decision"]["answer"].as_str())
                    .map(|f| format!(": {f}"))
                    .unwrap_or_default()
            )),
            "policy_triggered" => self.line(format!("↺ replan asked: {}", text(&p["trigger"]["reason"]))),
            other => self.line(format!("  · {other}")),
        }
    }

    fn complete(&self, p: &Value) {
        self.spinner.finish_and_clear();
        match p["status"].as_str() {
            Some("completed") => self.line("✔ completed"),
            status => self.line(format!(
                "✘ {}: {} — {}",
                status.unwrap_or("ended"),
                text(&p["error"]["code"]),
                text(&p["error"]["message"])
            )),
        }
        for r in items(&p["goal_condition_results"]) {
            self.line(format!("    {}", goal_line(r)));
        }
        if !p["output"].is_null() {
            self.line(format!("output:\n{}", serde_json::to_string_pretty(&p["output"]).unwrap_or_default()));
        }
    }
}

fn items(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

fn text(value: &Value) -> String {
    value.as_str().map(String::from).unwrap_or_else(|| value.to_string())
}

fn plan_line(plan: &Value) -> String {
    let steps: Vec<String> = items(&plan["nodes"])
        .map(|n| {
            let kept = if n["status"] == "completed" { " (done)" } else { "" };
            format!("{}{kept}", text(&n["id"]))
        })
        .collect();
    format!("✓ plan v{}: {}", plan["version"], steps.join(" → "))
}

fn goal_line(r: &Value) -> String {
    let mark = if r["satisfied"] == true { "✓" } else { "✗" };
    let observed = r.get("observedValue").map(|v| format!(" (observed {v})")).unwrap_or_default();
    let error = r.get("error").map(|e| format!(" — {}", text(e))).unwrap_or_default();
    format!("{mark} {}{}: {}{observed}{error}", text(&r["facet"]), text(&r["path"]), text(&r["expression"]))
}

/// A value in at most 100 characters.
fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(100) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}
