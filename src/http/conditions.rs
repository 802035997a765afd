//! The condition DSL over HTTP: compile an expression (for editors and the CLI) and list the
//! variable catalog.

use actix_web::{HttpResponse, get, post, web};
use serde::Deserialize;
use serde_json::json;

use super::auth::Caller;
use super::body::Body;
use super::error::ApiError;
use crate::condition::dsl::{self, Scope};
use crate::error_code::ErrorCode;
use crate::services::Services;
use crate::validation::FieldError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompileRequest {
    dsl: String,
    /// Read names that are not catalog variables relative to a condition's value (goal and
    /// post-conditions), instead of rejecting them.
    #[serde(default)]
    relative: bool,
}

/// `POST /api/v1/flex/conditions/compile` `{dsl, relative?}` → `{jsonLogic, canonicalDsl,
/// variables, warnings}`, or 400 `invalid_condition_dsl` with every error and its range.
#[post("/conditions/compile")]
pub async fn compile_condition(
    _caller: Caller,
    body: Body,
    services: web::Data<Services>,
) -> Result<HttpResponse, ApiError> {
    let request: CompileRequest = body.json()?;
    let scope = if request.relative { Scope::Relative { schema: None } } else { Scope::Catalog };
    match dsl::compile(&request.dsl, &services.registry.catalog(), scope) {
        Ok(compiled) => Ok(HttpResponse::Ok().json(compiled)),
        Err(errors) => {
            let details: Vec<FieldError> = errors.into_iter().map(|e| FieldError::from_dsl("/dsl", e)).collect();
            let first = details.first().map_or("", |d| d.message.as_str());
            let message = format!("invalid condition expression: {first}");
            Err(ApiError::Refused { code: ErrorCode::InvalidConditionDsl, message, details })
        }
    }
}

/// `GET /api/v1/flex/conditions/variables`: the catalog conditions are checked against.
#[get("/conditions/variables")]
pub async fn variables(_caller: Caller, services: web::Data<Services>) -> HttpResponse {
    let catalog = services.registry.catalog();
    HttpResponse::Ok().json(json!({"variables": catalog.variables()}))
}
