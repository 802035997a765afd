//! The HTTP server (actix-web): routes, authentication, SSE, and the mapping of errors to
//! responses. Handlers are thin: they parse, call into the domain, and shape the answer.

mod auth;
mod body;
mod capabilities;
mod conditions;
mod error;
mod idempotency;
mod operator;

mod runs;
mod sse;
mod system;

pub use auth::{Role, authenticate};
pub use error::ApiError;

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::Server;
use actix_web::{App, HttpResponse, HttpServer, web};
use serde_json::json;
use tracing_actix_web::TracingLogger;

use crate::services::Services;

/// Registers every route.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(system::metrics_text)
        .service(
            web::scope("/api/v1").service(system::health).service(
                web::scope("/flex")
                    .service(runs::run_stream)
                    .service(operator::resume)
                    .service(runs::list_runs)
                    .service(runs::get_run)
                    .service(operator::replan)
                    .service(operator::cancel)
                    .service(operator::tasks)
                    .service(operator::decline)
                    .service(runs::get_events)
                    .service(runs::follow_run)
                    .service(capabilities::register)
                    .service(capabilities::list)
                    .service(conditions::compile_condition)
                    .service(conditions::variables)
                    .service(system::schema),
            ),
        )
        .default_service(web::to(not_found));
}

async fn not_found() -> HttpResponse {
    HttpResponse::NotFound().json(json!({"error": {"code": "not_found", "message": "no such endpoint", "details": []}}))
}

/// Starts serving on `listener`. The returned server runs until stopped; await it.
pub fn serve(services: Arc<Services>, listener: TcpListener) -> std::io::Result<Server> {
    system::install_metrics();
    let data = web::Data::from(services);
    let query_errors = web::QueryConfig::default().error_handler(|error, _| {
        ApiError::bad_request("invalid_query", format!("invalid query string: {error}")).into()
    });
    let json_errors =
        web::JsonConfig::default().limit(data.settings.limits.max_body_bytes).error_handler(|error, _| {
            let message = match &error {
                actix_web::error::JsonPayloadError::Overflow { limit }
                | actix_web::error::JsonPayloadError::OverflowKnownLength { limit, .. } => {
                    return ApiError::PayloadTooLarge { limit: *limit }.into();
                }
                other => other.to_string(),
            };
            ApiError::bad_request("invalid_request", format!("invalid request body: {message}")).into()
        });
    let path_errors = web::PathConfig::default()
        .error_handler(|error, _| ApiError::bad_request("invalid_path", format!("invalid path: {error}")).into());
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(query_errors.clone())
            .app_data(json_errors.clone())
            .app_data(path_errors.clone())
            .wrap(TracingLogger::default())
            .configure(routes)
    })
    // Frames are small writes that must leave at once; Nagle's algorithm would hold them back
    // until the previous segment is acknowledged (about 40 ms with delayed ACKs).
    .tcp_nodelay(true)
    .listen(listener)?
    .shutdown_timeout(5)
    .run())
}
