//! The console's view of the desk (SPEC §19): the queue, who is present, and
//! an operator's Cancel of a pending card (never a Confirm: answering a card
//! is the visitor's alone).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::availability::PRESENCE_MS;
use super::console::display_name;
use crate::app::App;
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::ids::{CallId, ConversationId};
use crate::operator::auth::Operator;
use crate::store::desk::Holder;
use crate::wire::{PresenceView, QueueItem, QueueView};

/// At most this many conversations are listed.
const QUEUE_LIMIT: i64 = 200;

/// `GET /v1/operator/queue`.
pub async fn queue(
    State(app): State<App>,
    operator: Operator,
) -> Result<Json<QueueView>, ApiError> {
    let now = app.clock.now_ms();
    let rows = app.store.desk().queue(QUEUE_LIMIT).await?;
    let me = Holder::Operator(operator.email.clone());
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        let name = display_name(&app, &row.holder).await?;
        items.push(QueueItem {
            mine: row.holder == me,
            holder: super::holder_event(&row.holder, name.as_deref()).holder,
            name,
            since: rfc3339(row.since),
            waiting_s: ((now - row.since) / 1000).max(0),
            unread: row.unread,
            conversation: row.conversation,
            site: row.site,
        });
    }
    let waiting = items
        .iter()
        .filter(|i| i.holder == crate::wire::HolderKind::Queue)
        .count();
    Ok(Json(QueueView { items, waiting }))
}

/// `GET /v1/operator/presence`.
pub async fn presence(
    State(app): State<App>,
    operator: Operator,
) -> Result<Json<PresenceView>, ApiError> {
    // Asking is being at the desk.
    operator.present(&app).await;
    let since = app.clock.now_ms() - PRESENCE_MS;
    let names: Vec<String> = app
        .store
        .operators()
        .present_since(since)
        .await?
        .into_iter()
        .map(|n| n.unwrap_or_else(|| super::DEFAULT_OPERATOR_NAME.to_string()))
        .collect();
    crate::ops::metrics::operators_online(names.len() as i64);
    Ok(Json(PresenceView {
        online: names.len(),
        names,
    }))
}

/// `POST /v1/operator/conversations/{id}/calls/{call}/cancel`: an operator
/// cancels a pending card, audited with the operator.
pub async fn cancel_card(
    State(app): State<App>,
    operator: Operator,
    Path((id, call)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let id = ConversationId::parse(&id).ok_or(ApiError::ConversationNotFound)?;
    let call = CallId::parse(&call).ok_or(ApiError::CallNotFound)?;
    let cancelled = app
        .store
        .cards()
        .cancel_by_operator(
            id.as_str(),
            call.as_str(),
            &operator.email,
            app.clock.now_ms(),
        )
        .await?;
    match cancelled {
        Some(c) => {
            app.live.publish(&c.site, &c.conversation, "card_answered");
            // The visitor's widget closes the card at once (`card` event).
            let data = serde_json::json!({"call": c.id, "status": "cancelled"}).to_string();
            let event = crate::store::desk::NewEvent {
                kind: "card",
                data: &data,
            };
            app.store
                .desk()
                .append(&c.conversation, event, app.clock.now_ms())
                .await?;
            crate::ops::metrics::confirmation(&c.site, "cancelled");
            Ok(StatusCode::NO_CONTENT)
        }
        None => Err(ApiError::CallNotPending),
    }
}
