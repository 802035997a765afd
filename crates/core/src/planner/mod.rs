//! The planner's pure half: [`prompt`] builds the request from named sections, [`draft`]
//! validates and compiles the answer into a plan. The server's planner client makes the call; the
//! attempt loop (one retry with the diagnostics of a rejected draft) and the frames it emits
//! belong to the run's decisions.

pub mod draft;
pub mod prompt;

use std::sync::LazyLock;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::llm::written::written;

pub use draft::{DraftContext, RequiredFacet};
pub use prompt::{CompletedWork, PromptInput, Replan};

/// Planning rounds get this many drafts: the first, and one more that sees the first one's problems.
pub const DRAFT_ATTEMPTS: u32 = 2;

#[expect(clippy::expect_used, reason = "a compiled-in schema, checked by the planner's unit tests")]
static DRAFT_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    serde_json::from_str(include_str!("plan-draft.schema.json")).expect("built-in draft schema is JSON")
});

/// The JSON Schema of a plan draft, as the model is asked to answer (`response_format`).
pub fn draft_schema() -> &'static Value {
    &DRAFT_SCHEMA
}

/// [`draft_schema`] as JSON, written once: it is sent with every planning request.
pub fn draft_schema_json() -> &'static RawValue {
    static JSON: LazyLock<Box<RawValue>> = LazyLock::new(|| written(draft_schema()));
    &JSON
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draft_schema_is_a_valid_json_schema() {
        assert!(jsonschema::validator_for(draft_schema()).is_ok());
    }
}
