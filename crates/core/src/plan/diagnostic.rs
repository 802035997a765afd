//! Diagnostics of plan drafts: what is wrong with a draft the planner model answered. They are
//! sent in `plan_rejected` frames and fed back to the planner with its next draft, so they live
//! below both `events` and `planner`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// One problem with a draft (sent in `plan_rejected` and fed back to the planner).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostic {
    /// Stable, e.g. `DUPLICATE_STAGE` (borrowed when flexrun made it, owned when read back).
    pub code: Cow<'static, str>,
    pub message: String,
    pub severity: Cow<'static, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_stage: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facet: Option<String>,
}

impl Diagnostic {
    /// The model's reply could not be read as JSON at all.
    pub fn not_json(problem: &str) -> Self {
        Self::error("DRAFT_NOT_JSON", format!("the planner reply is {problem}; answer with one JSON object"))
    }

    /// An error with a stable `code` (e.g. `DUPLICATE_STAGE`) and a message for the planner.
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code: Cow::Borrowed(code),
            message: message.into(),
            severity: Cow::Borrowed("error"),
            node_stage: None,
            capability_id: None,
            facet: None,
        }
    }
    /// About the draft node with this `stage`.
    pub fn stage(mut self, stage: &str) -> Self {
        self.node_stage = Some(stage.to_string());
        self
    }
    /// About this capability.
    pub fn capability(mut self, id: &str) -> Self {
        self.capability_id = Some(id.to_string());
        self
    }
    /// About this facet.
    pub fn facet(mut self, facet: &str) -> Self {
        self.facet = Some(facet.to_string());
        self
    }
}
