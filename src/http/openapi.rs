//! The OpenAPI 3.1 document of the HTTP API, served at `GET /api/v1/openapi.json`.
//!
//! It is built from [`ENDPOINTS`], the table the router also answers 405s from (a test checks
//! every entry reaches its handler), and from the very JSON Schemas the handlers validate request
//! bodies with; so an endpoint or a body rule cannot change without the document changing too.
//! Response schemas are written here; CI fuzzes the running server against the document
//! (`scripts/fuzz-api`), which fails on any response that does not match it.

use actix_web::http::Method;
use serde_json::{Map, Value, json};

/// Who may call an endpoint.
#[derive(Clone, Copy, PartialEq)]
pub enum Access {
    /// No key needed (health, metrics, this document).
    Public,
    /// Any caller key (when keys are configured).
    Caller,
    /// An operator key.
    Operator,
}

/// What a successful call answers.
#[derive(Clone, Copy)]
pub enum Success {
    /// JSON with this status and schema.
    Json(u16, fn() -> Value),
    /// Server-Sent Events, one frame each (`id: <seq>`).
    Events,
    /// Prometheus text.
    Text,
}

/// A request body: its schema (the one the handler checks it with).
#[derive(Clone, Copy)]
pub enum RequestBody {
    Required(fn() -> Value),
    /// May be empty (an empty body is `{}`).
    Optional(fn() -> Value),
}

/// One endpoint: what the router serves and the document describes.
pub struct Endpoint {
    pub method: Method,
    pub path: &'static str,
    id: &'static str,
    summary: &'static str,
    access: Access,
    /// Query parameters: name, JSON Schema type, description.
    query: &'static [(&'static str, &'static str, &'static str)],
    /// Headers read: name, description.
    headers: &'static [(&'static str, &'static str)],
    body: Option<RequestBody>,
    success: Success,
    /// Error statuses besides the ones every endpoint of its kind has (see [`errors`]).
    errors: &'static [u16],
}

/// Every endpoint, in the order the API documentation lists them.
pub const ENDPOINTS: [Endpoint; 18] = [
    Endpoint {
        method: Method::GET,
        path: "/metrics",
        id: "metrics",
        summary: "Prometheus metrics",
        access: Access::Public,
        query: &[],
        headers: &[],
        body: None,
        success: Success::Text,
        errors: &[],
    },
    Endpoint {
        method: Method::GET,
        path: "/api/v1/health",
        id: "health",
        summary: "Health of the server and its database (503 when the database does not answer)",
        access: Access::Public,
        query: &[],
        headers: &[],
        body: None,
        success: Success::Json(200, health),
        errors: &[],
    },
    Endpoint {
        method: Method::GET,
        path: "/api/v1/openapi.json",
        id: "openapi",
        summary: "This document",
        access: Access::Public,
        query: &[],
        headers: &[],
        body: None,
        success: Success::Json(200, any_object),
        errors: &[],
    },
    Endpoint {
        method: Method::POST,
        path: "/api/v1/flex/run.stream",
        id: "runStream",
        summary: "Start a run from a task envelope and stream its frames",
        access: Access::Caller,
        query: &[],
        headers: &[
            ("Idempotency-Key", "Retries with the same key and body re-join the run it started"),
            ("X-Correlation-Id", "1 to 200 visible ASCII characters, carried by every frame"),
        ],
        body: Some(RequestBody::Required(envelope)),
        success: Success::Events,
        errors: &[422],
    },
    Endpoint {
        method: Method::POST,
        path: "/api/v1/flex/run.resume",
        id: "runResume",
        summary: "Answer the request a paused run waits on, and stream the run from there",
        access: Access::Operator,
        query: &[],
        headers: &[],
        body: Some(RequestBody::Required(resume)),
        success: Success::Events,
        errors: &[404, 409],
    },
    Endpoint {
        method: Method::GET,
        path: "/api/v1/flex/runs",
        id: "listRuns",
        summary: "Runs, newest first, a page at a time",
        access: Access::Caller,
        query: &[
            ("status", "string", "Only runs in this status"),
            ("cursor", "string", "The nextCursor of the previous page"),
            ("limit", "integer", "Runs per page, 1 to 500 (default 50)"),
        ],
        headers: &[],
        body: None,
        success: Success::Json(200, run_list),
        errors: &[],
    },
    Endpoint {
        method: Method::GET,
        path: "/api/v1/flex/runs/{id}",
        id: "getRun",
        summary: "A run with its plan versions, nodes, outputs and operator requests",
        access: Access::Caller,
        query: &[],
        headers: &[],
        body: None,
        success: Success::Json(200, run_document),
        errors: &[404],
    },
    Endpoint {
        method: Method::POST,
        path: "/api/v1/flex/runs/{id}/replan",
        id: "replanRun",
        summary: "Drop the plan a paused run waits with and plan again",
        access: Access::Operator,
        query: &[],
        headers: &[],
        body: Some(RequestBody::Optional(replan)),
        success: Success::Json(200, command_result),
        errors: &[404, 409, 422],
    },
    Endpoint {
        method: Method::POST,
        path: "/api/v1/flex/runs/{id}/cancel",
        id: "cancelRun",
        summary: "Cancel a run",
        access: Access::Operator,
        query: &[],
        headers: &[],
        body: Some(RequestBody::Optional(cancel)),
        success: Success::Json(200, command_result),
        errors: &[404, 409],
    },
    Endpoint {
        method: Method::GET,
        path: "/api/v1/flex/tasks",
        id: "listTasks",
        summary: "Open human tasks, oldest first",
        access: Access::Caller,
        query: &[("limit", "integer", "Tasks, 1 to 1000 (default 100)")],
        headers: &[],
        body: None,
        success: Success::Json(200, task_list),
        errors: &[],
    },
    Endpoint {
        method: Method::POST,
        path: "/api/v1/flex/tasks/{id}/decline",
        id: "declineTask",
        summary: "Decline a human task; its run fails",
        access: Access::Operator,
        query: &[],
        headers: &[],
        body: Some(RequestBody::Required(decline)),
        success: Success::Json(200, declined),
        errors: &[404, 409],
    },
    Endpoint {
        method: Method::GET,
        path: "/api/v1/flex/runs/{id}/events",
        id: "runEvents",
        summary: "A page of a run's event log",
        access: Access::Caller,
        query: &[
            ("after", "integer", "Frames after this seq (default 0)"),
            ("limit", "integer", "Frames per page, 1 to 1000 (default 100)"),
        ],
        headers: &[],
        body: None,
        success: Success::Json(200, events_page),
        errors: &[404],
    },
    Endpoint {
        method: Method::GET,
        path: "/api/v1/flex/runs/{id}/stream",
        id: "followRun",
        summary: "Replay a run's frames after Last-Event-ID (or ?after=), then follow it live",
        access: Access::Caller,
        query: &[("after", "integer", "Frames after this seq, when no Last-Event-ID is sent")],
        headers: &[("Last-Event-ID", "The seq of the last frame the client has")],
        body: None,
        success: Success::Events,
        errors: &[404],
    },
    Endpoint {
        method: Method::POST,
        path: "/api/v1/flex/capabilities/register",
        id: "registerCapability",
        summary: "Register (or replace) a capability",
        access: Access::Operator,
        query: &[],
        headers: &[],
        body: Some(RequestBody::Required(registration)),
        success: Success::Json(201, registered),
        errors: &[],
    },
    Endpoint {
        method: Method::GET,
        path: "/api/v1/flex/capabilities",
        id: "listCapabilities",
        summary: "Registered capabilities (endpoints shown without query strings or credentials)",
        access: Access::Caller,
        query: &[],
        headers: &[],
        body: None,
        success: Success::Json(200, capability_list),
        errors: &[],
    },
    Endpoint {
        method: Method::POST,
        path: "/api/v1/flex/conditions/compile",
        id: "compileCondition",
        summary: "Compile a condition DSL expression to JSON-Logic",
        access: Access::Caller,
        query: &[],
        headers: &[],
        body: Some(RequestBody::Required(compile_request)),
        success: Success::Json(200, compiled),
        errors: &[],
    },
    Endpoint {
        method: Method::GET,
        path: "/api/v1/flex/conditions/variables",
        id: "conditionVariables",
        summary: "The variables goal conditions may name",
        access: Access::Caller,
        query: &[],
        headers: &[],
        body: None,
        success: Success::Json(200, variables),
        errors: &[],
    },
    Endpoint {
        method: Method::GET,
        path: "/api/v1/flex/schemas/{name}",
        id: "getSchema",
        summary: "A request body's JSON Schema: task-envelope or capability-registration",
        access: Access::Caller,
        query: &[],
        headers: &[],
        body: None,
        success: Success::Json(200, any_object),
        errors: &[404],
    },
];

/// The whole document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for endpoint in &ENDPOINTS {
        let item = paths.entry(endpoint.path).or_insert_with(|| json!({}));
        item[endpoint.method.as_str().to_ascii_lowercase()] = operation(endpoint);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "flexrun",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Runs LLM-planned agent runs and replans until the caller's goal conditions hold. \
                            Errors are {error: {code, message, details}}; docs/api.md has every code.",
        },
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": error()},
        },
    })
}

fn operation(endpoint: &Endpoint) -> Value {
    let mut operation = json!({
        "operationId": endpoint.id,
        "summary": endpoint.summary,
        "parameters": parameters(endpoint),
        "responses": responses(endpoint),
    });
    if endpoint.access != Access::Public {
        operation["security"] = json!([{"bearer": []}]);
    }
    if let Some(body) = endpoint.body {
        let (schema, required) = match body {
            RequestBody::Required(schema) => (schema(), true),
            RequestBody::Optional(schema) => (schema(), false),
        };
        operation["requestBody"] = json!({"required": required, "content": {"application/json": {"schema": schema}}});
    }
    operation
}

fn parameters(endpoint: &Endpoint) -> Vec<Value> {
    let path = endpoint.path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}')).map(|name| {
        json!({"name": name, "in": "path", "required": true, "schema": {"type": "string", "minLength": 1, "maxLength": 200}})
    });
    let query = endpoint.query.iter().map(|(name, kind, description)| {
        json!({"name": name, "in": "query", "required": false, "description": description, "schema": {"type": kind}})
    });
    let headers = endpoint.headers.iter().map(|(name, description)| {
        json!({"name": name, "in": "header", "required": false, "description": description, "schema": {"type": "string"}})
    });
    path.chain(query).chain(headers).collect()
}

fn responses(endpoint: &Endpoint) -> Value {
    let mut responses = Map::new();
    let (status, content) = match endpoint.success {
        Success::Json(status, schema) => (status, json!({"application/json": {"schema": schema()}})),
        Success::Events => (200, json!({"text/event-stream": {"schema": event()}})),
        Success::Text => (200, json!({"text/plain": {"schema": {"type": "string"}}})),
    };
    responses.insert(status.to_string(), json!({"description": endpoint.summary, "content": content}));
    if endpoint.id == "health" {
        responses.insert("503".into(), json!({"description": "The database does not answer", "content": content}));
    }
    for status in errors(endpoint) {
        let error = json!({"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}});
        responses.insert(status.to_string(), json!({"description": describe(status), "content": error}));
    }
    Value::Object(responses)
}

/// The error statuses an endpoint can answer: its own, and those of what it reads (a key, a
/// body, a path, a query).
fn errors(endpoint: &Endpoint) -> Vec<u16> {
    let mut statuses: Vec<u16> = endpoint.errors.to_vec();
    if endpoint.access != Access::Public {
        statuses.push(401);
    }
    if endpoint.access == Access::Operator {
        statuses.push(403);
    }
    if endpoint.body.is_some() {
        statuses.extend([400, 408, 413, 503]);
    }
    if !endpoint.query.is_empty() || !endpoint.headers.is_empty() || endpoint.path.contains('{') {
        statuses.push(400);
    }
    statuses.sort_unstable();
    statuses.dedup();
    statuses
}

fn describe(status: u16) -> &'static str {
    match status {
        400 => "The request is malformed (the error's details say where)",
        401 => "No API key, or one that is not valid",
        403 => "The action needs an operator key",
        404 => "No such run, task or schema (or one the caller may not see)",
        408 => "The request body did not arrive in time",
        409 => "The run or task is not in a state the command applies to",
        413 => "The request body is too large",
        422 => "Well-formed, but it contradicts what the server holds",
        503 => "Too many request bodies are being read at once; retry after Retry-After",
        _ => "Error",
    }
}

fn any_object() -> Value {
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

fn envelope() -> Value {
    embedded(crate::envelope::schema())
}

fn registration() -> Value {
    embedded(crate::capability::schema())
}

fn resume() -> Value {
    embedded(super::operator::RESUME.document())
}

fn replan() -> Value {
    embedded(super::operator::REPLAN.document())
}

fn cancel() -> Value {
    embedded(super::operator::CANCEL.document())
}

fn decline() -> Value {
    embedded(super::operator::DECLINE.document())
}

fn compile_request() -> Value {
    json!({"type": "object", "required": ["dsl"], "additionalProperties": false,
           "properties": {"dsl": {"type": "string"}, "relative": {"type": "boolean"}}})
}

fn error() -> Value {
    let detail = json!({"type": "object", "required": ["path", "code", "message"],
                        "properties": {"path": {"type": "string"}, "code": {"type": "string"},
                                       "message": {"type": "string"}, "range": {"type": "object"}}});
    json!({"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["code", "message", "details"],
        "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                       "details": {"type": "array", "items": detail}}}}})
}

fn health() -> Value {
    json!({"type": "object", "required": ["status", "version", "timestamp", "uptimeSeconds", "services"],
           "properties": {"status": {"enum": ["healthy", "degraded"]}, "version": {"type": "string"},
                          "timestamp": {"type": "string"}, "uptimeSeconds": {"type": "integer"},
                          "services": {"type": "object"}}})
}

/// One Server-Sent Event: a frame (JSON) in `data`, its type in `event`, its seq in `id`.
fn event() -> Value {
    json!({"type": "object", "required": ["data", "event", "id"],
           "properties": {"data": {"type": "string", "contentMediaType": "application/json"},
                          "event": {"type": "string", "pattern": "^[a-z_]+$"},
                          "id": {"type": "string", "pattern": "^[1-9][0-9]*$"}}})
}

fn nullable(kind: &str) -> Value {
    json!({"type": [kind, "null"]})
}

fn run_list() -> Value {
    let entry = json!({"type": "object",
        "required": ["runId", "status", "objective", "planVersion", "replans", "createdAt", "updatedAt"],
        "properties": {"runId": {"type": "string"}, "status": {"type": "string"}, "objective": {"type": "string"},
                       "threadId": nullable("string"), "planVersion": {"type": "integer"},
                       "replans": {"type": "integer"}, "error": nullable("string"),
                       "createdAt": {"type": "string"}, "updatedAt": {"type": "string"}}});
    json!({"type": "object", "required": ["runs", "nextCursor"],
           "properties": {"runs": {"type": "array", "items": entry}, "nextCursor": nullable("string")}})
}

fn run_document() -> Value {
    let array = json!({"type": "array", "items": {"type": "object"}});
    json!({"type": "object", "required": ["run", "envelope", "planVersions", "nodes", "outputs", "hitlRequests"],
           "properties": {
               "run": {"type": "object", "required": ["runId", "status", "objective", "planVersion"],
                       "properties": {"runId": {"type": "string"}, "status": {"type": "string"},
                                      "objective": {"type": "string"}, "planVersion": {"type": "integer"}}},
               "envelope": {"type": "object"}, "planVersions": array, "nodes": array,
               "outputs": array, "hitlRequests": array}})
}

fn command_result() -> Value {
    json!({"type": "object", "required": ["runId", "status"],
           "properties": {"runId": {"type": "string"}, "status": {"type": "string"}}})
}

fn task_list() -> Value {
    json!({"type": "object", "required": ["count", "tasks"],
           "properties": {"count": {"type": "integer"}, "tasks": {"type": "array", "items": {"type": "object",
               "required": ["taskId", "runId", "status"],
               "properties": {"taskId": {"type": "string"}, "runId": {"type": "string"}, "status": {"type": "string"}}}}}})
}

fn declined() -> Value {
    json!({"type": "object", "required": ["ok", "status", "runId", "nodeId"],
           "properties": {"ok": {"type": "boolean"}, "status": {"type": "string"},
                          "runId": {"type": "string"}, "nodeId": {"type": "string"}}})
}

fn events_page() -> Value {
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

fn capability_list() -> Value {
    json!({"type": "object", "required": ["capabilities", "count"],
           "properties": {"capabilities": {"type": "array", "items": capability()}, "count": {"type": "integer"}}})
}

fn registered() -> Value {
    json!({"type": "object", "required": ["ok", "capability", "registry"],
           "properties": {"ok": {"const": true}, "capability": capability(),
                          "registry": {"type": "object", "required": ["count"], "properties": {"count": {"type": "integer"}}}}})
}

fn compiled() -> Value {
    json!({"type": "object", "required": ["jsonLogic", "canonicalDsl", "variables", "warnings"],
           "properties": {"jsonLogic": {}, "canonicalDsl": {"type": "string"},
                          "variables": {"type": "array", "items": {"type": "string"}},
                          "warnings": {"type": "array"}}})
}

fn variables() -> Value {
    json!({"type": "object", "required": ["variables"],
           "properties": {"variables": {"type": "array", "items": {"type": "object", "required": ["path"],
               "properties": {"path": {"type": "string"}}}}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_is_in_the_document_with_its_method() {
        let document = document();
        assert_eq!(document["openapi"], "3.1.0");
        for endpoint in &ENDPOINTS {
            let method = endpoint.method.as_str().to_ascii_lowercase();
            let operation = &document["paths"][endpoint.path][&method];
            assert_eq!(operation["operationId"], endpoint.id, "{} {}", endpoint.method, endpoint.path);
        }
        let ids: std::collections::HashSet<&str> = ENDPOINTS.iter().map(|e| e.id).collect();
        assert_eq!(ids.len(), ENDPOINTS.len(), "operation ids are unique");
    }

    #[test]
    fn request_bodies_are_the_schemas_the_handlers_check() {
        let document = document();
        let body = |path: &str| {
            document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"].clone()
        };
        assert_eq!(body("/api/v1/flex/run.stream")["properties"], crate::envelope::schema()["properties"]);
        assert_eq!(body("/api/v1/flex/runs/{id}/cancel")["required"], json!([]));
        assert_eq!(body("/api/v1/flex/tasks/{id}/decline")["required"], json!(["reason"]));
        let cancel = &document["paths"]["/api/v1/flex/runs/{id}/cancel"]["post"];
        assert_eq!(cancel["requestBody"]["required"], false);
        let codes: Vec<&String> = cancel["responses"].as_object().unwrap().keys().collect();
        assert_eq!(codes, ["200", "400", "401", "403", "404", "408", "409", "413", "503"]);
    }
}
