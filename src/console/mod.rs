//! The operator console: HTML pages served by flexrun itself at `/ui/`, rendered on the server
//! (askama templates compiled into the binary from `templates/console/`), with one small script
//! and one stylesheet embedded as well (`assets/console/`). No build step, no CDN: the binary is
//! the whole console. Live data comes from the API's own SSE streams through the browser's
//! `EventSource`, which re-attaches with `Last-Event-ID` by itself. `docs/console.md` says why.
//!
//! Pages read through the same read models as the API (`run::view`), as the same caller.

mod assets;
mod capabilities;
mod checks;
mod composer;
mod events;
mod failure;
mod feed;
mod graph;
mod headers;
mod inbox;
mod nodes;
mod page;
mod plan_view;
mod run_page;
mod runs;
mod shown;
mod sign_in;
mod task_form;
mod timeline;
mod viewer;

use actix_web::middleware::from_fn;
use actix_web::{HttpResponse, http::header, web};

/// Registers `/` (a redirect to the run list) and every `/ui/` route.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(home)).service(
        web::scope("/ui")
            .wrap(from_fn(headers::add))
            .app_data(web::QueryConfig::default().error_handler(page::bad_query))
            .service(assets::asset)
            .service(runs::list)
            .service(events::history)
            .service(run_page::show)
            .service(inbox::show)
            .service(feed::follow)
            .service(composer::compose)
            .service(capabilities::show)
            .service(sign_in::form)
            .service(sign_in::sign_in)
            .service(sign_in::sign_out)
            .route("", web::get().to(home))
            .route("/", web::get().to(home))
            .default_service(web::to(page::not_found)),
    );
}

async fn home() -> HttpResponse {
    HttpResponse::SeeOther().insert_header((header::LOCATION, "/ui/runs")).finish()
}
