//! What a run begun through the LangGraph surface is to the handler that streams it — a new run, a
//! resumed one or one started from a checkpoint alike — and what its start writes on the thread.

use futures::stream::BoxStream;
use serde_json::Value;

use crate::run::RunId;
use crate::run::follow::FollowError;
use crate::run::state::RunState;
use crate::store::events::LoggedFrame;

/// What a run on a thread adds to the thread's metadata, as LangGraph does (Agent Chat UI's
/// thread list finds threads by it): `graph_id` and `assistant_id`, the one assistant.
pub const GRAPH_METADATA: &[(&str, &str)] = &[("graph_id", "\"flex\""), ("assistant_id", "\"flex\"")];

/// A run a request started or resumed, and what a stream of its frames starts from.
pub(super) struct Started {
    pub(super) run_id: RunId,
    /// The state its `frames` follow: a new run's before its first frame, a resumed run's
    /// before the answer.
    pub(super) state: RunState,
    pub(super) objective: String,
    /// The chat messages the run was started with, if it was started from a chat input.
    pub(super) chat: Option<Vec<Value>>,
    pub(super) frames: BoxStream<'static, Result<LoggedFrame, FollowError>>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::langgraph::request::ASSISTANT;

    #[test]
    fn the_graph_metadata_names_the_one_assistant() {
        let flex = json!(ASSISTANT).to_string();
        assert_eq!(GRAPH_METADATA, [("graph_id", flex.as_str()), ("assistant_id", flex.as_str())]);
    }
}
