//! A run that did not complete, summed up for an operator at the top of its page: what happened in
//! words, the message, the step that failed (linked), and whether the goal conditions were why.
//! The raw error stays one click away.

use serde_json::Value;

/// What the run page shows of a failed or cancelled run.
pub struct FailureSummary {
    /// What happened, in words (from the code).
    pub headline: String,
    pub code: String,
    pub message: String,
    /// The step that failed, for a link to its panel.
    pub node_id: Option<String>,
    /// Why that step failed, in words (from its error's code).
    pub cause: Option<String>,
    /// The goal conditions were why: the page's last goal-condition round is the reason.
    pub goal_conditions: bool,
    /// An operator's reason, when one cancelled the run.
    pub note: Option<String>,
    /// Why the planner's drafts were refused (`plan_rejected`), a line each: without them the
    /// summary says only that no plan was valid, and the reason is in the raw error.
    pub diagnostics: Vec<String>,
    /// Diagnostics beyond those listed, left to the raw error.
    pub more_diagnostics: usize,
}

/// How many diagnostics a summary lists, and how long each line may be: a refused draft can have
/// many, and each names stages and facets a model wrote.
const DIAGNOSTICS_SHOWN: usize = 10;
const DIAGNOSTIC_CHARS: usize = 300;

impl FailureSummary {
    /// The summary of a run's `error`; `None` when it has none.
    pub fn of(error: &Value) -> Option<Self> {
        if error.is_null() {
            return None;
        }
        let code = error.get("code").and_then(Value::as_str).unwrap_or("error").to_string();
        let text = |key: &str| error.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from);
        let cause = text("cause");
        let diagnostics: Vec<String> = error
            .get("diagnostics")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|d| d.get("message").and_then(Value::as_str))
            .map(|message| crate::excerpt::excerpt(message, DIAGNOSTIC_CHARS).into_owned())
            .collect();
        let more_diagnostics = diagnostics.len().saturating_sub(DIAGNOSTICS_SHOWN);
        Some(Self {
            headline: words(&code).to_string(),
            goal_conditions: code.starts_with("goal_condition") || code == "replan_limit",
            message: text("message").unwrap_or_default(),
            node_id: text("nodeId"),
            cause: cause.as_deref().map(|cause| format!("{} ({cause})", words(cause))),
            note: text("note"),
            diagnostics: diagnostics.into_iter().take(DIAGNOSTICS_SHOWN).collect(),
            more_diagnostics,
            code,
        })
    }
}

/// A failure code in words. Codes flexrun does not know (a newer server's, a capability's) are
/// shown as they are.
pub fn words(code: &str) -> &str {
    match code {
        "cancelled" => "Cancelled by an operator",
        "node_failed" => "A step failed",
        "goal_condition_replan_limit" => "The goal conditions still failed when no repair was left",
        "replan_limit" => "The run used up its replans",
        "plan_rejected" => "The planner produced no valid plan",
        "planner_error" => "The planner could not be reached or answered with an error",
        "final_output_invalid" => "The result does not match the output contract",
        "run_timeout" => "The run reached its time limit",
        "budget_exceeded" => "The run reached its budget",
        "resume_failed" => "The run could not be resumed after a restart",
        "human_task_declined" => "An operator declined a human task",
        "clarification_declined" => "An operator declined to answer a step's question",
        "model_error" => "The model answered with an error",
        "capability_timeout" => "The step's capability did not answer in time",
        "capability_unreachable" => "The step's capability could not be reached",
        "capability_address_refused" => "The step's capability is at an address flexrun may not call",
        "capability_http_error" => "The step's capability answered with an HTTP error",
        "capability_response_too_large" => "The step's capability answered with too much",
        "capability_output_not_json" => "The step's capability did not answer with JSON",
        "capability_output_invalid" => "The step's output does not match its contract",
        "capability_not_registered" => "The step's capability is no longer registered",
        "tool_error" => "The MCP tool reported an error",
        "tool_unavailable" => "The MCP tool is no longer offered",
        "argument_unresolved" => "A tool argument found nothing to read",
        "mcp_error" => "The MCP server failed the call",
        "tool_input_unsupported" => "The MCP tool asked for input flexrun cannot give",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_failed_step_is_named_with_its_cause_in_words() {
        let error = json!({"code": "node_failed", "message": "Node \"draft\" failed: 500", "nodeId": "draft",
                           "capabilityId": "writer", "cause": "capability_http_error"});
        let summary = FailureSummary::of(&error).unwrap();
        assert_eq!(summary.headline, "A step failed");
        assert_eq!(summary.node_id.as_deref(), Some("draft"));
        assert_eq!(
            summary.cause.as_deref(),
            Some("The step's capability answered with an HTTP error (capability_http_error)")
        );
        assert!(!summary.goal_conditions);
    }

    #[test]
    fn goal_conditions_and_cancels_say_why() {
        let goals = FailureSummary::of(&json!({"code": "goal_condition_replan_limit", "message": "m"})).unwrap();
        assert!(goals.goal_conditions);
        let cancelled =
            FailureSummary::of(&json!({"code": "cancelled", "message": "m", "note": "wrong brief"})).unwrap();
        assert_eq!(
            (cancelled.headline.as_str(), cancelled.note.as_deref()),
            ("Cancelled by an operator", Some("wrong brief"))
        );
        assert_eq!(FailureSummary::of(&json!({"code": "somebody_elses"})).unwrap().headline, "somebody_elses");
        assert!(FailureSummary::of(&Value::Null).is_none());
    }

    #[test]
    fn a_rejected_plan_lists_why_and_no_more_than_ten_reasons() {
        let diagnostics: Vec<Value> =
            (0..12).map(|i| json!({"code": "MISSING_INPUT_FACET", "message": format!("stage s{i} needs x")})).collect();
        let error = json!({"code": "plan_rejected", "message": "no valid plan", "diagnostics": diagnostics});
        let summary = FailureSummary::of(&error).unwrap();
        assert_eq!(summary.diagnostics.len(), 10);
        assert_eq!((summary.diagnostics[0].as_str(), summary.more_diagnostics), ("stage s0 needs x", 2));
    }
}
