//! The planner: asks an OpenAI-compatible model for a plan draft. What it asks and how the answer
//! is checked is the core's ([`flexrun_core::planner`], re-exported here).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::config::PlannerResponseFormat;
use crate::llm::pool::ModelPool;
use crate::llm::route::RouteEntry;
use crate::llm::{ChatRequest, LlmError, Purpose, ResponseShape, SystemPrompt, parse_json_content};
use crate::plan::Diagnostic;
use flexrun_core::usage::Metered;

pub use flexrun_core::planner::*;

/// The planner: its route through the model pool.
#[derive(Clone)]
pub struct Planner {
    pool: Arc<ModelPool>,
    route: Vec<RouteEntry>,
}

/// A draft asked for: the call, and the model (`<endpoint>/<model>`'s model) that answered, else
/// the first the route asked.
pub struct Asked {
    pub called: Metered<Result<Result<Value, Diagnostic>, LlmError>>,
    pub model: String,
}

impl Planner {
    pub fn new(pool: Arc<ModelPool>, route: Vec<RouteEntry>) -> Self {
        Self { pool, route }
    }

    /// The pool the planner calls (a run's own chain is checked against it).
    pub fn pool(&self) -> &ModelPool {
        &self.pool
    }

    /// Asks for one draft along `chain` (else the planner's route), with the call's usage and
    /// fallbacks. The
    /// outer error is a failed call; the inner one a reply that is not JSON (a content problem,
    /// handled like any other rejected draft). Each endpoint is asked in its own answer format.
    pub async fn draft(&self, input: &PromptInput<'_>, timeout: Duration, chain: Option<&[RouteEntry]>) -> Asked {
        let (system, user) = prompt::build(input);
        let chain = chain.unwrap_or(&self.route);
        let routed = self
            .pool
            .complete(chain, |endpoint, model| ChatRequest {
                purpose: Purpose::Planner,
                model,
                system: SystemPrompt::Fixed(system),
                user: &user,
                shape: match endpoint.planner_format {
                    PlannerResponseFormat::JsonSchema => {
                        ResponseShape::JsonSchema { name: "plan_draft", schema: draft_schema(), or: None }
                    }
                    PlannerResponseFormat::JsonObject => ResponseShape::JsonObject,
                    PlannerResponseFormat::None => ResponseShape::Text,
                },
                timeout,
            })
            .await;
        let model = routed.answered_by.or_else(|| chain.first().cloned()).map(|e| e.model).unwrap_or_default();
        let called = routed
            .called
            .map(|content| Ok(parse_json_content(&content?).map_err(|problem| Diagnostic::not_json(&problem))));
        Asked { called, model }
    }
}
