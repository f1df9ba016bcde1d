//! `GET /console` (SPEC §15): the operator console, a page of plain JavaScript
//! served by the binary — no front-end build — that is a client of the operator
//! API (`operator/`). A strict content security policy keeps it to its own
//! files: conversation text and tool descriptions it shows are untrusted.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower_http::compression::CompressionLayer;

use crate::app::App;
use crate::error::ApiError;

const PAGE: &str = include_str!("index.html");
const STYLE: &str = include_str!("console.css");
const CHART_SCRIPT: &str = include_str!("vendor/uPlot.iife.min.js");
const CHART_STYLE: &str = include_str!("vendor/uPlot.min.css");

/// The page's script: native modules, one concern each (`js/main.js` first).
const MODULES: &[(&str, &str)] = &[
    ("api.js", include_str!("js/api.js")),
    ("approvals.js", include_str!("js/approvals.js")),
    ("audit.js", include_str!("js/audit.js")),
    ("conversation.js", include_str!("js/conversation.js")),
    ("conversations.js", include_str!("js/conversations.js")),
    ("desk.js", include_str!("js/desk.js")),
    ("dom.js", include_str!("js/dom.js")),
    ("knowledge.js", include_str!("js/knowledge.js")),
    ("labels.js", include_str!("js/labels.js")),
    ("live.js", include_str!("js/live.js")),
    ("main.js", include_str!("js/main.js")),
    ("markdown.js", include_str!("js/markdown.js")),
    ("messages.js", include_str!("js/messages.js")),
    ("paged.js", include_str!("js/paged.js")),
    ("state.js", include_str!("js/state.js")),
    ("tools.js", include_str!("js/tools.js")),
    ("strings.js", include_str!("js/strings.js")),
    ("usage.js", include_str!("js/usage.js")),
];

/// uPlot positions its parts with inline styles (set through the DOM, which
/// `style-src` allows only with 'unsafe-inline'); scripts stay strictly 'self'.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

pub fn router() -> Router<App> {
    Router::new()
        .route(
            "/console",
            get(|| async { file(PAGE, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/",
            get(|| async { file(PAGE, "text/html; charset=utf-8") }),
        )
        .route("/console/js/{name}", get(module))
        .route(
            "/console/console.css",
            get(|| async { file(STYLE, "text/css; charset=utf-8") }),
        )
        .route(
            "/console/vendor/uPlot.iife.min.js",
            get(|| async { file(CHART_SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/console/vendor/uPlot.min.css",
            get(|| async { file(CHART_STYLE, "text/css; charset=utf-8") }),
        )
        .layer(CompressionLayer::new())
}

async fn module(Path(name): Path<String>) -> Response {
    match MODULES.iter().find(|(n, _)| *n == name) {
        Some((_, body)) => file(body, "text/javascript; charset=utf-8"),
        None => ApiError::NotFound.into_response(),
    }
}

fn file(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The console changes with the binary; revalidating keeps it current.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
