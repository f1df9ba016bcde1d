//! `POST /v1/ask` (SPEC §5): a new question, or the answer to a confirmation card.
//!
//! The handler runs the guards and every check that can refuse the request, then
//! hands the turn to a task that outlives the request (a visitor who leaves does
//! not lose the answer). It answers with JSON errors until the task says the stream
//! has started, and with the event stream after.

pub mod approved;
mod prompt;
mod recover;
mod sink;
mod turn;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::sync::oneshot;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

use crate::app::App;
use crate::error::{ApiError, RawBody};
use crate::ids::ConversationId;
use crate::wire::{AskBody, AskRequest};
use crate::{confirm, guard};

pub use recover::{lease_forever, recover};
pub use sink::Sink;
pub use turn::Turn;

pub fn router() -> Router<App> {
    Router::new().route("/v1/ask", post(ask))
}

/// How the turn task tells the handler whether the stream has started.
pub type Ready = oneshot::Sender<Result<(), ApiError>>;

async fn ask(
    State(app): State<App>,
    peer: guard::Peer,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, ApiError> {
    let received = tokio::time::Instant::now();
    // The headers' values, like the body (`RawBody`), are copied out of the
    // connection's read buffer before the first wait, so that hyper reuses that
    // buffer rather than keeping a second one for the stream's life.
    let headers = guard::owned_headers(&headers);
    // The guards' futures are boxed: they are large and live only until the
    // stream starts, and the handler's own future is held while it waits.
    let caller = Box::pin(guard::admit(&app, &headers, peer, guard::Door::Ask)).await?;
    let body: AskBody =
        serde_json::from_slice(&body).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let request = AskRequest::from_body(body).map_err(ApiError::InvalidRequest)?;
    let stalled = std::time::Duration::from_secs_f64(app.config.server.stalled_reader_timeout_s);
    let (sink, events) = Sink::channel(stalled);
    let (ready, started) = oneshot::channel();
    match request {
        AskRequest::Question {
            conversation,
            message,
        } => {
            let limit = caller.site.config.limits.max_message_chars;
            if message.chars().count() > limit {
                return Err(ApiError::MessageTooLong(limit));
            }
            // The turn listens for changes of holder from before the read
            // that finds who holds the conversation.
            let desk = app.store.desk().subscribe();
            let conversation = match conversation {
                None => None,
                Some(id) => match ConversationId::parse(&id) {
                    Some(id) => match Box::pin(guard::held_by(&app, &caller, &id)).await? {
                        Some(holder) => Some((id, holder)),
                        None => return Err(ApiError::ConversationNotFound),
                    },
                    None => return Err(ApiError::ConversationNotFound),
                },
            };
            // While a person holds the conversation the message is theirs to
            // answer: stored and acknowledged, never sent to the model.
            if let Some((id, holder)) = &conversation
                && holder.is_person()
                && let Some(queued) =
                    Box::pin(crate::desk::queued(&app, &caller, id, holder, &message)).await?
            {
                return Ok(queued);
            }
            let conversation = conversation.map(|(id, _)| id);
            let admission = Box::pin(guard::admit_question(&app, &caller)).await?;
            let span = tracing::info_span!(
                "turn",
                site = %caller.site.config.id,
                conversation = tracing::field::Empty
            );
            let turn = Turn::new(app.clone(), caller, admission, sink, ready)
                .received_at(received)
                .watching(desk);
            app.turns
                .spawn(turn.question(conversation, message).instrument(span));
        }
        AskRequest::Answer {
            conversation,
            call,
            decision,
            signature,
            edits,
        } => {
            let verified = Box::pin(confirm::verify_answer(
                &app,
                &caller,
                &conversation,
                &call,
                &signature,
            ))
            .await?;
            // Edits never run: the server signs a new card for them (SPEC §20).
            // `edits: {}` is a plain Confirm.
            if let Some(edits) = edits.filter(|e| e.get().trim() != "{}") {
                let card = Box::pin(confirm::edit::resign(&app, &verified, edits.get())).await?;
                return edited(&verified.call, card);
            }
            let admission = Box::pin(guard::admit_turn(&app, &caller)).await?;
            let span = tracing::info_span!(
                "turn",
                site = %caller.site.config.id,
                conversation = %verified.call.conversation,
                call = %verified.call.id
            );
            let turn = Turn::new(app.clone(), caller, admission, sink, ready);
            app.turns
                .spawn(turn.answer(verified, decision).instrument(span));
        }
    }
    match started.await {
        Ok(Ok(())) => Ok(Sse::new(ReceiverStream::new(events))
            .keep_alive(KeepAlive::default())
            .into_response()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ApiError::Internal(anyhow::anyhow!(
            "the turn ended before its stream started"
        ))),
    }
}

/// The answer to an edit: the old card closed, the new card, and the end of a
/// turn that waits for its confirmation — as a short event stream, so a client
/// reads it as it reads any answer.
fn edited(
    old: &crate::store::CallRow,
    card: crate::wire::StreamEvent,
) -> Result<Response, ApiError> {
    use crate::wire::{StreamEvent, TurnStatus, Usage};
    let events = [
        StreamEvent::Decision {
            call: old.id.clone(),
            status: crate::states::CallStatus::Cancelled,
        },
        card,
        StreamEvent::Done {
            status: TurnStatus::AwaitingConfirmation,
            usage: Usage::ZERO,
        },
    ];
    let mut items = Vec::with_capacity(events.len());
    for event in events {
        let data = serde_json::to_string(&event).map_err(anyhow::Error::from)?;
        items.push(Ok::<_, std::convert::Infallible>(
            axum::response::sse::Event::default()
                .event(event.name())
                .data(data),
        ));
    }
    Ok(Sse::new(futures_util::stream::iter(items)).into_response())
}
