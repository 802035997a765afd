//! The console's script and stylesheet, compiled into the binary.

use actix_web::{HttpResponse, get, http::header, web};

/// Name, content type, content.
const ASSETS: [(&str, &str, &str); 3] = [
    ("console.js", "text/javascript; charset=utf-8", include_str!("../../assets/console/console.js")),
    ("composer.js", "text/javascript; charset=utf-8", include_str!("../../assets/console/composer.js")),
    ("console.css", "text/css; charset=utf-8", include_str!("../../assets/console/console.css")),
];

/// `GET /ui/assets/{name}`. Pages link them with `?v=<version>`, so a browser may keep them an
/// hour and still gets the new ones after an upgrade.
#[get("/assets/{name}")]
pub async fn asset(name: web::Path<String>) -> HttpResponse {
    match ASSETS.iter().find(|(asset, _, _)| *asset == name.as_str()) {
        Some((_, content_type, body)) => HttpResponse::Ok()
            .content_type(*content_type)
            .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
            .body(*body),
        None => HttpResponse::NotFound().content_type("text/plain; charset=utf-8").body("no such asset"),
    }
}
