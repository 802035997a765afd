//! The OpenAPI 3.1 document of the HTTP API, served at `GET /api/v1/openapi.json`.
//!
//! It is built from [`ENDPOINTS`], the table the router also answers 405s from (a test checks
//! every entry reaches its handler), and from the very JSON Schemas the handlers validate request
//! bodies with; so an endpoint or a body rule cannot change without the document changing too.
//! Response schemas are written in [`schemas`]; `tests/api_fuzz.rs` fuzzes the running server
//! against the document and fails on any response that does not match it.

mod endpoints;
mod schemas;

pub use endpoints::{ENDPOINTS, Endpoint};

use actix_web::http::Method;
use serde_json::{Map, Value, json};

use endpoints::{Access, RequestBody, Success};

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
                            Errors are {error: {code, message, details}}; the Error schema lists every code.",
        },
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": schemas::error()},
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
        Success::Events => (200, json!({"text/event-stream": {"schema": schemas::event()}})),
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
    // Behind a key is the database, which may be out of reach for a moment.
    if endpoint.access != Access::Public {
        statuses.extend([401, 503]);
    }
    // An operator's action by a caller; a change from another site's page.
    if endpoint.access == Access::Operator || endpoint.method != Method::GET {
        statuses.push(403);
    }
    if endpoint.body.is_some() {
        statuses.extend([400, 408, 413, 415, 503]);
    }
    // A host name the server does not answer to (without keys, or beyond `http.allowed_hosts`).
    statuses.push(421);
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
        403 => "The action needs an operator key, or the request came from another site's page",
        404 => "No such run, task or schema (or one the caller may not see)",
        408 => "The request body did not arrive in time",
        409 => "The run or task is not in a state the command applies to",
        413 => "The request body is too large",
        415 => "The request body was not sent as application/json",
        421 => "The Host names a host this server does not answer to (http.allowed_hosts)",
        422 => "Well-formed, but it contradicts what the server holds",
        503 => {
            "Too many request bodies are being read at once, or the database cannot be reached; retry after \
                Retry-After"
        }
        _ => "Error",
    }
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
        assert_eq!(codes, ["200", "400", "401", "403", "404", "408", "409", "413", "415", "421", "503"]);
    }

    #[test]
    fn the_error_schema_lists_every_code_with_its_status() {
        let code = &document()["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"];
        let listed: Vec<&str> = code["enum"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        for known in crate::error_code::ErrorCode::ALL {
            assert!(listed.contains(&known.as_str()), "{known:?} is not listed");
            let described = code["x-enumDescriptions"][known.as_str()].as_str().unwrap();
            assert!(described.contains(&format!("{}: {}", known.status(), known.description())), "{described}");
        }
        assert_eq!(listed.len(), code["x-enumDescriptions"].as_object().unwrap().len());
    }
}
