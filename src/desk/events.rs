//! `GET /v1/conversations/{id}/events` (SPEC §19): the visitor's live channel.
//!
//! Every event is a row numbered within its conversation (`store::desk`), and
//! the SSE `id` is that number, so a reconnect's `Last-Event-ID` resumes
//! exactly after the last event the visitor got, on whichever replica it
//! lands: nothing is lost and nothing comes twice. A connection without it
//! gets the conversation's events from the first (a handful: replies and
//! changes of holder), which a widget matches to history by message id.
//!
//! The stream reads the table after the last number it sent whenever it is
//! woken (`store::desk`'s per-conversation wakers: a commit on this replica, a PostgreSQL notification
//! from another) and, as a safety net for a lost wake-up, every `RECHECK`.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;

use crate::app::App;
use crate::error::ApiError;
use crate::guard::{self, streams::StreamSlot};
use crate::store::desk::{DeskEvent, Watch};

/// How often a stream reads its events without being woken.
const RECHECK: Duration = Duration::from_secs(10);
/// Events read at a time.
const PAGE: i64 = 100;

pub async fn stream(
    State(app): State<App>,
    peer: guard::Peer,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = guard::admit(&app, &headers, peer, guard::Door::Read).await?;
    let id = super::visitor::owned(&app, &caller, &id).await?;
    let after = last_event_id(&headers)?;
    let slot = guard::admit_event_stream(&app, &caller).await?;
    Ok(Sse::new(events(app, id, after, slot))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The number after which to resume: `Last-Event-ID`, or 0 for everything.
fn last_event_id(headers: &HeaderMap) -> Result<i64, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(0);
    };
    value
        .to_str()
        .ok()
        .map(str::trim)
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            ApiError::InvalidRequest("Last-Event-ID must be an event id this stream sent".into())
        })
}

struct State_ {
    app: App,
    conversation: String,
    after: i64,
    ready: std::collections::VecDeque<DeskEvent>,
    watch: Watch,
    /// Counts this stream against the visitor's cap until it ends.
    _slot: StreamSlot,
}

fn events(
    app: App,
    conversation: String,
    after: i64,
    slot: StreamSlot,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let watch = app.store.desk().watch(&conversation);
    let state = State_ {
        app,
        conversation,
        after,
        ready: Default::default(),
        watch,
        _slot: slot,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.ready.pop_front() {
                s.after = event.seq;
                let sse = Event::default()
                    .id(event.seq.to_string())
                    .event(event.kind)
                    .data(event.data);
                return Some((Ok(sse), s));
            }
            // The wait is enabled before the read, so a commit between the
            // read and the wait still wakes it.
            let notify = std::sync::Arc::clone(&s.watch.notify);
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match s
                .app
                .store
                .desk()
                .events_after(&s.conversation, s.after, PAGE)
                .await
            {
                Ok(page) if !page.is_empty() => {
                    s.ready.extend(page);
                    continue;
                }
                Ok(_) => {}
                // A database out of reach: the next wake or recheck reads again.
                Err(e) => tracing::warn!(error = %e, "a visitor's events could not be read"),
            }
            // Woken by a commit of this conversation's (or a missed-wake
            // "*"), or the re-read's time has come.
            let _ = tokio::time::timeout(RECHECK, woken).await;
        }
    })
}
