//! The HTTP server (actix-web): routes, authentication, SSE, and the mapping of errors to
//! responses. Handlers are thin: they parse, call into the domain, and shape the answer.

mod access;
mod auth;
mod body;
mod capabilities;
mod conditions;
mod error;
mod fork;
mod head;
mod idempotency;
mod openapi;
mod operator;
pub mod paging;

mod runs;
pub mod session;
pub mod site;
mod sse;
mod system;
mod throttle;
mod traceparent;

pub use auth::{Caller, Operator, Role, authenticate, by_session};
pub use body::{Body, SignInBody};
pub use error::ApiError;
pub use operator::answer as resume_answer;
pub use runs::query_escape;
pub use sse::{Compact, KEEP_ALIVE, compact, sliced};
pub use traceparent::CallerSpan;

use std::net::TcpListener;
use std::sync::{Arc, LazyLock};

use actix_web::body::MessageBody;
use actix_web::dev::{ResourceDef, Server, ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::{Next, from_fn};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, ResponseError, web};
use tracing_actix_web::TracingLogger;

use crate::error_code::ErrorCode;
use crate::services::Services;
use openapi::ENDPOINTS;
#[cfg(test)]
use openapi::Endpoint;

/// Registers every route. [`ENDPOINTS`] lists them all again, for 405 answers and the OpenAPI
/// document; a test checks each entry reaches its handler.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(system::metrics_text)
        .service(
            web::scope("/api/v1").service(system::health).service(system::openapi_json).service(
                web::scope("/flex")
                    .service(runs::run_stream)
                    .service(operator::resume)
                    .service(runs::list_runs)
                    .service(runs::get_run)
                    .service(runs::get_value)
                    .service(operator::replan)
                    .service(operator::cancel)
                    .service(operator::tasks)
                    .service(operator::decline)
                    .service(runs::get_events)
                    .service(runs::follow_run)
                    .service(fork::fork_run)
                    .service(capabilities::register)
                    .service(capabilities::list)
                    .service(capabilities::unregister)
                    .service(capabilities::register_mcp_server)
                    .service(capabilities::list_mcp_servers)
                    .service(conditions::compile_condition)
                    .service(conditions::variables)
                    .service(system::schema),
            ),
        )
        .default_service(web::to(no_route));
}

/// The routes of a surface served beside the API (the LangGraph one), registered by it as app
/// data ([`SurfaceRoutes::register`]): a request no handler took whose path is one of them is
/// answered 405 as the API's own are. (The surface's handlers are registered by the surface; this
/// is the list of what they take, which its test checks against them.)
pub struct SurfaceRoutes(Vec<(&'static Method, ResourceDef)>);

impl SurfaceRoutes {
    pub fn register(cfg: &mut web::ServiceConfig, routes: &'static [(Method, &'static str)]) {
        cfg.app_data(Self(routes.iter().map(|(method, path)| (method, ResourceDef::new(*path))).collect()));
    }
}

/// The methods the endpoints at `path` take (none: no endpoint has that path): those
/// [`ENDPOINTS`] and the `surface` list, and `HEAD` wherever `GET` is one ([`head`] answers it).
fn allowed_methods(path: &str, surface: Option<&SurfaceRoutes>) -> Vec<&'static Method> {
    static PATTERNS: LazyLock<Vec<(&'static Method, ResourceDef)>> =
        LazyLock::new(|| ENDPOINTS.iter().map(|e| (&e.method, ResourceDef::new(e.path))).collect());
    let surface = surface.map_or(&[][..], |routes| &routes.0[..]);
    let mut methods: Vec<&'static Method> = PATTERNS
        .iter()
        .chain(surface)
        .filter(|(_, pattern)| pattern.is_match(path))
        .map(|(method, _)| *method)
        .collect();
    if methods.contains(&&Method::GET) {
        methods.push(&Method::HEAD);
    }
    methods.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    methods.dedup();
    methods
}

/// A request no handler took: 405 with `Allow` if its path is an endpoint's, else 404. Answered
/// as a response, not returned as an error: a probe of made-up paths is not worth a log line.
async fn no_route(request: HttpRequest) -> HttpResponse {
    let allowed = allowed_methods(request.path(), request.app_data::<SurfaceRoutes>());
    let error = if allowed.is_empty() {
        ApiError::new(ErrorCode::NotFound, "no such endpoint")
    } else {
        let allow: Vec<&str> = allowed.iter().map(|method| method.as_str()).collect();
        ApiError::MethodNotAllowed { method: head::sent_method(&request).to_string(), allow: allow.join(", ") }
    };
    error.error_response()
}

/// Refuses a URL that decodes to U+0000 (`%00`), before any route reads it: path segments and
/// query values reach database lookups, and PostgreSQL's `text` cannot hold the character
/// (request bodies get the same rule from [`Body::json`]). A URL cannot carry the raw byte.
async fn refuse_nul_url(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let target = request.uri().path_and_query().map_or("", |p| p.as_str());
    if target.contains("%00") {
        return Err(ApiError::new(ErrorCode::InvalidUrl, "the URL must not contain the NUL character (%00)").into());
    }
    next.call(request).await
}

/// Starts serving the API on `listener`, and the routes `pages` registers beside it (the
/// console: passed in, so the API does not depend on the pages built on it). The returned server
/// runs until stopped; await it.
pub fn serve(
    services: Arc<Services>,
    listener: TcpListener,
    pages: fn(&mut web::ServiceConfig),
) -> std::io::Result<Server> {
    system::install_metrics();
    let data = web::Data::from(services);
    let query_errors = web::QueryConfig::default().error_handler(|error, _| {
        ApiError::new(ErrorCode::InvalidQuery, format!("invalid query string: {error}")).into()
    });
    let bodies = web::Data::new(body::BodyReads::new(&data.settings.limits));
    let path_errors = web::PathConfig::default()
        .error_handler(|error, _| ApiError::new(ErrorCode::InvalidPath, format!("invalid path: {error}")).into());
    let sessions = web::Data::new(session::Sessions::new(&data.settings.sessions));
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(sessions.clone())
            .app_data(query_errors.clone())
            .app_data(bodies.clone())
            .app_data(path_errors.clone())
            // Innermost, next to routing: a HEAD request is routed as its GET.
            .wrap(from_fn(head::as_get))
            .wrap(from_fn(refuse_nul_url))
            .wrap(from_fn(site::guard))
            .wrap(TracingLogger::<access::AccessLog>::new())
            // The API first: a request tries the routes in the order they were registered, and
            // the API's are under one static prefix, while the pages beside it (the LangGraph
            // routes at the root) have parameters, each matched with a regular expression.
            .configure(routes)
            .configure(pages)
    })
    // Frames are small writes that must leave at once; Nagle's algorithm would hold them back
    // until the previous segment is acknowledged (about 40 ms with delayed ACKs).
    .tcp_nodelay(true)
    // HTTP/1.1, and HTTP/2 for a client that starts with its preface (h2c, prior knowledge): a
    // client or proxy following many runs then carries all their streams on one connection
    // instead of a connection (and its buffers, on both sides) per run.
    .listen_auto_h2c(listener)?
    .shutdown_timeout(5)
    .run())
}

#[cfg(test)]
mod tests {
    use actix_web::dev::ServiceResponse;
    use actix_web::http::header;
    use actix_web::test::{TestRequest, call_service, init_service, read_body};
    use serde_json::Value;

    use super::*;

    /// The status, the code if [`no_route`] answered, and the `Allow` header of a response.
    async fn unrouted(response: ServiceResponse) -> (u16, Option<String>, Option<String>) {
        let status = response.status().as_u16();
        let allow = response.headers().get(header::ALLOW).and_then(|v| v.to_str().ok()).map(String::from);
        let body: Value = serde_json::from_slice(&read_body(response).await).unwrap_or(Value::Null);
        let code = body["error"]["code"].as_str().filter(|c| ["not_found", "method_not_allowed"].contains(c));
        (status, code.map(String::from), allow)
    }

    #[actix_web::test]
    async fn every_endpoint_is_routed_and_other_methods_are_405() {
        // No app data: the handlers fail, but after routing, which is what this checks.
        let app = init_service(App::new().configure(routes)).await;
        let call = |method: &Method, path: &str| {
            call_service(&app, TestRequest::default().method(method.clone()).uri(path).to_request())
        };
        for Endpoint { method, path: pattern, .. } in &ENDPOINTS {
            let path =
                pattern.replace("{id}", "0190b2d4-0000-7000-8000-000000000000").replace("{name}", "task-envelope");
            let (_, code, _) = unrouted(call(method, &path).await).await;
            assert_eq!(code, None, "{method} {path} reaches no handler");
            let other = if *method == Method::GET { Method::DELETE } else { Method::GET };
            let (status, code, allow) = unrouted(call(&other, &path).await).await;
            assert_eq!((status, code.as_deref()), (405, Some("method_not_allowed")), "{other} {path}");
            let mut allowed = if *method == Method::GET { vec!["GET", "HEAD"] } else { vec![method.as_str()] };
            // A capability's path takes `register` as an id too: DELETE unregisters one named so.
            if path == "/api/v1/flex/capabilities/register" {
                allowed.insert(0, "DELETE");
            }
            assert_eq!(allow.as_deref(), Some(allowed.join(", ").as_str()), "{other} {path}");
        }
        for path in ["/api/v1/flex/nope", "/api/v1/flex/runs/x/y", "/api/v2/flex/runs"] {
            let answer = unrouted(call(&Method::GET, path).await).await;
            assert_eq!(answer, (404, Some("not_found".into()), None), "{path}");
        }
    }
}
