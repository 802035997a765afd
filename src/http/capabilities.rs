//! Capability registration (operators) and listing.

use actix_web::{HttpResponse, get, post, web};
use serde_json::{Value, json};

use super::auth::{Caller, Operator};
use super::body::Body;
use super::error::ApiError;
use crate::capability::Capability;
use crate::redact::{self, Redaction};
use crate::services::Services;

/// A capability as callers see it: its registration without secrets, and its endpoint without
/// credentials or query string.
fn describe(c: &Capability, redaction: &Redaction) -> Value {
    let mut registration = redaction.value(c.registration.clone());
    if let Some(endpoint) = registration.get_mut("endpoint")
        && let Some(url) = endpoint.as_str()
    {
        *endpoint = Value::String(redact::url(url));
    }
    json!({
        "capabilityId": c.id, "version": c.version, "displayName": c.display_name, "summary": c.summary,
        "kind": c.kind, "agentType": c.executor.agent_type(), "inputFacets": c.input_facets,
        "outputFacets": c.output_facets, "status": "active", "registration": registration,
    })
}

/// `POST /api/v1/flex/capabilities/register`
#[post("/capabilities/register")]
pub async fn register(
    _operator: Operator,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let registration: Value = body.json()?;
    let capability = services.registry.register(registration, "api").await?;
    let count = services.registry.snapshot().len();
    Ok(HttpResponse::Created().json(
        json!({"ok": true, "capability": describe(&capability, &services.redaction), "registry": {"count": count}}),
    ))
}

/// `GET /api/v1/flex/capabilities`
#[get("/capabilities")]
pub async fn list(_caller: Caller, services: web::Data<Services>) -> HttpResponse {
    let capabilities: Vec<Value> =
        services.registry.snapshot().values().map(|c| describe(c, &services.redaction)).collect();
    HttpResponse::Ok().json(json!({"capabilities": capabilities, "count": capabilities.len()}))
}
