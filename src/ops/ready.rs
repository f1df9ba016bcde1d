//! `GET /readyz` (SPEC §18): whether this replica can serve turns now — its
//! database answers, Redis answers when the counters live there, and every site
//! that has knowledge has its index open. `/healthz` stays liveness only.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::app::App;

pub async fn readyz(State(app): State<App>) -> (StatusCode, Json<Value>) {
    let database = app.store.ping().await.is_ok();
    // A read of one counter goes to Redis when it is configured (and answers
    // at once from this process otherwise).
    let counters = app.counters.open_streams("readyz").await.is_ok();
    // Whether each index is open: a reload would read every passage again, and
    // this route takes no credentials (the follower reloads, `knowledge::shared`).
    let knowledge = app
        .sites
        .values()
        .filter(|s| !s.config.knowledge.is_empty())
        .all(|s| app.knowledge.has(&s.config.id));
    let ready = database && counters && knowledge;
    let word = |ok: bool| if ok { "ok" } else { "unavailable" };
    let checks = json!({
        "database": word(database),
        "counters": word(counters),
        "knowledge": word(knowledge),
    });
    match ready {
        true => (
            StatusCode::OK,
            Json(json!({"status": "ready", "checks": checks})),
        ),
        // Not ready is an error in the envelope of SPEC §5, with what failed.
        false => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "error": {"code": "service_unavailable", "message": "This replica cannot serve turns right now."},
                "checks": checks,
            })),
        ),
    }
}
