//! The planner: asks an OpenAI-compatible model for a plan draft and checks what comes back.
//!
//! [`prompt`] builds the request from named sections, [`draft`] validates and compiles the answer.
//! The attempt loop (one retry with the diagnostics of a rejected draft) and the frames it emits
//! belong to the run coordinator.

pub mod draft;
pub mod prompt;

use std::sync::LazyLock;

use serde_json::Value;

use crate::config::PlannerResponseFormat;
use std::time::Duration;

use crate::llm::{ChatRequest, LlmClient, LlmError, Purpose, ResponseShape, parse_json_content};
use crate::plan::Diagnostic;

pub use draft::{DraftContext, RequiredFacet};
pub use prompt::{CompletedWork, PromptInput, Replan};

/// Planning rounds get this many drafts: the first, and one more that sees the first one's problems.
pub const DRAFT_ATTEMPTS: u32 = 2;

#[expect(clippy::expect_used, reason = "a compiled-in schema, checked by the planner's unit tests")]
static DRAFT_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    serde_json::from_str(include_str!("plan-draft.schema.json")).expect("built-in draft schema is JSON")
});

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

    /// Asks for one draft. The outer error is a failed call; the inner one a reply that is not JSON
    /// (a content problem, handled like any other rejected draft).
    pub async fn draft(
        &self,
        input: &PromptInput<'_>,
        timeout: Duration,
    ) -> Result<Result<Value, Diagnostic>, LlmError> {
        let slot = self.llm.slot().await;
        let (system, user) = prompt::build(input);
        let shape = match self.format {
            PlannerResponseFormat::JsonSchema => {
                ResponseShape::JsonSchema { name: "plan_draft", schema: &DRAFT_SCHEMA, or: None }
            }
            PlannerResponseFormat::JsonObject => ResponseShape::JsonObject,
            PlannerResponseFormat::None => ResponseShape::Text,
        };
        let content = slot.complete(ChatRequest { purpose: Purpose::Planner, system, user, shape, timeout }).await?;
        Ok(parse_json_content(&content).map_err(|problem| Diagnostic::not_json(&problem)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draft_schema_is_a_valid_json_schema() {
        assert!(jsonschema::validator_for(&DRAFT_SCHEMA).is_ok());
    }
}
