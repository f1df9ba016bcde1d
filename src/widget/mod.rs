//! `GET /widget.js` (SPEC §14): the embeddable chat. It is plain JavaScript with its
//! stylesheet inlined once at start, so the product needs no front-end build. It is
//! served gzipped, with an ETag at `/widget.js` (short cache, revalidated) and
//! immutable at `/widget/<content hash>.js` for pages that pin a version.

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use tower_http::compression::CompressionLayer;

use crate::app::App;
use crate::error::ApiError;

mod strings;

const SCRIPT: &str = include_str!("widget.js");
const STYLE: &str = include_str!("widget.css");

pub struct Widget {
    pub body: String,
    /// The first 16 hex digits of the body's SHA-256.
    pub hash: String,
}

/// The widget with its stylesheet inlined, built once.
pub fn widget() -> &'static Widget {
    static WIDGET: OnceLock<Widget> = OnceLock::new();
    WIDGET.get_or_init(|| {
        let style = serde_json::to_string(STYLE).unwrap_or_else(|_| "\"\"".into());
        let english =
            serde_json::to_string(crate::locale::english()).unwrap_or_else(|_| "{}".into());
        let body = SCRIPT
            .replace("__DESKBELL_CSS__", &style)
            .replace("__DESKBELL_EN__", &english);
        let hash = hex::encode(Sha256::digest(body.as_bytes()))[..16].to_string();
        Widget { body, hash }
    })
}

pub fn router() -> Router<App> {
    Router::new()
        .route("/widget.js", get(latest))
        .route("/widget/{file}", get(pinned))
        .route("/v1/sites/{site}/strings", get(strings::strings))
        .layer(CompressionLayer::new())
}

async fn latest(headers: HeaderMap) -> Response {
    serve(
        &headers,
        "public, max-age=300, stale-while-revalidate=86400",
    )
}

async fn pinned(headers: HeaderMap, Path(file): Path<String>) -> Response {
    if file != format!("{}.js", widget().hash) {
        return ApiError::NotFound.into_response();
    }
    serve(&headers, "public, max-age=31536000, immutable")
}

fn serve(headers: &HeaderMap, cache: &'static str) -> Response {
    let w = widget();
    let etag = format!("\"{}\"", w.hash);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
            w.body.clone(),
        )
            .into_response()
    };
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(value) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, value);
    }
    response
}
