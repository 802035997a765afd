//! Operator endpoints: answer a paused run (`run.resume`), replan or cancel a run, list and
//! decline human tasks. Every change goes through [`crate::run::apply`].

use std::sync::{Arc, LazyLock};

use actix_web::{HttpResponse, Responder, get, post, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::{Caller, Operator};
use super::body::Body;
use super::error::ApiError;
use super::paging::PageSize;
use super::sse::frame_stream;
use crate::budget::BudgetRaise;
use crate::error_code::ErrorCode;
use crate::events::payload::{HitlKind, RequestStatus};
use crate::run::operator::{Actor, Answer, Command};
use crate::run::{self, RunId, RunStatus};
use crate::services::Services;
use crate::store::StoreError;
use crate::store::hitl;
use crate::validation::{self, BodySchema, FieldError};

pub(super) static RESUME: LazyLock<BodySchema> =
    LazyLock::new(|| BodySchema::builtin(include_str!("schemas/resume.schema.json")));
pub(super) static REPLAN: LazyLock<BodySchema> =
    LazyLock::new(|| action_schema(&["feedback", "note", "operator"], &[]));
pub(super) static CANCEL: LazyLock<BodySchema> = LazyLock::new(|| action_schema(&["note", "operator"], &[]));
pub(super) static DECLINE: LazyLock<BodySchema> =
    LazyLock::new(|| action_schema(&["reason", "note", "operator"], &["reason"]));

/// The shared operator-action schema narrowed to the fields one endpoint takes.
fn action_schema(fields: &[&str], required: &[&str]) -> BodySchema {
    let mut schema: Value = serde_json::from_str(include_str!("schemas/operator-action.schema.json"))
        .unwrap_or_else(|e| panic!("built-in schema is JSON: {e}")); // ok: compiled-in, unit-tested
    if let Some(properties) = schema["properties"].as_object_mut() {
        properties.retain(|name, _| fields.contains(&name.as_str()));
    }
    schema["required"] = json!(required);
    BodySchema::builtin(&schema.to_string())
}

fn text(body: &Value, pointer: &str) -> Option<String> {
    body.pointer(pointer).and_then(Value::as_str).map(String::from)
}

fn actor(operator: &Operator, body: &Value) -> Actor {
    Actor {
        principal: operator.0.principal.clone(),
        operator: body.get("operator").cloned(),
        note: text(body, "/note"),
    }
}

/// The answer a `run.resume` body carries: a `decision` or a human task's `payload`, not both.
pub fn answer(body: &Value) -> Result<Answer, ApiError> {
    let one_of = |message: &str| ApiError::Refused {
        code: ErrorCode::InvalidRequest,
        message: format!("invalid request body: {message}"),
        details: vec![FieldError::new("", "one_of", message)],
    };
    match (body.get("decision"), body.get("payload")) {
        (Some(decision), None) => Ok(Answer::Decide {
            request_id: text(decision, "/requestId"),
            approved: decision["approved"].as_bool().unwrap_or_default(),
            feedback: text(decision, "/freeformText"),
            budget: raise(decision.get("budget"))?,
        }),
        (None, Some(payload)) => {
            let node_id = text(payload, "/nodeId").unwrap_or_default();
            let request_id = text(payload, "/requestId");
            match (payload.get("output"), payload.get("decline")) {
                (Some(output), None) => Ok(Answer::Submit { request_id, node_id, output: output.clone() }),
                (None, Some(declined)) => Ok(Answer::Decline {
                    request_id,
                    node_id,
                    reason: text(declined, "/reason").unwrap_or_default(),
                    note: text(declined, "/note"),
                }),
                _ => Err(one_of("`payload` needs exactly one of `output` and `decline`")),
            }
        }
        (Some(_), Some(_)) => Err(one_of("send either `decision` (an approval) or `payload` (a human task), not both")),
        (None, None) => Err(one_of("send `decision` (to answer an approval) or `payload` (for a human task)")),
    }
}

/// A decision's `budget` (the schema checked its shape): the raised limits.
pub fn raise(budget: Option<&Value>) -> Result<Option<BudgetRaise>, ApiError> {
    budget
        .map(|b| validation::decode(b, "/decision/budget"))
        .transpose()
        .map_err(|e| ApiError::invalid_request(vec![e]))
}

/// `POST /api/v1/flex/run.resume`: answers the request a paused run waits on and streams what
/// follows, from the `hitl_resolved` frame until the run ends or pauses again.
#[post("/run.resume")]
pub async fn resume(operator: Operator, body: Body, services: web::Data<Services>) -> Result<impl Responder, ApiError> {
    let body = body.checked(&RESUME)?;
    let run_id = text(&body, "/runId").unwrap_or_default();
    let run_id =
        RunId::parse(&run_id).map_err(|_| ApiError::not_found(ErrorCode::RunNotFound, format!("run {run_id}")))?;
    // A version beyond any a run reaches (`1e30` too, which no integer type holds) is stale, like
    // any other wrong one.
    let expected_plan_version =
        body.get("expectedPlanVersion").map(|v| v.as_u64().and_then(|v| u32::try_from(v).ok()).unwrap_or(u32::MAX));
    let command = Command::Resume { expected_plan_version, answer: answer(&body)?, actor: actor(&operator, &body) };
    let services: Arc<Services> = services.into_inner();
    let applied = run::apply(&services, &run_id, command).await?;
    Ok(frame_stream(applied.frames, &services.redaction, &services.backlogs)
        .customize()
        .insert_header(("x-flexrun-run-id", run_id.to_string())))
}

/// `POST /api/v1/flex/runs/{id}/replan`: drops the plan a paused run waits with and plans again
/// in the background (`operator_replan`, with the feedback in the planner prompt).
#[post("/runs/{id}/replan")]
pub async fn replan(
    operator: Operator,
    id: web::Path<RunId>,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let body = body.checked(&REPLAN)?;
    let command = Command::Replan { feedback: text(&body, "/feedback"), actor: actor(&operator, &body) };
    let run_id = id.into_inner();
    let applied = run::apply(&services.into_inner(), &run_id, command).await?;
    Ok(HttpResponse::Ok().json(json!({"runId": run_id, "status": applied.status})))
}

/// `POST /api/v1/flex/runs/{id}/cancel`: stops the run (in-flight calls are dropped) and ends it
/// `cancelled`. Answers with the final status.
#[post("/runs/{id}/cancel")]
pub async fn cancel(
    operator: Operator,
    id: web::Path<RunId>,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let body = body.checked(&CANCEL)?;
    let run_id = id.into_inner();
    let command = Command::Cancel { stopped: false, actor: actor(&operator, &body) };
    let applied = run::apply(&services.into_inner(), &run_id, command).await?;
    Ok(HttpResponse::Ok().json(json!({"runId": run_id, "status": applied.status})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksQuery {
    limit: Option<i64>,
}

/// `GET /api/v1/flex/tasks`: open human tasks, oldest first.
#[get("/tasks")]
pub async fn tasks(
    caller: Caller,
    query: web::Query<TasksQuery>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let limit = PageSize { default: 100, max: 1000 }.of_query(query.limit)?;
    let owner = caller.owner_filter().map(String::from);
    let rows =
        services.store.read(move |conn| hitl::open(conn, limit, Some(HitlKind::HumanTask), owner.as_deref())).await?;
    let tasks: Vec<Value> = rows
        .iter()
        .map(|row| {
            let details: Value = serde_json::from_str(&row.details).unwrap_or(Value::Null);
            json!({
                "taskId": row.request_id, "runId": row.run_id, "nodeId": row.node_id,
                "planVersion": row.plan_version, "status": "awaiting_submission",
                "capabilityId": details["context"]["capabilityId"], "label": details["context"]["label"],
                "question": row.question, "createdAt": row.created_at.and_utc(), "assignment": details["context"],
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(services.redaction.value(json!({"count": tasks.len(), "tasks": tasks}))))
}

/// `POST /api/v1/flex/tasks/{id}/decline` `{reason, note?, operator?}`: refuses a human task;
/// the run fails (`human_task_declined`).
#[post("/tasks/{id}/decline")]
pub async fn decline(
    operator: Operator,
    id: web::Path<String>,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let body = body.checked(&DECLINE)?;
    let task_id = id.into_inner();
    let lookup = task_id.clone();
    let task = services.store.read(move |conn| hitl::get(conn, &lookup)).await.map_err(|e| match e {
        StoreError::NotFound(_) => ApiError::not_found(ErrorCode::TaskNotFound, format!("task {task_id}")),
        other => other.into(),
    })?;
    if task.kind != HitlKind::HumanTask || task.status != RequestStatus::Pending {
        return Err(ApiError::new(
            ErrorCode::InvalidTaskState,
            format!(
                "task {} is a {} request that is {}, not an open human task",
                task.request_id, task.kind, task.status
            ),
        ));
    }
    let node_id = task.node_id.clone().unwrap_or_default();
    // The task read above: if the run has moved on to another request since, it is refused.
    let answer = Answer::Decline {
        request_id: Some(task.request_id.clone()),
        node_id: node_id.clone(),
        reason: text(&body, "/reason").unwrap_or_default(),
        note: text(&body, "/note"),
    };
    let command = Command::Resume { expected_plan_version: None, answer, actor: actor(&operator, &body) };
    let run_id = RunId::parse(&task.run_id).map_err(ApiError::internal)?;
    let applied = run::apply(&services.into_inner(), &run_id, command).await?;
    Ok(HttpResponse::Ok().json(json!({
        "ok": applied.status == RunStatus::Failed, "status": applied.status, "runId": task.run_id, "nodeId": node_id,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_compile_and_narrow() {
        assert!(RESUME.check(&json!({"runId": "r", "decision": {"approved": true}})).is_empty());
        assert_eq!(RESUME.check(&json!({"decision": {"approved": "yes"}})).len(), 2);
        assert!(REPLAN.check(&json!({"feedback": "f"})).is_empty());
        assert_eq!(CANCEL.check(&json!({"feedback": "f"}))[0].code, "unknown_field");
        assert_eq!(DECLINE.check(&json!({}))[0].path, "/reason");
    }

    #[test]
    fn answers() {
        let decide = answer(&json!({"decision": {"approved": false, "freeformText": "shorter"}})).unwrap();
        assert_eq!(
            decide,
            Answer::Decide { request_id: None, approved: false, feedback: Some("shorter".into()), budget: None }
        );
        assert!(answer(&json!({})).is_err());
        assert!(answer(&json!({"decision": {"approved": true}, "payload": {"nodeId": "n", "output": {}}})).is_err());
        assert!(answer(&json!({"payload": {"nodeId": "n"}})).is_err());
    }
}
