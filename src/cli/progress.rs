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
        let shown = describe(frame);
        if let Some(status) = shown.status {
            self.spinner.set_message(status);
        }
        if shown.end {
            self.spinner.finish_and_clear();
        }
        for line in shown.lines {
            self.line(line);
        }
    }
}

/// What the progress display does with one frame.
#[derive(Debug, Default, PartialEq)]
struct Shown {
    /// Lines printed above the spinner.
    lines: Vec<String>,
    /// The spinner's new message: what is in flight.
    status: Option<String>,
    /// The run ended: the spinner goes away first.
    end: bool,
}

impl Shown {
    fn line(text: String) -> Self {
        Self { lines: vec![text], ..Self::default() }
    }

    fn status(text: String) -> Self {
        Self { status: Some(text), ..Self::default() }
    }
}

/// How a frame is shown to people (pure, so it is unit-tested).
fn describe(frame: &ReceivedFrame) -> Shown {
    let p = &frame.payload;
    let node = frame.node_id.as_deref().unwrap_or("?");
    match frame.kind.as_str() {
        "start" => Shown::line(format!("▶ run {}", frame.run_id)),
        "plan_requested" => {
            let reason = p["replan"]["reason"].as_str().map(|r| format!(", replan: {r}")).unwrap_or_default();
            Shown::status(format!("planning (attempt {}{reason})", p["attempt"]))
        }
        "plan_rejected" => {
            let codes: Vec<&str> = items(&p["diagnostics"]).filter_map(|d| d["code"].as_str()).collect();
            Shown::line(format!("✗ plan draft rejected (attempt {}): {}", p["attempt"], codes.join(", ")))
        }
        "plan_generated" => Shown::line(plan_line(&p["plan"])),
        "plan_updated" => Shown::line(format!(
            "↻ plan v{} replaces v{} ({})",
            p["version"],
            p["previousVersion"],
            text(&p["trigger"]["reason"])
        )),
        "node_start" => Shown::status(format!("running {node} ({})", text(&p["capabilityId"]))),
        "node_complete" => Shown::line(format!("  ✓ {node} — {}", short(&p["output"]))),
        "node_error" => Shown::line(format!("  ✗ {node}: {}", text(&p["error"]["message"]))),
        "validation_error" => Shown {
            lines: items(&p["errors"])
                .map(|e| format!("  ✗ {} {}: {}", text(&p["scope"]), text(&e["instancePath"]), text(&e["message"])))
                .collect(),
            ..Shown::default()
        },
        "goal_condition_failed" => {
            let mut lines =
                vec![format!("✗ goal conditions failed — corrective replan {} of {}", p["attempt"], p["limit"])];
            lines.extend(items(&p["failedGoalConditions"]).map(|r| format!("    {}", goal_line(r))));
            Shown { lines, ..Shown::default() }
        }
        "complete" => Shown { lines: complete_lines(p), end: true, status: None },
        "log" => Shown::line(format!("  · {}", frame.message.as_deref().unwrap_or(""))),
        "retry" => Shown::line(format!(
            "  ↻ {} retry {} of {} in {} ms: {}",
            frame.node_id.as_deref().unwrap_or("planner"),
            p["attempt"],
            p["maxRetries"],
            p["delayMs"],
            text(&p["error"])
        )),
        "hitl_request" => Shown::line(format!(
            "⏸ {} request {} ({}, plan v{}): {}",
            text(&p["request"]["kind"]),
            text(&p["request"]["id"]),
            text(&p["request"]["subject"]),
            p["request"]["planVersion"],
            text(&p["request"]["question"])
        )),
        "hitl_resolved" => Shown::line(format!(
            "  ✎ request {} {}{}",
            text(&p["request"]["id"]),
            p["decision"]["decision"].as_str().unwrap_or(p["request"]["status"].as_str().unwrap_or("")),
            p["decision"]["feedback"]
                .as_str()
                .or(p["decision"]["answer"].as_str())
                .map(|f| format!(": {f}"))
                .unwrap_or_default()
        )),
        "policy_triggered" => Shown::line(format!("↺ replan asked: {}", text(&p["trigger"]["reason"]))),
        "policy_update" => Shown::line(format!(
            "  ⚙ policy {} ({}): {}",
            text(&p["policyId"]),
            text(&p["triggerKind"]),
            match p["action"].as_str() {
                Some("emit") => format!("emit {}", text(&p["event"])),
                Some(action @ ("goto" | "retry")) => format!(
                    "{action} {} (attempt {} of {})",
                    p["next"].as_str().or(p["nodeId"].as_str()).unwrap_or(""),
                    p["attempts"],
                    p["maxAttempts"]
                ),
                other => other.unwrap_or("").to_string(),
            }
        )),
        other => Shown::line(format!("  · {other}")),
    }
}

/// The end of a run: its status, its goal results and its output.
fn complete_lines(p: &Value) -> Vec<String> {
    let mut lines = vec![match p["status"].as_str() {
        Some("completed") => "✔ completed".to_string(),
        status => {
            format!("✘ {}: {} — {}", status.unwrap_or("ended"), text(&p["error"]["code"]), text(&p["error"]["message"]))
        }
    }];
    lines.extend(items(&p["goal_condition_results"]).map(|r| format!("    {}", goal_line(r))));
    if !p["output"].is_null() {
        lines.push(format!("output:\n{}", serde_json::to_string_pretty(&p["output"]).unwrap_or_default()));
    }
    lines
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn frame(kind: &str, node_id: Option<&str>, payload: Value) -> ReceivedFrame {
        serde_json::from_value(json!({"type": kind, "seq": 1, "runId": "r1", "timestamp": "t",
                                      "correlationId": "c", "nodeId": node_id, "payload": payload}))
        .unwrap()
    }

    #[test]
    fn milestones_are_lines_and_work_in_flight_is_the_status() {
        assert_eq!(describe(&frame("start", None, json!({}))), Shown::line("▶ run r1".into()));
        let started = describe(&frame("node_start", Some("draft"), json!({"capabilityId": "writer"})));
        assert_eq!(started, Shown::status("running draft (writer)".into()));
        let answered = frame(
            "hitl_resolved",
            None,
            json!({"request": {"id": "q1", "status": "resolved"},
                                                            "decision": {"decision": "answered", "answer": "EU"}}),
        );
        assert_eq!(describe(&answered).lines, ["  ✎ request q1 answered: EU"]);
    }

    #[test]
    fn policy_updates_say_what_the_policy_did() {
        let goto = json!({"policyId": "again", "triggerKind": "onNodeComplete", "action": "goto", "next": "draft",
                          "attempts": 1, "maxAttempts": 2});
        assert_eq!(
            describe(&frame("policy_update", None, goto)).lines,
            ["  ⚙ policy again (onNodeComplete): goto draft (attempt 1 of 2)"]
        );
        let emit = json!({"policyId": "p", "triggerKind": "onStart", "action": "emit", "event": "hello"});
        assert_eq!(describe(&frame("policy_update", None, emit)).lines, ["  ⚙ policy p (onStart): emit hello"]);
    }

    #[test]
    fn the_end_clears_the_spinner_and_shows_the_outcome() {
        let failed = json!({"status": "failed", "output": null,
                            "error": {"code": "policy_failed", "message": "refused"}});
        let shown = describe(&frame("complete", None, failed));
        assert!(shown.end);
        assert_eq!(shown.lines, ["✘ failed: policy_failed — refused"]);
    }
}
