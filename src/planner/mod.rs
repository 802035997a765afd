//! The planner: asks an OpenAI-compatible model for a plan draft. What it asks and how the answer
//! is checked is the core's ([`flexrun_core::planner`], re-exported here).

use std::time::Duration;

use serde_json::Value;

use crate::config::PlannerResponseFormat;
use crate::llm::{ChatRequest, LlmClient, LlmError, Purpose, ResponseShape, parse_json_content};
use crate::plan::Diagnostic;
use flexrun_core::usage::Metered;

pub use flexrun_core::planner::*;

/// The planner model client.
#[derive(Clone)]
pub struct Planner {
    llm: LlmClient,
    format: PlannerResponseFormat,
}

impl Planner {
    pub fn new(llm: LlmClient, format: PlannerResponseFormat) -> Self {
        Self { llm, format }
    }

    pub fn model(&self) -> &str {
        self.llm.model()
    }

    /// Asks for one draft, with the call's usage. The outer error is a failed call; the inner one
    /// a reply that is not JSON (a content problem, handled like any other rejected draft).
    pub async fn draft(
        &self,
        input: &PromptInput<'_>,
        timeout: Duration,
    ) -> Metered<Result<Result<Value, Diagnostic>, LlmError>> {
        let slot = self.llm.slot().await;
        let (system, user) = prompt::build(input);
        let shape = match self.format {
            PlannerResponseFormat::JsonSchema => {
                ResponseShape::JsonSchema { name: "plan_draft", schema: draft_schema(), or: None }
            }
            PlannerResponseFormat::JsonObject => ResponseShape::JsonObject,
            PlannerResponseFormat::None => ResponseShape::Text,
        };
        let called = slot.complete(ChatRequest { purpose: Purpose::Planner, system, user, shape, timeout }).await;
        called.map(|content| Ok(parse_json_content(&content?).map_err(|problem| Diagnostic::not_json(&problem))))
    }
}
