//! The JSON Schemas the document shows: request bodies as the handlers check them, and every
//! response body.

use serde_json::{Map, Value, json};

use crate::error_code::ErrorCode;
use crate::events::FrameKind;
use crate::run::RunStatus;

pub(super) fn any_object() -> Value {
    json!({"type": "object"})
}

/// A request body schema as the handlers use it, without the keys that only a standalone schema
/// document has; its local definitions (`#/$defs/…`, which would point into the OpenAPI document
/// once embedded) are written in place.
fn embedded(schema: &Value) -> Value {
    let mut schema = schema.clone();
    let defs = schema.as_object_mut().and_then(|object| {
        object.remove("$schema");
        object.remove("$id");
        object.remove("$defs")
    });
    if let Some(defs) = defs {
        inline(&mut schema, &defs);
    }
    schema
}

/// Replaces every `{"$ref": "#/$defs/<name>"}` in `schema` by that definition.
fn inline(schema: &mut Value, defs: &Value) {
    let target = schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/"));
    if let Some(definition) = target.and_then(|name| defs.get(name)) {
        *schema = definition.clone();
    }
    match schema {
        Value::Object(object) => object.values_mut().for_each(|value| inline(value, defs)),
        Value::Array(items) => items.iter_mut().for_each(|value| inline(value, defs)),
        _ => {}
    }
}

pub(super) fn envelope() -> Value {
    embedded(crate::envelope::schema())
}

pub(super) fn registration() -> Value {
    embedded(crate::capability::schema())
}

pub(super) fn resume() -> Value {
    embedded(crate::http::operator::RESUME.document())
}

pub(super) fn replan() -> Value {
    embedded(crate::http::operator::REPLAN.document())
}

pub(super) fn cancel() -> Value {
    embedded(crate::http::operator::CANCEL.document())
}

pub(super) fn fork() -> Value {
    embedded(crate::http::fork::FORK.document())
}

pub(super) fn decline() -> Value {
    embedded(crate::http::operator::DECLINE.document())
}

pub(super) fn compile_request() -> Value {
    json!({"type": "object", "required": ["dsl"], "additionalProperties": false,
           "properties": {"dsl": {"type": "string"}, "relative": {"type": "boolean"}}})
}

pub(super) fn error() -> Value {
    let detail = json!({"type": "object", "required": ["path", "code", "message"],
                        "properties": {"path": {"type": "string"}, "code": {"type": "string"},
                                       "message": {"type": "string"}, "range": {"type": "object"}}});
    json!({"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["code", "message", "details"],
        "properties": {"code": error_code(), "message": {"type": "string"},
                       "details": {"type": "array", "items": detail}}}}})
}

/// An error's `code`: one of [`ErrorCode::ALL`], each described with the status it comes with
/// (`x-enumDescriptions`, as documentation tools read it); the name answered with two statuses
/// is listed once, with both.
fn error_code() -> Value {
    let mut described = Map::new();
    for code in ErrorCode::ALL {
        let line = format!("{}: {}", code.status(), code.description());
        let text = match described.get(code.as_str()).and_then(Value::as_str) {
            Some(earlier) => format!("{earlier} {line}"),
            None => line,
        };
        described.insert(code.as_str().to_string(), Value::String(text));
    }
    json!({"type": "string", "enum": described.keys().collect::<Vec<_>>(), "x-enumDescriptions": described})
}

pub(super) fn health() -> Value {
    json!({"type": "object", "required": ["status", "version", "timestamp", "uptimeSeconds", "services"],
           "properties": {"status": {"enum": ["healthy", "degraded"]}, "version": {"type": "string"},
                          "timestamp": {"type": "string"}, "uptimeSeconds": {"type": "integer"},
                          "services": {"type": "object"}}})
}

/// One Server-Sent Event: a frame (JSON) in `data`, its type in `event`, its seq in `id`.
pub(super) fn event() -> Value {
    json!({"type": "object", "required": ["data", "event", "id"],
           "properties": {"data": {"type": "string", "contentMediaType": "application/json"},
                          "event": {"enum": FrameKind::names().collect::<Vec<_>>()},
                          "id": {"type": "string", "pattern": "^[1-9][0-9]*$"}}})
}

/// A run's status: one of the statuses the state machine has.
fn run_status() -> Value {
    json!({"enum": RunStatus::ALL.map(RunStatus::as_str)})
}

fn nullable(kind: &str) -> Value {
    json!({"type": [kind, "null"]})
}

/// What model calls used and cost (`flexrun_core::usage`): a count a call did not report, or a
/// cost of a model without a price, is `null`.
fn usage() -> Value {
    let count = nullable("integer");
    let tally = json!({"calls": {"type": "integer", "minimum": 0}, "inputTokens": count, "outputTokens": count,
                       "cachedInputTokens": count, "reasoningTokens": count,
                       "costUsd": {"type": ["number", "null"], "minimum": 0,
                                   "description": "US dollars, rounded to 1e-6"},
                       "known": {"type": "object", "required": ["totalTokens", "costUsd"],
                                 "description": "where a sum mixes known and null figures: the tokens and cost \
                                                 of the calls that reported or were priced (what a budget counts)",
                                 "properties": {"totalTokens": {"type": "integer", "minimum": 0},
                                                "costUsd": {"type": "number", "minimum": 0}}}});
    let mut properties = tally.as_object().cloned().unwrap_or_default();
    properties.insert("models".into(), json!({"type": "array", "items": {"type": "string"}}));
    properties.insert(
        "byModel".into(),
        json!({"type": "object", "additionalProperties": {"type": "object", "properties": tally}}),
    );
    json!({"type": "object", "required": ["calls", "inputTokens", "outputTokens", "cachedInputTokens",
                                          "reasoningTokens", "costUsd", "models"],
           "properties": properties})
}

/// A run's spending budget (`policies.budget`, `docs/usage.md`) and what counts against it.
fn budget() -> Value {
    let limit = |kind: &str| json!({"type": kind, "exclusiveMinimum": 0});
    json!({"type": "object", "required": ["onExceeded", "spent"],
           "properties": {"maxCostUsd": limit("number"), "maxTokens": limit("integer"),
                          "maxModelCalls": limit("integer"), "onExceeded": {"enum": ["pause", "fail"]},
                          "spent": {"type": "object", "required": ["modelCalls", "totalTokens", "costUsd"],
                                    "properties": {"modelCalls": {"type": "integer"}, "totalTokens": {"type": "integer"},
                                                   "costUsd": {"type": "number"}}}}})
}

pub(super) fn run_list() -> Value {
    let entry = json!({"type": "object",
        "required": ["runId", "status", "objective", "planVersion", "replans", "createdAt", "updatedAt"],
        "properties": {"runId": {"type": "string"}, "status": run_status(), "objective": {"type": "string"},
                       "threadId": nullable("string"), "planVersion": {"type": "integer"},
                       "replans": {"type": "integer"}, "error": nullable("string"),
                       "maxReplans": nullable("integer"), "usage": usage(),
                       "createdAt": {"type": "string"}, "updatedAt": {"type": "string"}}});
    json!({"type": "object", "required": ["runs", "nextCursor"],
           "properties": {"runs": {"type": "array", "items": entry}, "nextCursor": nullable("string")}})
}

pub(super) fn run_document() -> Value {
    let array = json!({"type": "array", "items": {"type": "object"}});
    json!({"type": "object", "required": ["run", "envelope", "planVersions", "nodes", "outputs", "hitlRequests"],
           "properties": {
               "run": {"type": "object", "required": ["runId", "status", "objective", "planVersion"],
                       "properties": {"runId": {"type": "string"}, "status": {"type": "string"},
                                      "objective": {"type": "string"}, "planVersion": {"type": "integer"},
                                      "usage": usage(), "budget": budget()}},
               "envelope": {"type": "object"}, "planVersions": array, "nodes": array,
               "outputs": array, "hitlRequests": array,
               "lease": {"type": "object", "description": "Several nodes on PostgreSQL only: which node drives the run",
                         "required": ["owner", "epoch", "crashAttempts"],
                         "properties": {"owner": nullable("string"), "epoch": {"type": "integer"},
                                        "expiresAt": nullable("string"), "crashAttempts": {"type": "integer"}}}}})
}

pub(super) fn command_result() -> Value {
    json!({"type": "object", "required": ["runId", "status"],
           "properties": {"runId": {"type": "string"}, "status": {"type": "string"}}})
}

pub(super) fn task_list() -> Value {
    json!({"type": "object", "required": ["count", "tasks"],
           "properties": {"count": {"type": "integer"}, "tasks": {"type": "array", "items": {"type": "object",
               "required": ["taskId", "runId", "status"],
               "properties": {"taskId": {"type": "string"}, "runId": {"type": "string"}, "status": {"type": "string"}}}}}})
}

pub(super) fn declined() -> Value {
    json!({"type": "object", "required": ["ok", "status", "runId", "nodeId"],
           "properties": {"ok": {"type": "boolean"}, "status": {"type": "string"},
                          "runId": {"type": "string"}, "nodeId": {"type": "string"}}})
}

pub(super) fn run_value() -> Value {
    json!({"type": "object", "required": ["runId", "pointer", "value"],
           "properties": {"runId": {"type": "string"}, "pointer": {"type": "string"}, "value": {}}})
}

pub(super) fn events_page() -> Value {
    json!({"type": "object", "required": ["runId", "events", "nextAfter", "hasMore"],
           "properties": {"runId": {"type": "string"}, "events": {"type": "array", "items": {"type": "object"}},
                          "nextAfter": {"type": "integer"}, "hasMore": {"type": "boolean"}}})
}

fn capability() -> Value {
    json!({"type": "object", "required": ["capabilityId", "version", "displayName", "kind", "agentType", "status"],
           "properties": {"capabilityId": {"type": "string"}, "version": {"type": "string"},
                          "displayName": {"type": "string"}, "kind": {"type": "string"},
                          "agentType": {"enum": ["ai", "http", "human"]}, "status": {"type": "string"}}})
}

pub(super) fn capability_list() -> Value {
    json!({"type": "object", "required": ["capabilities", "count"],
           "properties": {"capabilities": {"type": "array", "items": capability()}, "count": {"type": "integer"}}})
}

pub(super) fn registered() -> Value {
    json!({"type": "object", "required": ["ok", "capability", "registry"],
           "properties": {"ok": {"const": true}, "capability": capability(),
                          "registry": registry_count()}})
}

pub(super) fn unregistered() -> Value {
    json!({"type": "object", "required": ["ok", "capabilityId", "registry"],
           "properties": {"ok": {"const": true}, "capabilityId": {"type": "string"}, "registry": registry_count()}})
}

/// How many capabilities the registry offers after a registration or an unregistration.
fn registry_count() -> Value {
    json!({"type": "object", "required": ["count"], "properties": {"count": {"type": "integer"}}})
}

pub(super) fn compiled() -> Value {
    json!({"type": "object", "required": ["jsonLogic", "canonicalDsl", "variables", "warnings"],
           "properties": {"jsonLogic": {}, "canonicalDsl": {"type": "string"},
                          "variables": {"type": "array", "items": {"type": "string"}},
                          "warnings": {"type": "array"}}})
}

pub(super) fn variables() -> Value {
    json!({"type": "object", "required": ["variables"],
           "properties": {"variables": {"type": "array", "items": {"type": "object", "required": ["path"],
               "properties": {"path": {"type": "string"}}}}}})
}
