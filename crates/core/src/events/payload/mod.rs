//! Payloads of each frame type. Their field names are the wire format (`docs/api.md`, "Frames"):
//! renaming one breaks clients and stored event logs.
//!
//! Every payload is read back with the same types it is written with: a stored or received frame
//! decodes into the typed [`Event`](super::Event) ([`super::DecodedFrame`]). Where a payload carries
//! a free-form object (`log.details`, a request's `context`, a human node's `assignment`), the
//! typed views of its known shapes are here too, so no reader looks into a payload by key.

mod node;
mod plan;
mod replan;
mod request;
mod run;

use serde::de::DeserializeOwned;
use serde_json::Value;

pub use crate::capability::ExecutorType;
pub use crate::plan::Phase;
pub use crate::run::fork::{ForkedFrom, ReusedFrom};
pub use crate::runtime_policy::TriggerKind;
pub use node::{
    CANCELLED, ErrorInfo, Facets, GoalConditionFailed, HUMAN_OUTPUT_INVALID, NodeComplete, NodeError, NodeStart,
    PostConditionSummary, Retry, RetryScope, ValidationError, ValidationScope,
};
pub use plan::{
    CapabilityStatus, CapabilitySummary, PlanGenerated, PlanRejected, PlanRequested, PlanUpdated, PlanView, Trigger,
};
pub use replan::{FailedNode, PolicyInfo, PolicyTriggered, PolicyUpdate, ReplanInfo, ReplanReason, SignalInfo};
pub use request::{
    BudgetPhase, BudgetRequest, ClosedRequest, DecisionInfo, HUMAN_TASK_QUESTION, HitlKind, HitlRequest,
    HitlRequestInfo, HitlResolved, HitlSubject, PolicyRequest, QuestionContext, RequestStatus, Verdict,
};
pub use run::{BudgetExceeded, Complete, CompleteStatus, Log, Pause, Resumed, Start};

/// A JSON value read as `T`, if it has that shape.
fn typed<T: DeserializeOwned>(value: &Value) -> Option<T> {
    T::deserialize(value).ok()
}
