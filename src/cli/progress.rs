//! Shows a run as it happens: one line per milestone (plan, node, goal results, replans) and a
//! spinner for the work in flight; or, with `--json`, every frame as one JSON line.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use super::client::Seen;
use super::terminal::{print_line, safe, safe_json};
use crate::condition::GoalConditionResult;
use crate::events::payload::*;
use crate::events::{DecodedFrame, Event};
use crate::plan::{NodeStatus, Plan};
use flexrun_core::usage::Usage;

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
    fn line(&self, text: &str) {
        self.spinner.suspend(|| print_line(text));
    }

    pub fn finish(&self) {
        self.spinner.finish_and_clear();
    }

    pub fn frame(&self, frame: &Seen, raw: &str) {
        if self.json {
            print_line(&safe_json(raw));
            return;
        }
        let shown = render(frame);
        if let Some(status) = shown.status {
            self.spinner.set_message(status);
        }
        if shown.end {
            self.spinner.finish_and_clear();
        }
        for line in &shown.lines {
            self.line(line);
        }
    }
}

/// How a frame is shown, made safe for a terminal: any text in it may come from the server (a
/// model's output, a capability's error or question), so each line and the status is escaped —
/// and stays one line.
fn render(frame: &Seen) -> Shown {
    let shown = match frame {
        Seen::Known(frame) => describe(frame),
        Seen::Unknown { kind, .. } => Shown::line(format!("  · {kind}")),
    };
    Shown {
        lines: shown.lines.iter().map(|line| safe(line).into_owned()).collect(),
        status: shown.status.map(|status| safe(&status).into_owned()),
        end: shown.end,
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

    fn lines(lines: Vec<String>) -> Self {
        Self { lines, ..Self::default() }
    }

    fn status(text: String) -> Self {
        Self { status: Some(text), ..Self::default() }
    }
}

/// How a frame is shown to people (pure, so it is unit-tested).
fn describe(frame: &DecodedFrame) -> Shown {
    let node = frame.node_id.as_deref().unwrap_or("?");
    match &frame.event {
        Event::Start(_) => Shown::line(format!("▶ run {}", frame.run_id)),
        Event::PlanRequested(p) => {
            let reason = p.replan.as_ref().map(|r| format!(", replan: {}", r.reason.as_str())).unwrap_or_default();
            Shown::status(format!("planning (attempt {}{reason})", p.attempt))
        }
        Event::PlanRejected(p) => {
            let codes: Vec<&str> = p.diagnostics.iter().map(|d| d.code.as_ref()).collect();
            Shown::line(format!("✗ plan draft rejected (attempt {}): {}", p.attempt, codes.join(", ")))
        }
        Event::PlanGenerated(p) => Shown::line(plan_line(&p.plan.plan)),
        Event::PlanUpdated(p) => Shown::line(format!(
            "↻ plan v{} replaces v{} ({})",
            p.version,
            p.previous_version,
            p.trigger.reason.as_str()
        )),
        Event::NodeStart(p) => Shown::status(format!("running {node} ({})", p.capability_id)),
        Event::NodeComplete(p) => {
            Shown::line(format!("  ✓ {node} — {}{}", short(&p.output), spent(p.usage.as_deref())))
        }
        Event::NodeError(p) => Shown::line(format!("  ✗ {node}: {}", p.error.message)),
        Event::ValidationError(p) => {
            let scope = p.scope.as_str();
            Shown::lines(p.errors.iter().map(|e| format!("  ✗ {scope} {}: {}", e.instance_path, e.message)).collect())
        }
        Event::GoalConditionFailed(p) => {
            let mut lines = vec![format!("✗ goal conditions failed — corrective replan {} of {}", p.attempt, p.limit)];
            lines.extend(p.failed_goal_conditions.iter().map(|r| format!("    {}", goal_line(r))));
            Shown::lines(lines)
        }
        Event::Complete(p) => Shown { lines: complete_lines(p), end: true, status: None },
        Event::Log(p) => Shown::line(format!("  · {}", p.message)),
        Event::BudgetExceeded(p) => Shown::line(format!(
            "⚠ budget reached — {}: {} spent of {} ({})",
            p.limit.as_str(),
            p.spent,
            p.max,
            p.action.as_str()
        )),
        Event::Retry(p) => Shown::line(format!(
            "  ↻ {} retry {} of {} in {} ms: {}",
            frame.node_id.as_deref().unwrap_or("planner"),
            p.attempt,
            p.max_retries,
            p.delay_ms,
            p.error
        )),
        Event::HitlRequest(p) => {
            let r = &p.request;
            Shown::line(format!(
                "⏸ {} request {} ({}, plan v{}): {}",
                r.kind.as_str(),
                r.id,
                r.subject.as_str(),
                r.plan_version,
                r.question
            ))
        }
        Event::HitlResolved(p) => {
            let decision = p.decision.as_ref();
            let verdict = decision.map_or(p.request.status.as_str(), |d| d.decision.as_str());
            let text = decision.and_then(|d| d.feedback.as_deref().or(d.answer.as_deref()));
            Shown::line(format!(
                "  ✎ request {} {verdict}{}",
                p.request.id,
                text.map(|t| format!(": {t}")).unwrap_or_default()
            ))
        }
        Event::PolicyTriggered(p) => Shown::line(format!("↺ replan asked: {}", p.trigger.reason.as_str())),
        Event::PolicyUpdate(p) => Shown::line(policy_line(p)),
    }
}

/// What a runtime policy did.
fn policy_line(p: &PolicyUpdate) -> String {
    let policy = &p.policy;
    let what = match policy.action.as_str() {
        "emit" => format!("emit {}", p.event.as_deref().unwrap_or("")),
        action @ ("goto" | "retry") => format!(
            "{action} {} (attempt {} of {})",
            p.next.as_deref().or(policy.node_id.as_deref()).unwrap_or(""),
            p.attempts.unwrap_or_default(),
            p.max_attempts.unwrap_or_default()
        ),
        other => other.to_string(),
    };
    format!("  ⚙ policy {} ({}): {what}", policy.policy_id, policy.trigger_kind)
}

/// The end of a run: its status, its goal results and its output.
/// What a frame's model calls used, after its line: ` (1 call, 500 in + 50 out tokens, $0.0014)`.
fn spent(usage: Option<&Usage>) -> String {
    usage.map(|usage| format!(" ({usage})")).unwrap_or_default()
}

fn complete_lines(p: &Complete) -> Vec<String> {
    let mut lines = vec![match p.status {
        CompleteStatus::Completed => "✔ completed".to_string(),
        status => {
            let (code, message) = p.error_summary();
            let status = if status == CompleteStatus::Failed { "failed" } else { "cancelled" };
            format!("✘ {status}: {code} — {message}")
        }
    }];
    lines.extend(p.goal_condition_results.iter().flatten().map(|r| format!("    {}", goal_line(r))));
    if let Some(usage) = &p.usage {
        lines.push(format!("  usage: {usage}"));
    }
    if !p.output.is_null() {
        lines.push("output:".to_string());
        lines.extend(serde_json::to_string_pretty(&p.output).unwrap_or_default().lines().map(String::from));
    }
    lines
}

fn plan_line(plan: &Plan) -> String {
    let steps: Vec<String> = plan
        .nodes
        .iter()
        .map(|n| {
            let kept = if n.status == NodeStatus::Completed { " (done)" } else { "" };
            format!("{}{kept}", n.id)
        })
        .collect();
    format!("✓ plan v{}: {}", plan.version, steps.join(" → "))
}

fn goal_line(r: &GoalConditionResult) -> String {
    let mark = if r.satisfied { "✓" } else { "✗" };
    let observed = r.observed_value.as_ref().map(|v| format!(" (observed {v})")).unwrap_or_default();
    let error = r.error.as_ref().map(|e| format!(" — {e}")).unwrap_or_default();
    format!("{mark} {}{}: {}{observed}{error}", r.facet, r.path, r.expression)
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
    use crate::runtime_policy::TriggerKind;

    fn frame(event: Event) -> DecodedFrame {
        DecodedFrame {
            seq: crate::events::Seq::new(1).unwrap(),
            run_id: "r1".into(),
            timestamp: chrono::Utc::now(),
            correlation_id: "c".into(),
            plan_version: None,
            node_id: event.node_id().map(String::from),
            event,
        }
    }

    fn policy(action: &str, trigger_kind: TriggerKind) -> PolicyInfo {
        PolicyInfo {
            policy_id: "again".into(),
            trigger_kind,
            action: action.into(),
            node_id: None,
            capability_id: None,
            rationale: None,
            request_id: None,
        }
    }

    fn update(policy: PolicyInfo) -> PolicyUpdate {
        PolicyUpdate {
            policy,
            event: None,
            reason: None,
            payload: Value::Null,
            next: None,
            attempts: None,
            max_attempts: None,
            reset_nodes: Vec::new(),
            post_condition_results: Vec::new(),
        }
    }

    #[test]
    fn milestones_are_lines_and_work_in_flight_is_the_status() {
        let start = Event::Start(Start {
            run_id: "r1".into(),
            thread_id: None,
            correlation_id: "c".into(),
            inputs: None,
            replan_limits: None,
            budget: None,
            forked_from: None,
            trace: None,
        });
        assert_eq!(describe(&frame(start)), Shown::line("▶ run r1".into()));
        let started = Event::NodeStart(NodeStart {
            node_id: "draft".into(),
            capability_id: "writer".into(),
            label: "Draft".into(),
            kind: "execution".into(),
            started_at: "t".into(),
            executor_type: ExecutorType::Ai,
            facets: Facets { input: Vec::new(), output: Vec::new() },
            inputs: None,
            assignment: None,
        });
        assert_eq!(describe(&frame(started)), Shown::status("running draft (writer)".into()));
        let answered = Event::HitlResolved(HitlResolved {
            request: ClosedRequest {
                id: "q1".into(),
                kind: HitlKind::Clarify,
                subject: HitlSubject::Node,
                status: RequestStatus::Resolved,
            },
            decision: Some(DecisionInfo {
                decision: Verdict::Answered,
                feedback: None,
                answer: Some("EU".into()),
                operator: None,
                note: None,
                principal: None,
            }),
            replan: None,
            budget: None,
        });
        assert_eq!(describe(&frame(answered)).lines, ["  ✎ request q1 answered: EU"]);
    }

    #[test]
    fn policy_updates_say_what_the_policy_did() {
        let goto = PolicyUpdate {
            next: Some("draft".into()),
            attempts: Some(1),
            max_attempts: Some(2),
            ..update(policy("goto", TriggerKind::OnNodeComplete))
        };
        assert_eq!(
            describe(&frame(Event::PolicyUpdate(goto))).lines,
            ["  ⚙ policy again (onNodeComplete): goto draft (attempt 1 of 2)"]
        );
        let emit = PolicyUpdate { event: Some("hello".into()), ..update(policy("emit", TriggerKind::OnStart)) };
        assert_eq!(describe(&frame(Event::PolicyUpdate(emit))).lines, ["  ⚙ policy again (onStart): emit hello"]);
    }

    #[test]
    fn text_from_the_server_cannot_steer_the_terminal() {
        let failed = Event::NodeError(NodeError {
            node_id: "draft".into(),
            capability_id: "writer".into(),
            label: "Draft".into(),
            error: ErrorInfo::new("bad", "\u{1b}[2J\u{1b}[H✔ completed\nfake line"),
            usage: None,
        });
        let shown = render(&Seen::Known(Box::new(frame(failed))));
        assert_eq!(shown.lines, ["  ✗ draft: \\x1b[2J\\x1b[H✔ completed\\x0afake line"]);
        let done = Complete {
            status: CompleteStatus::Completed,
            output: json!({"text": "hi\u{9b}2J\u{7}"}),
            goal_condition_results: None,
            error: None,
            post_condition_results: Vec::new(),
            usage: None,
        };
        let shown = render(&Seen::Known(Box::new(frame(Event::Complete(done)))));
        // The output is shown as a block of lines, each one escaped.
        assert_eq!(shown.lines, ["✔ completed", "output:", "{", "  \"text\": \"hi\\u{9b}2J\\u0007\"", "}"]);
        let unknown = render(&Seen::Unknown { seq: 3, kind: "new\u{1b}]0;title\u{7}".into() });
        assert_eq!(unknown.lines, ["  · new\\x1b]0;title\\x07"]);
    }

    #[test]
    fn the_end_clears_the_spinner_and_shows_the_outcome() {
        let failed = Complete {
            status: CompleteStatus::Failed,
            output: Value::Null,
            goal_condition_results: None,
            error: Some(json!({"code": "policy_failed", "message": "refused"})),
            post_condition_results: Vec::new(),
            usage: None,
        };
        let shown = describe(&frame(Event::Complete(failed)));
        assert!(shown.end);
        assert_eq!(shown.lines, ["✘ failed: policy_failed — refused"]);
    }
}
