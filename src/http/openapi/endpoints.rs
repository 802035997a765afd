//! The table of every endpoint: what the router serves (405 answers are read from it) and what
//! the OpenAPI document describes.

use actix_web::http::Method;
use serde_json::Value;

use super::schemas::*;

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
    pub(super) id: &'static str,
    pub(super) summary: &'static str,
    pub(super) access: Access,
    /// Query parameters: name, JSON Schema type, description.
    pub(super) query: &'static [(&'static str, &'static str, &'static str)],
    /// Headers read: name, description.
    pub(super) headers: &'static [(&'static str, &'static str)],
    pub(super) body: Option<RequestBody>,
    pub(super) success: Success,
    /// Error statuses besides the ones every endpoint of its kind has (see [`errors`]).
    pub(super) errors: &'static [u16],
}

/// Every endpoint, in the order the API documentation lists them.
pub const ENDPOINTS: [Endpoint; 21] = [
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
        path: "/api/v1/flex/runs/{id}/value",
        id: "runValue",
        summary: "One value of the run document whole, where the document left it out for its size",
        access: Access::Caller,
        query: &[("pointer", "string", "The JSON Pointer a `$elided` marker's href names (e.g. /nodes/3/output)")],
        headers: &[],
        body: None,
        success: Success::Json(200, run_value),
        errors: &[404],
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
        path: "/api/v1/flex/runs/{id}/fork",
        id: "forkRun",
        summary: "Start a new run from a plan version or step of this one, reusing what was done, and stream it",
        access: Access::Caller,
        query: &[],
        headers: &[
            ("Idempotency-Key", "Retries with the same key and body re-join the fork it started"),
            ("X-Correlation-Id", "1 to 200 visible ASCII characters, carried by every frame"),
        ],
        body: Some(RequestBody::Optional(fork)),
        success: Success::Events,
        errors: &[404, 409],
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
        method: Method::DELETE,
        path: "/api/v1/flex/capabilities/{id}",
        id: "unregisterCapability",
        summary: "Unregister a capability: no run started from now on can plan it",
        access: Access::Operator,
        query: &[],
        headers: &[],
        body: None,
        success: Success::Json(200, unregistered),
        errors: &[404, 409],
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
