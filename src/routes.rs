//! The HTTP surface: every route, the layers around them, and serving with a
//! graceful shutdown. Every entry point (serve, demo, tests, benchmarks) serves
//! the app built by `app::build` through here.

use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Method, header};
use axum::routing::get;
use tokio::net::TcpListener;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::app::App;

/// Request bodies are small JSON documents; anything larger is refused early.
const BODY_LIMIT: usize = 64 * 1024;
/// A body must arrive within this, so a slow sender cannot hold a connection open.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

pub fn router(app: App) -> Router {
    let request_id = HeaderName::from_static("x-request-id");
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(crate::ops::ready::readyz))
        .route("/openapi.json", get(crate::ops::openapi::openapi_json))
        .merge(crate::visitor::router())
        .merge(crate::ask::router())
        .merge(crate::conversation::router())
        .merge(crate::feedback::router())
        .merge(crate::desk::router())
        .merge(crate::approvals::router())
        .merge(crate::widget::router())
        .merge(crate::operator::router())
        .merge(crate::console::router())
        .fallback(|| async { crate::error::ApiError::NotFound })
        .method_not_allowed_fallback(|| async { crate::error::ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(RequestBodyTimeoutLayer::new(BODY_READ_TIMEOUT))
        .layer(cors(&app))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &axum::extract::Request| {
            let id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("");
            tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
        }))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(app)
}

/// Preflights are answered only for origins some site lists, never with a wildcard.
fn cors(app: &App) -> CorsLayer {
    let allowed: Vec<String> = app
        .sites
        .values()
        .flat_map(|s| s.config.origins.clone())
        .collect();
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, _| {
            origin
                .to_str()
                .is_ok_and(|o| allowed.iter().any(|a| a == o))
        }))
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
        .expose_headers([header::RETRY_AFTER])
        .max_age(Duration::from_secs(600))
}

async fn healthz(
    axum::extract::State(app): axum::extract::State<App>,
) -> Result<axum::Json<serde_json::Value>, crate::error::ApiError> {
    app.store.ping().await?;
    Ok(axum::Json(serde_json::json!({"status": "ok"})))
}

/// Serves until `shutdown` resolves, then waits (bounded) for running turns so that
/// answers in progress are finished and saved.
pub async fn serve(
    app: App,
    router: Router,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // What a dead process left is finished before anything new is accepted: on a
    // SQLite file this process has alone, every other lease is a dead one;
    // otherwise a lease is claimed once it has lapsed (`ask::lease_forever`). A
    // failure is logged and the next renewal tries again: it must not stop the
    // server from starting.
    if let Err(e) = crate::ask::recover(&app, true).await {
        tracing::error!(error = format!("{e:#}"), "recovery at start failed");
    }
    let sweeper = tokio::spawn(crate::confirm::expiry::sweep_forever(app.clone()));
    let knowledge = tokio::spawn(crate::knowledge::shared::follow_forever(app.clone()));
    let lease = tokio::spawn(crate::ask::lease_forever(app.clone()));
    let desk = tokio::spawn(crate::desk::notify::listen_forever(app.clone()));
    let server = &app.config.server;
    let limits = crate::server::limits::Limits {
        max_connections: server.max_connections.max(1),
        max_connections_per_ip: server.max_connections_per_ip.max(1),
        first_request: Duration::from_secs_f64(server.header_read_timeout_s),
        idle: Duration::from_secs_f64(server.idle_timeout_s),
        // An ask's stream begins when the model answers, which may take up to
        // the turn's whole time; the turn ends itself by then.
        handler: Duration::from_secs_f64(app.config.llm.turn_timeout_s) + Duration::from_secs(30),
        max_request_head: server.max_request_head_kib.saturating_mul(1024),
    };
    let proxies = app.trusted_proxies.clone();
    crate::server::run(listener, router, limits, proxies, shutdown).await?;
    sweeper.abort();
    knowledge.abort();
    desk.abort();
    app.turns.close();
    if tokio::time::timeout(Duration::from_secs(30), app.turns.wait())
        .await
        .is_err()
    {
        tracing::warn!("some turns were still running after 30 seconds and were stopped");
        // The lease is kept: what those turns left is recovered once it lapses.
        lease.abort();
        return Ok(());
    }
    lease.abort();
    if let Err(e) = app.store.leases().release().await {
        tracing::warn!(error = format!("{e:#}"), "the lease could not be given up");
    }
    Ok(())
}
