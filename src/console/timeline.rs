//! A run's timeline: a waterfall of what happened when — each plan version's planning, each
//! step's run (its retries noted), each wait for an operator — as bars on one time axis from the
//! run's start to its end (or now), with durations in words. Pure: built from the run's view, no
//! I/O; the template draws it as SVG (attributes, not inline styles, as the console's content
//! security policy allows) and lists the same rows as text.

use chrono::{DateTime, Utc};

use crate::events::payload::{HitlKind, HitlRequestInfo, HitlSubject};
use crate::hash::HashMap;
use crate::run::view::RunView;

/// Where the bars start (after the labels) and how wide the axis is, in SVG units.
const AXIS_X: f64 = 230.0;
const AXIS_WIDTH: f64 = 760.0;
const ROW_HEIGHT: u32 = 24;
const BAR_HEIGHT: u32 = 16;
/// The narrowest bar drawn: an instant is still seen.
const MIN_WIDTH: f64 = 2.0;

/// One bar.
pub struct Row {
    /// `plan`, `step` or `wait`: a CSS class.
    pub kind: &'static str,
    /// A status class for a step's bar (`completed`, `failed`, …).
    pub status: String,
    pub label: String,
    /// What the bar covers, in words, with its duration (the hover text and the text list).
    pub detail: String,
    pub x: String,
    pub y: u32,
    pub text_y: u32,
    pub width: String,
}

pub struct Timeline {
    /// The run's duration so far (or in all, once it ended), in words.
    pub total: String,
    pub height: u32,
    pub rows: Vec<Row>,
    pub bar_height: u32,
}

/// A span of time and what it is, before it is placed on the axis.
struct Span {
    kind: &'static str,
    status: String,
    label: String,
    what: String,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
}

/// The timeline of `view` as of `now`; `retries` counts each node's retried calls.
pub fn of(view: &RunView, retries: &HashMap<String, u32>, now: DateTime<Utc>) -> Timeline {
    let start = view.run.created_at;
    let end = if view.run.status.is_terminal() { view.run.updated_at.max(start) } else { now.max(start) };
    let mut spans = planning(view, start);
    spans.extend(steps(view, retries, end));
    spans.extend(waits(view, end));
    spans.sort_by_key(|span| span.from);
    let total = (end - start).num_milliseconds().max(1);
    let place = |at: DateTime<Utc>| AXIS_X + AXIS_WIDTH * fraction((at - start).num_milliseconds(), total);
    let rows = spans
        .into_iter()
        .enumerate()
        .map(|(i, span)| {
            let (x, to) = (place(span.from), place(span.to));
            let y = u32::try_from(i).unwrap_or(u32::MAX).saturating_mul(ROW_HEIGHT) + 4;
            Row {
                kind: span.kind,
                status: span.status,
                detail: format!("{}: {} ({})", span.label, span.what, took(span.to - span.from)),
                label: span.label,
                x: format!("{x:.1}"),
                y,
                text_y: y + BAR_HEIGHT - 3,
                width: format!("{:.1}", (to - x).max(MIN_WIDTH)),
            }
        })
        .collect::<Vec<_>>();
    let height = u32::try_from(rows.len()).unwrap_or(u32::MAX).saturating_mul(ROW_HEIGHT) + 8;
    Timeline { total: took(end - start), height, rows, bar_height: BAR_HEIGHT }
}

/// Each plan version's planning: from the last thing that happened before it (the run's start,
/// a step's end, an operator's decision) to the version's creation.
fn planning(view: &RunView, start: DateTime<Utc>) -> Vec<Span> {
    let ends: Vec<DateTime<Utc>> = view
        .nodes
        .iter()
        .filter_map(|n| n.completed_at)
        .chain(view.hitl_requests.iter().filter_map(|r| r.closed_at))
        .collect();
    view.plan_versions
        .iter()
        .map(|version| {
            let created = version.created_at;
            let from = ends.iter().copied().filter(|at| *at <= created).max().unwrap_or(start).max(start);
            let what = match &version.trigger {
                Some(trigger) => format!("replanned: {}", trigger.reason.as_str().replace('_', " ")),
                None => "the first plan".to_string(),
            };
            Span {
                kind: "plan",
                status: String::new(),
                label: format!("plan v{}", version.version),
                what,
                from,
                to: created,
            }
        })
        .collect()
}

/// Each step that started, per plan version, to its end (or `end` while it runs).
fn steps(view: &RunView, retries: &HashMap<String, u32>, end: DateTime<Utc>) -> Vec<Span> {
    view.nodes
        .iter()
        .filter_map(|node| {
            let from = node.started_at?;
            let retried = retries.get(&node.node_id).copied().unwrap_or_default();
            let mut what = format!("{}, {}", node.capability_id, node.status.as_str());
            if retried > 0 {
                what.push_str(&format!(", {retried} {}", if retried == 1 { "retry" } else { "retries" }));
            }
            let to = node.completed_at.unwrap_or(end).max(from);
            let label = format!("v{} · {}", node.plan_version, node.node_id);
            Some(Span { kind: "step", status: node.status.as_str().to_string(), label, what, from, to })
        })
        .collect()
}

/// Each wait for an operator, from the request to its decision (or `end` while it waits).
fn waits(view: &RunView, end: DateTime<Utc>) -> Vec<Span> {
    view.hitl_requests
        .iter()
        .filter_map(|request| {
            let from = DateTime::parse_from_rfc3339(&request.request.created_at).ok()?.with_timezone(&Utc);
            let to = request.closed_at.unwrap_or(end).max(from);
            let outcome = request.decision.as_ref().map_or(request.status.as_str(), |d| d.decision.as_str());
            let what = format!("{}, {outcome}", asked(&request.request));
            Some(Span { kind: "wait", status: String::new(), label: "operator".into(), what, from, to })
        })
        .collect()
}

/// What an operator was asked, in words. Not the request's kind and subject joined ("budget of
/// the budget", "clarify of the node"): a budget request is about the budget, and a question or a
/// task is a step's, so each reads as what it is.
fn asked(request: &HitlRequestInfo) -> String {
    let step = request.node_id.as_deref().unwrap_or("a step");
    match (request.kind, request.subject) {
        (HitlKind::Budget, _) => "a raise of the budget".into(),
        (HitlKind::Clarify, _) => format!("an answer to {step}'s question"),
        (HitlKind::HumanTask, _) => format!("the human task {step}"),
        (HitlKind::Approval, HitlSubject::Plan) => "approval of the plan".into(),
        (HitlKind::Approval, HitlSubject::Completion) => "approval of the result".into(),
        (HitlKind::Approval, HitlSubject::Node) => format!("approval of step {step}"),
        (HitlKind::Approval, HitlSubject::Policy) => "approval for a runtime policy".into(),
        (HitlKind::Approval, HitlSubject::Budget) => "approval of the budget".into(),
    }
}

/// `part` of `whole` (both milliseconds) as a fraction from 0 to 1, to a ten-thousandth.
fn fraction(part: i64, whole: i64) -> f64 {
    let scaled = part.clamp(0, whole) * 10_000 / whole.max(1);
    f64::from(u32::try_from(scaled).unwrap_or(10_000)) / 10_000.0
}

/// A duration in words: `340 ms`, `2.4 s`, `3 min 5 s`, `2 h 4 min`.
pub fn took(duration: chrono::TimeDelta) -> String {
    let millis = duration.num_milliseconds().max(0);
    match millis {
        0..1_000 => format!("{millis} ms"),
        1_000..60_000 => format!("{}.{} s", millis / 1_000, millis % 1_000 / 100),
        60_000..3_600_000 => format!("{} min {} s", millis / 60_000, millis % 60_000 / 1_000),
        _ => format!("{} h {} min", millis / 3_600_000, millis % 3_600_000 / 60_000),
    }
}

#[cfg(test)]
mod tests {
    use super::{asked, took};
    use crate::events::payload::{HitlKind, HitlRequestInfo, HitlSubject};
    use chrono::TimeDelta;

    /// Every kind of request reads as what it asks, none with a word said twice.
    #[test]
    fn each_request_reads_as_what_it_asks() {
        let request = |kind, subject, node: Option<&str>| HitlRequestInfo {
            id: "r".into(),
            kind,
            subject,
            question: "?".into(),
            plan_version: 1,
            created_at: "2026-11-21T10:00:00.000Z".into(),
            node_id: node.map(String::from),
            context: serde_json::Value::Null,
        };
        let cases = [
            (HitlKind::Budget, HitlSubject::Budget, None, "a raise of the budget"),
            (HitlKind::Clarify, HitlSubject::Node, Some("draft"), "an answer to draft's question"),
            (HitlKind::HumanTask, HitlSubject::Node, Some("review"), "the human task review"),
            (HitlKind::Approval, HitlSubject::Plan, None, "approval of the plan"),
            (HitlKind::Approval, HitlSubject::Completion, None, "approval of the result"),
            (HitlKind::Approval, HitlSubject::Node, Some("publish"), "approval of step publish"),
            (HitlKind::Approval, HitlSubject::Policy, Some("draft"), "approval for a runtime policy"),
        ];
        for (kind, subject, node, wanted) in cases {
            assert_eq!(asked(&request(kind, subject, node)), wanted, "{kind:?} {subject:?}");
        }
    }

    #[test]
    fn durations_read_as_words() {
        assert_eq!(took(TimeDelta::milliseconds(340)), "340 ms");
        assert_eq!(took(TimeDelta::milliseconds(2_450)), "2.4 s");
        assert_eq!(took(TimeDelta::milliseconds(185_000)), "3 min 5 s");
        assert_eq!(took(TimeDelta::milliseconds(7_440_000)), "2 h 4 min");
        assert_eq!(took(TimeDelta::milliseconds(-5)), "0 ms");
    }
}
