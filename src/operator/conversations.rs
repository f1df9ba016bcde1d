//! Conversations for operators: the newest-first list with its filters, one
//! conversation as the widget shows it with every call's audit rows and token
//! usage, and the live stream of changes that keeps the list current.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::response::sse::{Event, Sse};
use futures_util::Stream;
use serde::Deserialize;

use super::auth::Operator;
use super::{Params, cursor, page, page_limit, parse_cursor, query_site};
use crate::app::App;
use crate::audit::ExportRow;
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::ids::ConversationId;
use crate::states::MessageStatus;
use crate::store::{ConversationFilter, ConversationListRow};
use crate::wire::{
    CallView, ConversationDetail, ConversationSummary, LastMessage, OperatorMessage, Page,
    PendingCard, Usage,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    site: Option<String>,
    status: Option<MessageStatus>,
    #[serde(default)]
    pending: bool,
    q: Option<String>,
    cursor: Option<String>,
    limit: Option<i64>,
}

pub async fn list(
    State(app): State<App>,
    _: Operator,
    Params(query): Params<ListQuery>,
) -> Result<Json<Page<ConversationSummary>>, ApiError> {
    if let Some(site) = &query.site {
        query_site(&app, site)?;
    }
    if query.q.as_ref().is_some_and(|q| q.chars().count() > 200) {
        return Err(ApiError::InvalidRequest("q: at most 200 characters".into()));
    }
    if query.status == Some(MessageStatus::Sent) {
        return Err(ApiError::InvalidRequest(
            "status: one of answered, awaiting_confirmation, failed, streaming".into(),
        ));
    }
    let limit = page_limit(query.limit, 50)?;
    let filter = ConversationFilter {
        site: query.site,
        status: query.status,
        pending: query.pending,
        q: query.q,
        before: query.cursor.as_deref().map(parse_cursor).transpose()?,
        limit: limit + 1,
        window: crate::store::SEARCH_WINDOW,
    };
    let (rows, window_end) = app.store.conversations().list(&filter).await?;
    let (rows, mut next_cursor) = page(rows, limit, |r| cursor(r.created_at, &r.id));
    // A word search that read its whole window goes on after it, even when the
    // window held fewer matches than the page.
    if next_cursor.is_none()
        && let Some((at, id)) = window_end
    {
        next_cursor = Some(cursor(at, &id));
    }
    Ok(Json(Page {
        items: rows.into_iter().map(summary).collect(),
        next_cursor,
    }))
}

fn summary(row: ConversationListRow) -> ConversationSummary {
    ConversationSummary {
        started_at: rfc3339(row.created_at),
        last_message: row.last.map(|(role, text, at)| LastMessage {
            role,
            text: preview(&text),
            at: rfc3339(at),
        }),
        status: row.status,
        pending_card: row
            .pending
            .map(|(call, tool, label, expires_at)| PendingCard {
                call,
                tool,
                label,
                expires_at: expires_at.map(rfc3339),
            }),
        id: row.id,
        site: row.site,
        visitor: row.visitor,
        user_id: row.user_id,
    }
}

/// The start of a long message, for a list row.
fn preview(text: &str) -> String {
    const CHARS: usize = 200;
    match text.char_indices().nth(CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

pub async fn show(
    State(app): State<App>,
    operator: Operator,
    Path(id): Path<String>,
) -> Result<Json<ConversationDetail>, ApiError> {
    let id = ConversationId::parse(&id).ok_or(ApiError::ConversationNotFound)?;
    let id = id.as_str();
    let (site, visitor, user_id, started) = app
        .store
        .conversations()
        .head(id)
        .await?
        .ok_or(ApiError::ConversationNotFound)?;
    app.store
        .cards()
        .expire_due_in(id, app.clock.now_ms())
        .await?;
    let messages = app.store.conversations().messages(id).await?;
    let calls = app.store.calls().in_conversation(id).await?;
    let usage = app.store.usage().by_message(id).await?;
    let mut call_views = Vec::with_capacity(calls.len());
    for call in &calls {
        let audit = app.store.audit().for_call(&call.id).await?;
        call_views.push(CallView {
            call: call.id.clone(),
            tool: call.tool.clone(),
            label: call.label.clone(),
            policy: call.policy,
            kind: call.kind,
            status: call.status,
            reason: call.reason,
            arguments: serde_json::from_str(&call.arguments).unwrap_or(serde_json::Value::Null),
            created_at: rfc3339(call.created_at),
            decided_at: call.decided_at.map(rfc3339),
            audit: audit
                .iter()
                .map(|row| serde_json::to_value(ExportRow::from(row)))
                .collect::<Result<_, _>>()
                .map_err(|e| ApiError::Internal(e.into()))?,
        });
    }
    let feedback = app.store.feedback().in_conversation(id).await?;
    let view = crate::conversation::view(id.to_string(), messages, calls, &feedback);
    let mut total = Usage::ZERO;
    let messages = view
        .messages
        .into_iter()
        .map(|mut message| {
            // An operator reads cards; answering one is the visitor's alone, so
            // no signature leaves through this API.
            for step in message.steps.iter_mut().flatten() {
                step.signature = None;
            }
            let usage = usage.get(&message.id).map(|&(input, output)| Usage {
                input_tokens: input.max(0) as u64,
                output_tokens: output.max(0) as u64,
            });
            if let Some(u) = usage {
                total.add(u);
            }
            OperatorMessage { message, usage }
        })
        .collect();
    let holder = app
        .store
        .desk()
        .holder(id)
        .await?
        .map_or(crate::store::desk::Holder::Assistant, |(h, _)| h);
    let holder_name = crate::desk::display_name(&app, &holder).await?;
    let contact = app.store.desk().contact(id).await?;
    Ok(Json(ConversationDetail {
        holder: crate::desk::holder_event(&holder, holder_name.as_deref()).holder,
        held_by_you: holder == crate::store::desk::Holder::Operator(operator.email.clone()),
        holder_name,
        contact,
        id: id.to_string(),
        site,
        visitor,
        user_id,
        started_at: rfc3339(started),
        messages,
        calls: call_views,
        usage: total,
    }))
}

/// Server-sent events: one `conversation` event per change, for the live list.
/// The credential is checked again before each event and every `RECHECK` (when
/// a comment also keeps proxies from closing the quiet stream): a stream ends
/// once its session is signed out, idle too long or its token revoked.
pub async fn events(
    State(app): State<App>,
    operator: Operator,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut recheck = tokio::time::interval(RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    recheck.reset();
    let state = (app.live.subscribe(), app, operator, recheck);
    let stream = futures_util::stream::unfold(
        state,
        |(mut receiver, app, operator, mut recheck)| async move {
            loop {
                tokio::select! {
                    change = receiver.recv() => match change {
                        Ok(change) => {
                            // Nothing more reaches a console whose credential ended.
                            if !operator.still_valid(&app).await {
                                return None;
                            }
                            let event = Event::default()
                                .event("conversation")
                                .json_data(&change)
                                .unwrap_or_else(|_| Event::default().comment("unencodable change"));
                            return Some((Ok(event), (receiver, app, operator, recheck)));
                        }
                        // A console that fell behind re-reads the list on the next change.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                    },
                    _ = recheck.tick() => {
                        if !operator.still_valid(&app).await {
                            return None;
                        }
                        // An open console is an operator at the desk (SPEC §19).
                        operator.present(&app).await;
                        let alive = Event::default().comment("still here");
                        return Some((Ok(alive), (receiver, app, operator, recheck)));
                    }
                }
            }
        },
    );
    Sse::new(stream)
}

/// How often a live stream checks its credential and shows it is alive.
const RECHECK: Duration = Duration::from_secs(15);
