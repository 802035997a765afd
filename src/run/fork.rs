//! Forking a run (`POST /runs/{id}/fork`, a LangGraph run from a `checkpoint_id`): the parent's
//! log read back, the fork point resolved by the core ([`flexrun_core::run::fork`]), replaced
//! outputs checked against their capabilities' contracts, and the new run created with the
//! parent's plan installed and the reused nodes completed in its first commit
//! ([`super::lifecycle::start_fork`]). From there a fork is a run like any other.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::lifecycle::{self, Origin, StartError, StartedRun};
use super::stored::{ResumeError, Stored};
use crate::capability::check_output;
use crate::envelope::TaskEnvelope;
use crate::run::RunId;
use crate::services::Services;
use crate::store::StoreError;
use crate::validation::FieldError;
use flexrun_core::capability::CapabilityError;
use flexrun_core::run::fork::{self, ForkChanges, ForkPlan, ForkPoint, ParentLog};

/// What a fork asks for.
#[derive(Debug)]
pub struct ForkOrder {
    pub point: ForkPoint,
    /// The fork's envelope; the parent's when not given.
    pub envelope: Option<TaskEnvelope>,
    /// Outputs replacing those of completed nodes, by node id.
    pub outputs: BTreeMap<String, Value>,
}

/// Why no fork was made.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// The request names a point or output the parent does not have: each problem with the
    /// pointer of the request's field.
    #[error("{}", .0.first().map_or("invalid fork", |e| e.message.as_str()))]
    Refused(Vec<FieldError>),
    #[error(transparent)]
    Start(#[from] StartError),
    /// The parent's log or envelope cannot be read back.
    #[error(transparent)]
    Unreadable(#[from] ResumeError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Starts the fork [`prepare`] made, as `origin` says. The fork's envelope may name a thread
/// (its own `constraints.threadId`, or the parent's it inherits): the caller has taken that
/// thread for the fork's owner first, as for any run it starts (`origin.owner`,
/// `origin.thread_rule`) — a fork is a run on its thread like any other.
pub async fn start(
    services: &Arc<Services>,
    (plan, envelope): (ForkPlan, TaskEnvelope),
    origin: Origin<'_>,
) -> Result<StartedRun, ForkError> {
    Ok(lifecycle::start_fork(services, envelope, plan, origin).await?)
}

/// Reads run `run_id` back to fork it: its row, and what a fork needs of its log.
pub async fn read_parent(services: &Services, run_id: &RunId) -> Result<(Stored, ParentLog), ForkError> {
    match Stored::read_with(services, run_id, ParentLog::default()).await? {
        (parent, Some(log)) => Ok((parent, log)),
        (parent, None) => Err(parent.state().err().unwrap_or(ResumeError::NotStarted).into()),
    }
}

/// The fork's plan and envelope, every check done: nothing is created before this succeeds.
pub fn prepare(
    services: &Services,
    (parent, log): &(Stored, ParentLog),
    order: ForkOrder,
) -> Result<(ForkPlan, TaskEnvelope), ForkError> {
    let inherited = parent.envelope(services)?;
    let envelope = order.envelope.unwrap_or_else(|| inherited.clone());
    let changes = ForkChanges { changed_inputs: changed(&inherited.inputs, &envelope.inputs), outputs: order.outputs };
    let plan = fork::resolve(parent.id.as_str(), log, &order.point, &changes)
        .map_err(|e| ForkError::Refused(vec![FieldError::new(e.pointer(), "invalid_fork", e.to_string())]))?;
    let problems: Vec<FieldError> = plan
        .reused
        .iter()
        .filter(|reused| reused.from.replaced)
        .flat_map(|reused| output_problems(services, &reused.node_id, &reused.capability_id, &reused.output))
        .collect();
    if !problems.is_empty() {
        return Err(ForkError::Refused(problems));
    }
    Ok((plan, envelope))
}

/// What is wrong with `output` as node `node_id`'s (its capability's output contract), each
/// problem at its pointer under `/outputs/<node>`.
fn output_problems(services: &Services, node_id: &str, capability_id: &str, output: &Value) -> Vec<FieldError> {
    let at = format!("/outputs/{}", node_id.replace('~', "~0").replace('/', "~1"));
    let Some(capability) = services.registry.snapshot().get(capability_id).cloned() else {
        let message = format!("capability {capability_id} is no longer registered: its output cannot be checked");
        return vec![FieldError::new(at, "invalid_fork", message)];
    };
    match check_output(&capability.output_contract, output) {
        Ok(()) => Vec::new(),
        Err(CapabilityError::Contract(violations)) => violations
            .into_iter()
            .map(|v| FieldError::new(format!("{at}{}", v.instance_path), "invalid_output", v.message))
            .collect(),
        Err(other) => vec![FieldError::new(at, "invalid_output", other.to_string())],
    }
}

/// The input facets whose values differ between two envelopes (added and removed ones too).
fn changed(before: &Map<String, Value>, after: &Map<String, Value>) -> BTreeSet<String> {
    before.keys().chain(after.keys()).filter(|key| before.get(*key) != after.get(*key)).cloned().collect()
}
