//! Capability and MCP server registration (operators) and listing.

use actix_web::{HttpResponse, delete, get, post, web};
use serde_json::{Value, json};

use super::auth::{Caller, Operator};
use super::body::Body;
use super::error::ApiError;
use crate::services::Services;

/// `POST /api/v1/flex/capabilities/register`
#[post("/capabilities/register")]
pub async fn register(
    _operator: Operator,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let registration: Value = body.json()?;
    let preferred: Vec<String> = registration
        .get("preferredModels")
        .and_then(Value::as_array)
        .map(|models| models.iter().filter_map(|m| m.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let problems = services.models.check(&preferred, "/preferredModels");
    if !problems.is_empty() {
        return Err(crate::capability::RegistryError::Invalid(problems).into());
    }
    let capability = services.registry.register(registration, "api").await?;
    let count = services.registry.snapshot().len();
    Ok(HttpResponse::Created()
        .json(json!({"ok": true, "capability": capability.shown(&services.redaction), "registry": {"count": count}})))
}

/// `DELETE /api/v1/flex/capabilities/{id}`: no run started from now on can plan it.
#[delete("/capabilities/{id}")]
pub async fn unregister(
    _operator: Operator,
    id: web::Path<String>,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    services.registry.unregister(&id).await?;
    tracing::info!(capability = %crate::excerpt::log(id.as_str()), "capability unregistered");
    let count = services.registry.snapshot().len();
    Ok(HttpResponse::Ok().json(json!({"ok": true, "capabilityId": *id, "registry": {"count": count}})))
}

/// `GET /api/v1/flex/capabilities`
#[get("/capabilities")]
pub async fn list(_caller: Caller, services: web::Data<Services>) -> HttpResponse {
    let capabilities: Vec<Value> =
        services.registry.snapshot().values().map(|c| c.shown(&services.redaction)).collect();
    HttpResponse::Ok().json(json!({"capabilities": capabilities, "count": capabilities.len()}))
}

/// `POST /api/v1/flex/mcp-servers/register`: stores the server and answers once it has listed
/// its tools (or could not be reached: it is tried again in the background).
#[post("/mcp-servers/register")]
pub async fn register_mcp_server(
    _operator: Operator,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let registration: Value = body.json()?;
    let server = services.mcp.register(&registration, "api").await?;
    Ok(HttpResponse::Created().json(json!({"ok": true, "server": server})))
}

/// `GET /api/v1/flex/mcp-servers`: every server with its state and tools, no header value or token.
#[get("/mcp-servers")]
pub async fn list_mcp_servers(_caller: Caller, services: web::Data<Services>) -> HttpResponse {
    let servers = services.mcp.list();
    HttpResponse::Ok().json(json!({"servers": servers, "count": servers.len()}))
}
