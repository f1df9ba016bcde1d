//! `GET /v1/conversations/{id}` (SPEC §11): the messages of a conversation with
//! their citations and steps, so a reload shows everything and a pending card can
//! still be answered until it expires.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};

use crate::app::App;
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::guard;
use crate::ids::ConversationId;
use crate::states::{CallKind, CallStatus, Role};
use crate::store::stored::{StoredError, decode_citations, decode_lines};
use crate::store::{CallRow, FeedbackRow, MessageRow};
use crate::wire::{ArgLine, Citation, ConversationView, MessageView, StepView};

pub fn router() -> Router<App> {
    Router::new().route("/v1/conversations/{id}", get(show))
}

async fn show(
    State(app): State<App>,
    peer: guard::Peer,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<ConversationView>, ApiError> {
    let caller = guard::admit(&app, &headers, peer, guard::Door::Read).await?;
    // Another visitor's conversation looks exactly like a missing one.
    let id = match ConversationId::parse(&id) {
        Some(id) if guard::owns(&app, &caller, &id).await? => id.as_str().to_string(),
        _ => return Err(ApiError::ConversationNotFound),
    };
    app.store
        .cards()
        .expire_due_in(&id, app.clock.now_ms())
        .await?;
    let messages = app.store.conversations().messages(&id).await?;
    let calls = app.store.calls().in_conversation(&id).await?;
    let feedback = app.store.feedback().in_conversation(&id).await?;
    Ok(Json(view(id, messages, calls, &feedback)))
}

/// Puts an assistant message, as history shows it, on the visitor's live
/// channel (`event: answer`): a continuation that no request streamed — after
/// a teammate's decision, or a crash — reaches an open widget at once.
pub(crate) async fn deliver(app: &App, conversation: &str, message: &str) -> anyhow::Result<()> {
    let messages = app.store.conversations().messages(conversation).await?;
    let calls = app.store.calls().in_conversation(conversation).await?;
    // A new answer has no rating yet.
    let view = view(conversation.to_string(), messages, calls, &HashMap::new());
    let Some(shown) = view.messages.iter().find(|m| m.id == message) else {
        return Ok(());
    };
    let data = serde_json::to_string(shown)?;
    let event = crate::store::desk::NewEvent {
        kind: "answer",
        data: &data,
    };
    app.store
        .desk()
        .append(conversation, event, app.clock.now_ms())
        .await?;
    Ok(())
}

pub(crate) fn view(
    id: String,
    messages: Vec<MessageRow>,
    calls: Vec<CallRow>,
    feedback: &HashMap<String, FeedbackRow>,
) -> ConversationView {
    let mut steps: HashMap<&str, Vec<StepView>> = HashMap::new();
    // A card the visitor's edits replaced shows as the card that replaced it
    // (SPEC §20): the audit keeps both, history the one that counts.
    let replaced: std::collections::HashSet<&str> = calls
        .iter()
        .filter_map(|c| c.edited_from.as_deref())
        .collect();
    let shown = |c: &&CallRow| c.status != CallStatus::Refused && !replaced.contains(c.id.as_str());
    for call in calls.iter().filter(shown) {
        steps
            .entry(call.message.as_str())
            .or_default()
            .push(step(call));
        if let (Some(message), Some(status)) = (&call.run_message, &call.run_status) {
            steps
                .entry(message.as_str())
                .or_default()
                .push(run_step(call, *status));
        }
    }
    let messages = messages
        .into_iter()
        .map(|m| {
            let assistant = m.role == Role::Assistant;
            let citations: Option<Vec<Citation>> = assistant.then(|| {
                m.citations
                    .as_deref()
                    .map(|c| stored(&m.id, decode_citations(c)))
                    .unwrap_or_default()
            });
            MessageView {
                role: m.role,
                status: assistant.then_some(m.status),
                created_at: rfc3339(m.created_at),
                citations,
                steps: assistant.then(|| steps.remove(m.id.as_str()).unwrap_or_default()),
                name: m.author,
                feedback: feedback.get(&m.id).map(crate::feedback::view),
                text: m.text,
                id: m.id,
            }
        })
        .collect();
    ConversationView { id, messages }
}

fn step(call: &CallRow) -> StepView {
    let confirmation = call.kind == CallKind::Confirmation;
    let decoded = call.lines.as_deref().map(decode_lines);
    // A card whose lines cannot be shown cannot be answered: without its lines
    // the visitor would confirm a call they never saw, so no signature is given.
    let readable = matches!(decoded, Some(Ok(_)));
    let lines: Option<Vec<ArgLine>> =
        confirmation.then(|| decoded.map(|d| stored(&call.id, d)).unwrap_or_default());
    StepView {
        call: call.id.clone(),
        tool: call.tool.clone(),
        label: call.label.clone(),
        kind: call.kind,
        status: call.status,
        arguments: lines,
        expires_at: call.expires_at.filter(|_| confirmation).map(rfc3339),
        signature: call
            .signature
            .clone()
            .filter(|_| call.status == CallStatus::Pending && readable),
        decided_at: confirmation.then(|| call.decided_at.map(rfc3339)),
        editable: match call.status == CallStatus::Pending && readable {
            true => crate::confirm::card::editable_of(call),
            false => Vec::new(),
        },
        quota: crate::confirm::card::quota_of(call),
    }
}

/// A stored list that does not parse is a fault of ours, logged loudly with the
/// row it belongs to; the history still shows everything else.
fn stored<T>(row: &str, decoded: Result<Vec<T>, StoredError>) -> Vec<T> {
    decoded.unwrap_or_else(|e| {
        tracing::error!(row, error = %e, "a stored row could not be read");
        Vec::new()
    })
}

/// The run of a confirmed call, shown on the continuation's message.
fn run_step(call: &CallRow, status: CallStatus) -> StepView {
    StepView {
        call: call.id.clone(),
        tool: call.tool.clone(),
        label: call.label.clone(),
        kind: CallKind::Confirmation,
        status,
        arguments: None,
        expires_at: None,
        signature: None,
        decided_at: None,
        editable: Vec::new(),
        quota: None,
    }
}
