//! The demo's shop page at `/`, which the visitor chats from.

use axum::response::Html;
use axum::routing::get;

const PAGE: &str = include_str!("page.html");

pub fn router<S: Clone + Send + Sync + 'static>() -> axum::Router<S> {
    axum::Router::new().route("/", get(|| async { Html(PAGE) }))
}
