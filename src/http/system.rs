//! Health, Prometheus metrics and the JSON Schemas of request bodies.

use std::sync::{LazyLock, OnceLock};
use std::time::Instant;

use actix_web::{HttpResponse, ResponseError, get, web};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Value, json};

use super::auth::Caller;
use super::error::ApiError;
use crate::error_code::ErrorCode;
use crate::services::Services;

static STARTED: OnceLock<Instant> = OnceLock::new();
static METRICS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide metrics recorder (once; later servers in the same process share it).
pub fn install_metrics() {
    STARTED.get_or_init(Instant::now);
    METRICS.get_or_init(|| {
        let recorder = crate::telemetry::recorder().ok()?;
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).ok()?;
        crate::telemetry::describe();
        Some(handle)
    });
}

/// `GET /api/v1/health`: unauthenticated, reveals no configuration values.
#[get("/health")]
pub async fn health(services: web::Data<Services>) -> HttpResponse {
    let database = services.store.ping().await.is_ok();
    let status = if database { "healthy" } else { "degraded" };
    let capabilities = services.registry.snapshot().len();
    let mut body = json!({
        "status": status,
        "version": env!("CARGO_PKG_VERSION"),
        "timestamp": chrono::Utc::now(),
        "uptimeSeconds": STARTED.get().map_or(0, |s| s.elapsed().as_secs()),
        "services": {
            "database": {"ok": database},
            "llm": {
                "configured": !services.settings.llm.api_key.is_empty(),
                "model": services.settings.llm.model,
                "endpoints": services.models.states().into_iter()
                    .map(|(name, state)| json!({"name": name, "breaker": state}))
                    .collect::<Vec<_>>(),
            },
            "capabilities": {"count": capabilities},
        },
    });
    if capabilities == 0 {
        body["warnings"] = json!([crate::capability::NONE_REGISTERED]);
    }
    if let Some(leasing) = services.claims.leasing() {
        body["node"] = json!({
            "id": leasing.node,
            "leaseSeconds": leasing.lease.as_secs(),
            "runsOwned": services.claims.leased().len(),
            "draining": services.claims.is_draining(),
            "idHeld": services.identity.as_ref().is_some_and(crate::run::lease::identity::Identity::is_held),
        });
    }
    if database { HttpResponse::Ok().json(body) } else { HttpResponse::ServiceUnavailable().json(body) }
}

/// `GET /api/v1/openapi.json`: the OpenAPI 3.1 document of this API (`super::openapi`).
#[get("/openapi.json")]
pub async fn openapi_json() -> HttpResponse {
    static DOCUMENT: LazyLock<Value> = LazyLock::new(super::openapi::document);
    HttpResponse::Ok().json(&*DOCUMENT)
}

/// `GET /metrics`: Prometheus text format.
#[get("/metrics")]
pub async fn metrics_text() -> HttpResponse {
    let text = METRICS.get().and_then(Option::as_ref).map(PrometheusHandle::render).unwrap_or_default();
    HttpResponse::Ok().content_type("text/plain; version=0.0.4").body(text)
}

/// `GET /api/v1/flex/schemas/{name}`: `task-envelope` or `capability-registration`.
#[get("/schemas/{name}")]
pub async fn schema(_caller: Caller, name: web::Path<String>) -> HttpResponse {
    match name.as_str() {
        "task-envelope" => HttpResponse::Ok().json(crate::envelope::schema()),
        "capability-registration" => HttpResponse::Ok().json(crate::capability::schema()),
        other => ApiError::new(
            ErrorCode::SchemaNotFound,
            format!("no schema named `{other}`; try task-envelope or capability-registration"),
        )
        .error_response(),
    }
}
