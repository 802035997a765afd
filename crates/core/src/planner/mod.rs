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

/// The JSON Schema of a plan draft, as the model is asked to answer (`response_format`): written
/// once, compact, for every planning request.
pub fn draft_schema() -> &'static RawValue {
    #[expect(clippy::expect_used, reason = "a compiled-in schema, checked by the planner's unit tests")]
    static SCHEMA: LazyLock<Box<RawValue>> = LazyLock::new(|| {
        let schema: Value =
            serde_json::from_str(include_str!("plan-draft.schema.json")).expect("built-in draft schema is JSON");
        written(&schema)
    });
    &SCHEMA
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draft_schema_is_a_valid_json_schema() {
        let schema: Value = serde_json::from_str(draft_schema().get()).unwrap();
        assert!(jsonschema::validator_for(&schema).is_ok());
    }
}
