//! The inbox read model: every decision operators owe, across runs, oldest first — plan and
//! result approvals, runtime-policy pauses, questions, human tasks.

use chrono::{DateTime, Utc};

use crate::events::payload::{HitlKind, HitlRequestInfo};
use crate::hash::HashMap;
use crate::services::Services;
use crate::store::hitl::RequestRow;
use crate::store::{StoreError, hitl, runs};

/// Decisions an inbox shows at most.
pub const LIMIT: i64 = 200;

/// One pending request and the run it holds up.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub request_id: String,
    pub run_id: String,
    pub objective: String,
    pub kind: HitlKind,
    /// `plan`, `completion`, `policy` or `node`.
    pub subject: String,
    pub question: String,
    pub plan_version: i32,
    /// The node a question or human task comes from.
    pub node_id: Option<String>,
    /// A human task's capability, whose output contract its answer must meet.
    pub capability_id: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// The pending requests, oldest first (of `owner`'s runs, if given).
pub async fn read(services: &Services, owner: Option<String>) -> Result<Vec<Pending>, StoreError> {
    services
        .store
        .read(move |conn| {
            let requests = hitl::open(conn, LIMIT, None, owner.as_deref())?;
            let ids: Vec<String> = requests.iter().map(|r| r.run_id.clone()).collect();
            let objectives: HashMap<String, String> = runs::objectives(conn, &ids)?.into_iter().collect();
            let mut pending = Vec::with_capacity(requests.len());
            for r in requests {
                let capability_id = match r.kind {
                    HitlKind::HumanTask => capability_of(&r),
                    _ => None,
                };
                pending.push(Pending {
                    objective: objectives.get(&r.run_id).cloned().unwrap_or_default(),
                    request_id: r.request_id,
                    run_id: r.run_id,
                    kind: r.kind,
                    subject: r.subject,
                    question: r.question,
                    plan_version: r.plan_version,
                    node_id: r.node_id,
                    capability_id,
                    created_at: r.created_at.and_utc(),
                });
            }
            Ok(pending)
        })
        .await
}

/// The capability of a human task's node, as its request's assignment names it.
fn capability_of(request: &RequestRow) -> Option<String> {
    let info: HitlRequestInfo = serde_json::from_str(&request.details).ok()?;
    info.node_context().map(|node| node.capability_id)
}
