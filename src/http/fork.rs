//! `POST /api/v1/flex/runs/{id}/fork`: a new run from a point of another, streamed like
//! `run.stream`.

use std::sync::{Arc, LazyLock};

use actix_web::{HttpRequest, Responder, post, web};
use serde_json::{Value, json};

use super::auth::Caller;
use super::body::Body;
use super::error::ApiError;
use super::idempotency;
use super::runs::{correlation_id, run_owner, started, visible};
use crate::envelope::{self, EnvelopeError};
use crate::run::fork::{self, ForkOrder};
use crate::run::{Origin, RunId};
use crate::services::Services;
use crate::thread::ThreadRule;
use crate::validation::{BodySchema, FieldError};
use flexrun_core::run::fork::ForkPoint;

pub(super) static FORK: LazyLock<BodySchema> =
    LazyLock::new(|| BodySchema::builtin(include_str!("schemas/fork.schema.json")));

/// `POST /api/v1/flex/runs/{id}/fork` `{fromVersion?, fromNode?, envelope?, outputs?,
/// idempotencyKey?}`: forks a run its caller may see (an operator any run) and streams the new
/// run's frames. Nothing is created unless every part of the request holds. The fork is a run on
/// its envelope's thread like one `run.stream` starts, and so is the thread owner's.
#[post("/runs/{id}/fork")]
pub async fn fork_run(
    req: HttpRequest,
    caller: Caller,
    id: web::Path<RunId>,
    body: Body,
    services: web::Data<Services>,
) -> Result<impl Responder, ApiError> {
    let request = body.checked(&FORK)?;
    let parent_id = id.into_inner();
    visible(&services, &caller, &parent_id).await?;
    let order = order(&request, &services)?;
    // The run forked is part of the request: one key forking two runs is a key reused.
    let hashed = json!({"fork": parent_id, "request": request}).to_string();
    let idempotency = match request.get("idempotencyKey").and_then(Value::as_str) {
        Some(key) => Some(idempotency::of_key(key, &caller, hashed.as_bytes())?),
        None => idempotency::from_request(&req, &caller, hashed.as_bytes())?,
    };
    let correlation_id = correlation_id(&req)?;
    let services: Arc<Services> = services.into_inner();
    // A fork folds its parent's whole log (a page at a time), keeping its plans and completed
    // nodes: a permit of the whole-run reads bounds how many are read at once.
    let reading = services.run_reads.acquire().await;
    let parent = fork::read_parent(&services, &parent_id).await?;
    let (plan, envelope) = fork::prepare(&services, &parent, order)?;
    drop((parent, reading));
    // The fork's thread — its envelope's, or the parent's it inherits — is taken as `run.stream`
    // takes one: forking a run of one's own must not put a run on another caller's thread.
    let owner = run_owner(&services, &caller, &envelope, "/envelope").await?;
    let origin =
        Origin { correlation_id, idempotency, owner: &owner, thread_rule: ThreadRule::Shared, trace_parent: None };
    let run = fork::start(&services, (plan, envelope), origin).await?;
    Ok(started(run, &services))
}

/// The fork's order from a request its schema accepted; a given envelope is validated like a
/// new run's (its problems under `/envelope`).
fn order(request: &Value, services: &Services) -> Result<ForkOrder, ApiError> {
    let envelope = match request.get("envelope") {
        None => None,
        Some(value) => Some(envelope::from_value(value.clone(), &services.registry.catalog()).map_err(under_envelope)?),
    };
    let point = ForkPoint {
        from_version: request.get("fromVersion").and_then(Value::as_u64).and_then(|v| u32::try_from(v).ok()),
        from_node: request.get("fromNode").and_then(Value::as_str).map(String::from),
        as_of: None,
    };
    let outputs = request.get("outputs").and_then(Value::as_object).cloned().unwrap_or_default().into_iter().collect();
    Ok(ForkOrder { point, envelope, outputs })
}

/// An envelope's problems at their place in the fork request.
fn under_envelope(error: EnvelopeError) -> ApiError {
    let moved = |errors: Vec<FieldError>| {
        errors.into_iter().map(|e| FieldError { path: format!("/envelope{}", e.path), ..e }).collect()
    };
    match error {
        EnvelopeError::Invalid(errors) => EnvelopeError::Invalid(moved(errors)).into(),
        EnvelopeError::InvalidConditionDsl(errors) => EnvelopeError::InvalidConditionDsl(moved(errors)).into(),
        other => other.into(),
    }
}
