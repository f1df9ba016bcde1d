//! The demo's shop page at `/`, which embeds the widget, and its help pages at
//! `/help/<name>`, which the assistant's citations link to.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

const PAGE: &str = include_str!("page.html");

pub fn router<S: Clone + Send + Sync + 'static>(
    docs: &'static [(&'static str, &'static str)],
) -> axum::Router<S> {
    axum::Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route(
            "/help/{name}",
            get(move |Path(name): Path<String>| async move { help(docs, &name) }),
        )
}

fn help(docs: &'static [(&'static str, &'static str)], name: &str) -> Response {
    match docs
        .iter()
        .find(|(file, _)| file.trim_end_matches(".md") == name)
    {
        Some((_, text)) => {
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], *text).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
