//! The operator's side of the desk (SPEC §19): take over, reply, release.
//! Agents and admins may do all three (a cookie needs the CSRF header, as for
//! every operator call that changes something); only an admin may take over a
//! conversation another operator holds, with `{"force": true}`.

use axum::Json;
use axum::extract::{Path, State};

use super::{holder_audit, holder_event};
use crate::app::App;
use crate::clock::rfc3339;
use crate::error::{ApiError, RawBody};
use crate::ids::{ConversationId, new_id};
use crate::operator::auth::Operator;
use crate::states::{AuditEvent, MessageStatus, OperatorRole, Role};
use crate::store::MessageRow;
use crate::store::desk::{Changed, Holder, HolderChange, NewEvent};
use crate::wire::{DeskMessageEvent, HolderView, ReplyBody, TakeoverBody};

/// The line history shows when a conversation goes back to the assistant.
pub const RELEASED_LINE: &str = "Back with the assistant";

/// The conversation's site and visitor; a malformed or unknown id is a 404.
async fn head(app: &App, id: &str) -> Result<(String, String, String), ApiError> {
    let id = ConversationId::parse(id).ok_or(ApiError::ConversationNotFound)?;
    let (site, visitor, _, _) = app
        .store
        .conversations()
        .head(id.as_str())
        .await?
        .ok_or(ApiError::ConversationNotFound)?;
    Ok((id.as_str().to_string(), site, visitor))
}

/// The display name of whoever holds a conversation, if an operator does.
pub async fn display_name(app: &App, holder: &Holder) -> Result<Option<String>, ApiError> {
    match holder {
        Holder::Operator(email) => Ok(Some(name_of(app, email).await?)),
        _ => Ok(None),
    }
}

/// An operator's display name: the name they were given, an API token's name,
/// or a neutral one; never the email.
async fn name_of(app: &App, email: &str) -> Result<String, ApiError> {
    if let Some(token) = email.strip_prefix("token:") {
        return Ok(token.to_string());
    }
    let name = app.store.operators().name(email).await?;
    Ok(name.unwrap_or_else(|| super::DEFAULT_OPERATOR_NAME.to_string()))
}

fn body<T: serde::de::DeserializeOwned + Default>(raw: &[u8]) -> Result<T, ApiError> {
    match raw.is_empty() {
        true => Ok(T::default()),
        false => serde_json::from_slice(raw).map_err(|e| ApiError::InvalidRequest(e.to_string())),
    }
}

/// `POST /v1/operator/conversations/{id}/takeover`.
pub async fn takeover(
    State(app): State<App>,
    operator: Operator,
    Path(id): Path<String>,
    RawBody(raw): RawBody,
) -> Result<Json<HolderView>, ApiError> {
    let request: TakeoverBody = body(&raw)?;
    let (id, site, visitor) = head(&app, &id).await?;
    let me = Holder::Operator(operator.email.clone());
    let name = name_of(&app, &operator.email).await?;
    let view = |holder: &Holder| HolderView {
        conversation: id.clone(),
        holder: holder_event(holder, Some(&name)).holder,
        name: Some(name.clone()),
        offline: None,
    };
    let force = request.force && operator.role == OperatorRole::Admin;
    // A handoff or a release racing the takeover moves the holder between
    // its read and the compare-and-set: read it again once and retry. Only
    // another operator holding it refuses the takeover.
    for _ in 0..2 {
        let (current, since) = app
            .store
            .desk()
            .holder(&id)
            .await?
            .ok_or(ApiError::ConversationNotFound)?;
        if current == me {
            return Ok(Json(view(&me)));
        }
        if matches!(current, Holder::Operator(_)) && !force {
            return Err(ApiError::ConversationHeld);
        }
        let now = app.clock.now_ms();
        let details = serde_json::json!({"from": "console", "previous": current.as_text()});
        let audit = holder_audit(
            AuditEvent::Handoff,
            &id,
            &site,
            &visitor,
            details,
            Some(&operator.email),
            now,
        );
        let event = serde_json::to_string(&holder_event(&me, Some(&name)))
            .map_err(|e| ApiError::Internal(e.into()))?;
        // History's step line: who the visitor is with from here on.
        let note = event_line(&id, &format!("{name} joined the conversation"), now);
        let changed = app
            .store
            .desk()
            .change_holder(HolderChange {
                conversation: &id,
                from: &current,
                to: &me,
                now,
                audit: &audit,
                event: NewEvent {
                    kind: "holder",
                    data: &event,
                },
                note: Some(&note),
            })
            .await?;
        match changed {
            Changed::From(_) => {
                app.live.publish(&site, &id, "taken_over");
                if let (Holder::Queue, Some(since)) = (&current, since) {
                    crate::ops::metrics::queue_wait(&site, now - since);
                }
                crate::ops::metrics::handoff(&site, "console");
                return Ok(Json(view(&me)));
            }
            Changed::Held(holder) if holder == me => return Ok(Json(view(&me))),
            Changed::Held(Holder::Operator(_)) if !force => return Err(ApiError::ConversationHeld),
            Changed::Held(_) => continue,
            Changed::Missing => return Err(ApiError::ConversationNotFound),
        }
    }
    Err(ApiError::ConversationHeld)
}

/// `POST /v1/operator/conversations/{id}/messages`: a reply from the operator
/// who holds the conversation.
pub async fn reply(
    State(app): State<App>,
    operator: Operator,
    Path(id): Path<String>,
    RawBody(raw): RawBody,
) -> Result<Json<DeskMessageEvent>, ApiError> {
    let request: ReplyBody =
        serde_json::from_slice(&raw).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let (id, site, _) = head(&app, &id).await?;
    let text = request.text.trim();
    let limit = app
        .site(&site)
        .map_or(4000, |s| s.config.limits.max_message_chars);
    if text.is_empty() || text.contains('\0') {
        return Err(ApiError::InvalidRequest(
            "text must not be empty or contain NUL (\\u0000) characters".into(),
        ));
    }
    // A visitor cannot see a direction override or a zero-width character,
    // so an operator may not send one: what is read is what was written.
    // Line breaks, tabs and the joiner inside emoji sequences stay.
    if text
        .chars()
        .any(|c| !matches!(c, '\n' | '\r' | '\t' | '\u{200D}') && crate::tools::render::hidden(c))
    {
        return Err(ApiError::InvalidRequest(
            "text must not contain invisible or direction-changing characters".into(),
        ));
    }
    if text.chars().count() > limit {
        return Err(ApiError::MessageTooLong(limit));
    }
    let name = name_of(&app, &operator.email).await?;
    let now = app.clock.now_ms();
    let row = MessageRow {
        id: new_id("m"),
        conversation: id.clone(),
        turn: new_id("t"),
        role: Role::Operator,
        text: text.to_string(),
        status: MessageStatus::Sent,
        citations: None,
        created_at: now,
        owner: None,
        budget_day: None,
        reserved: 0,
        author: Some(name.clone()),
    };
    let event = DeskMessageEvent {
        id: row.id.clone(),
        role: Role::Operator,
        name: name.clone(),
        text: row.text.clone(),
        created_at: rfc3339(now),
    };
    let data = serde_json::to_string(&event).map_err(|e| ApiError::Internal(e.into()))?;
    let me = Holder::Operator(operator.email.clone());
    let stored = app
        .store
        .desk()
        .reply(
            &me,
            &row,
            NewEvent {
                kind: "message",
                data: &data,
            },
        )
        .await?;
    if !stored {
        return Err(ApiError::NotHeld);
    }
    app.live.publish(&site, &id, "operator_message");
    Ok(Json(event))
}

/// `POST /v1/operator/conversations/{id}/typing`: the visitor sees "Ada is
/// typing…" for a few seconds. Only the operator who holds it; the console
/// sends it at most every few seconds while its operator writes.
pub async fn typing(
    State(app): State<App>,
    operator: Operator,
    Path(id): Path<String>,
) -> Result<axum::http::StatusCode, ApiError> {
    let (id, _, _) = head(&app, &id).await?;
    let name = name_of(&app, &operator.email).await?;
    let now = app.clock.now_ms();
    let data = serde_json::to_string(&crate::wire::TypingEvent {
        name,
        at: rfc3339(now),
    })
    .map_err(|e| ApiError::Internal(e.into()))?;
    let me = Holder::Operator(operator.email.clone());
    let event = NewEvent {
        kind: "typing",
        data: &data,
    };
    match app.store.desk().note(&id, &me, event, now).await? {
        true => Ok(axum::http::StatusCode::NO_CONTENT),
        false => Err(ApiError::NotHeld),
    }
}

/// `POST /v1/operator/conversations/{id}/release`: back to the assistant, by
/// the operator who holds it or an admin (who may also release the queue).
pub async fn release(
    State(app): State<App>,
    operator: Operator,
    Path(id): Path<String>,
) -> Result<Json<HolderView>, ApiError> {
    let (id, site, visitor) = head(&app, &id).await?;
    let (current, _) = app
        .store
        .desk()
        .holder(&id)
        .await?
        .ok_or(ApiError::ConversationNotFound)?;
    let mine = current == Holder::Operator(operator.email.clone());
    let admin = operator.role == OperatorRole::Admin;
    if current == Holder::Assistant || !(mine || admin) {
        return Err(ApiError::NotHeld);
    }
    let now = app.clock.now_ms();
    let details = serde_json::json!({"previous": current.as_text()});
    let audit = holder_audit(
        AuditEvent::Released,
        &id,
        &site,
        &visitor,
        details,
        Some(&operator.email),
        now,
    );
    let note = event_line(&id, RELEASED_LINE, now);
    let event = serde_json::to_string(&holder_event(&Holder::Assistant, None))
        .map_err(|e| ApiError::Internal(e.into()))?;
    let event = NewEvent {
        kind: "holder",
        data: &event,
    };
    let changed = app
        .store
        .desk()
        .change_holder(HolderChange {
            conversation: &id,
            from: &current,
            to: &Holder::Assistant,
            now,
            audit: &audit,
            event,
            note: Some(&note),
        })
        .await?;
    match changed {
        Changed::From(_) => {
            app.live.publish(&site, &id, "released");
            Ok(Json(HolderView {
                conversation: id,
                holder: crate::wire::HolderKind::Assistant,
                name: None,
                offline: None,
            }))
        }
        Changed::Held(_) => Err(ApiError::NotHeld),
        Changed::Missing => Err(ApiError::ConversationNotFound),
    }
}

/// A line of the conversation's own in history ("Ada joined the conversation").
fn event_line(conversation: &str, text: &str, now: crate::clock::Millis) -> MessageRow {
    MessageRow {
        id: new_id("m"),
        conversation: conversation.to_string(),
        turn: new_id("t"),
        role: Role::Event,
        text: text.into(),
        status: MessageStatus::Sent,
        citations: None,
        created_at: now,
        owner: None,
        budget_day: None,
        reserved: 0,
        author: None,
    }
}
