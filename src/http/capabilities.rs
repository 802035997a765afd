//! Capability registration (operators) and listing.

use actix_web::{HttpResponse, get, post, web};
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
    let capability = services.registry.register(registration, "api").await?;
    let count = services.registry.snapshot().len();
    Ok(HttpResponse::Created()
        .json(json!({"ok": true, "capability": capability.shown(&services.redaction), "registry": {"count": count}})))
}

/// `GET /api/v1/flex/capabilities`
#[get("/capabilities")]
pub async fn list(_caller: Caller, services: web::Data<Services>) -> HttpResponse {
    let capabilities: Vec<Value> =
        services.registry.snapshot().values().map(|c| c.shown(&services.redaction)).collect();
    HttpResponse::Ok().json(json!({"capabilities": capabilities, "count": capabilities.len()}))
}
