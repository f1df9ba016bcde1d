//! The visitor's side of the desk: asking for a person, and asks while a
//! person holds the conversation (stored and acknowledged, never answered by
//! the model, no budget charged; the guards ran before either).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{holder_audit, holder_event};
use crate::app::App;
use crate::error::{ApiError, RawBody};
use crate::guard::{self, Caller};
use crate::ids::{ConversationId, new_id};
use crate::states::{AuditEvent, MessageStatus, Role};
use crate::store::MessageRow;
use crate::store::desk::{Changed, Holder, HolderChange, NewEvent};
use crate::wire::{ContactBody, HandoffBody, HolderKind, HolderView, QueuedAck};

/// The longest reason a visitor may give, in characters.
const MAX_REASON_CHARS: usize = 500;

/// `POST /v1/conversations/{id}/handoff`: the visitor's "Talk to a person".
/// The conversation waits in the queue; asking again while it waits or while
/// a person holds it changes nothing (one handoff).
pub async fn handoff(
    State(app): State<App>,
    peer: guard::Peer,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawBody(body): RawBody,
) -> Result<Json<HolderView>, ApiError> {
    let caller = Box::pin(guard::admit(&app, &headers, peer, guard::Door::Ask)).await?;
    let id = owned(&app, &caller, &id).await?;
    let body: HandoffBody = match body.is_empty() {
        true => HandoffBody::default(),
        false => {
            serde_json::from_slice(&body).map_err(|e| ApiError::InvalidRequest(e.to_string()))?
        }
    };
    let reason = body.reason.unwrap_or_default();
    if reason.chars().count() > MAX_REASON_CHARS || reason.contains('\0') {
        return Err(ApiError::InvalidRequest(format!(
            "reason must be at most {MAX_REASON_CHARS} characters, without NUL"
        )));
    }
    if !caller.site.config.handoff.enabled {
        return Err(ApiError::HandoffDisabled);
    }
    Ok(Json(
        match to_queue(&app, &caller, &id, "visitor", &reason).await? {
            Handed::To(holder, name) => HolderView {
                conversation: id,
                holder: holder_event(&holder, name.as_deref()).holder,
                name,
                offline: None,
            },
            Handed::Nobody(message) => HolderView {
                conversation: id,
                holder: HolderKind::Assistant,
                name: None,
                offline: Some(message),
            },
        },
    ))
}

/// Where a handoff left the conversation.
pub enum Handed {
    /// With a person, or waiting for one: the holder and an operator's name.
    To(Holder, Option<String>),
    /// Nobody is there: the conversation stays with the assistant, and the
    /// visitor is told this.
    Nobody(String),
}

/// `POST /v1/conversations/{id}/contact`: the email a visitor leaves when
/// nobody is there. Kept for the console; never shown to the model.
pub async fn contact(
    State(app): State<App>,
    peer: guard::Peer,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawBody(body): RawBody,
) -> Result<StatusCode, ApiError> {
    let caller = Box::pin(guard::admit(&app, &headers, peer, guard::Door::Ask)).await?;
    let id = owned(&app, &caller, &id).await?;
    let body: ContactBody =
        serde_json::from_slice(&body).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let email = body.email.trim();
    // A plain address only: it becomes a mailto: link in the console, where
    // `?`, `&` or `=` could add recipients or a body.
    let part = |p: &str, allowed: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || allowed.contains(c))
    };
    let plausible = email.len() <= 320
        && email
            .split_once('@')
            .is_some_and(|(local, domain)| part(local, "._%+-") && part(domain, ".-"));
    if !plausible {
        return Err(ApiError::InvalidRequest(
            "email must be an email address".into(),
        ));
    }
    app.store
        .desk()
        .leave_contact(&id, email, app.clock.now_ms())
        .await?;
    app.live
        .publish(&caller.site.config.id, &id, "contact_left");
    Ok(StatusCode::NO_CONTENT)
}

/// Puts a conversation the assistant holds in the queue, audited as asked by
/// `from` (`visitor` or `assistant`). A conversation already with a person
/// stays as it is. Returns the holder after, and the operator's display name.
pub async fn to_queue(
    app: &App,
    caller: &Caller,
    id: &str,
    from: &str,
    reason: &str,
) -> Result<Handed, ApiError> {
    // A conversation already with a person (or waiting for one) stays so.
    if let Some((holder, _)) = app.store.desk().holder(id).await?
        && holder.is_person()
    {
        let name = super::console::display_name(app, &holder).await?;
        return Ok(Handed::To(holder, name));
    }
    if let Err(message) = super::availability::someone_there(app, &caller.site).await? {
        return Ok(Handed::Nobody(message));
    }
    let site = &caller.site.config.id;
    let now = app.clock.now_ms();
    let details = serde_json::json!({"from": from, "reason": reason});
    let audit = holder_audit(
        AuditEvent::Handoff,
        id,
        site,
        &caller.visitor,
        details,
        None,
        now,
    );
    let event = serde_json::to_string(&holder_event(&Holder::Queue, None))
        .map_err(|e| ApiError::Internal(e.into()))?;
    let changed = app
        .store
        .desk()
        .change_holder(HolderChange {
            conversation: id,
            from: &Holder::Assistant,
            to: &Holder::Queue,
            now,
            audit: &audit,
            event: NewEvent {
                kind: "holder",
                data: &event,
            },
            note: None,
        })
        .await?;
    match changed {
        Changed::From(_) => {
            app.live.publish(site, id, "handoff");
            crate::ops::metrics::handoff(site, from);
            Ok(Handed::To(Holder::Queue, None))
        }
        Changed::Held(holder) => {
            let name = super::console::display_name(app, &holder).await?;
            Ok(Handed::To(holder, name))
        }
        Changed::Missing => Err(ApiError::ConversationNotFound),
    }
}

/// For an ask in a conversation a person holds (or that waits for one): the
/// message is stored and `202 {"queued": true}` returned; the model is not
/// asked and no budget is charged. `None`: the assistant holds it.
pub async fn queued(
    app: &App,
    caller: &Caller,
    conversation: &ConversationId,
    holder: &Holder,
    message: &str,
) -> Result<Option<Response>, ApiError> {
    let id = conversation.as_str();
    let row = MessageRow {
        id: new_id("m"),
        conversation: id.to_string(),
        turn: new_id("t"),
        role: Role::Visitor,
        text: message.to_string(),
        status: MessageStatus::Sent,
        citations: None,
        created_at: app.clock.now_ms(),
        owner: None,
        budget_day: None,
        reserved: 0,
        author: None,
    };
    // Released meanwhile: the assistant answers it as any question.
    if !app.store.desk().queue_visitor_message(&row).await? {
        return Ok(None);
    }
    app.live
        .publish(&caller.site.config.id, id, "visitor_message");
    // Still waiting, and nobody there any more (the hours ended, the last
    // operator left): the visitor is told so, and may leave an email.
    let offline = match *holder {
        Holder::Queue => super::availability::someone_there(app, &caller.site)
            .await?
            .err(),
        _ => None,
    };
    let ack = QueuedAck {
        queued: true,
        conversation: id.to_string(),
        message: row.id,
        offline,
    };
    Ok(Some((StatusCode::ACCEPTED, Json(ack)).into_response()))
}

/// The caller's conversation, or the same 404 as history for anyone else's.
pub(super) async fn owned(app: &App, caller: &Caller, id: &str) -> Result<String, ApiError> {
    match ConversationId::parse(id) {
        Some(id) if guard::owns(app, caller, &id).await? => Ok(id.as_str().to_string()),
        _ => Err(ApiError::ConversationNotFound),
    }
}
