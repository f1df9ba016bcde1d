//! The stream of events to the visitor. Sending never fails the turn: once the
//! client is gone, events are dropped and the turn still finishes and is saved.

use std::convert::Infallible;

use axum::response::sse::Event;
use tokio::sync::mpsc;

use crate::wire::StreamEvent;

pub type SseItem = Result<Event, Infallible>;

#[derive(Clone)]
pub struct Sink {
    tx: mpsc::Sender<SseItem>,
}

impl Sink {
    pub fn channel() -> (Sink, mpsc::Receiver<SseItem>) {
        // Bounded, so a slow reader slows its own turn instead of growing memory.
        let (tx, rx) = mpsc::channel(64);
        (Sink { tx }, rx)
    }

    pub async fn send(&self, event: StreamEvent) {
        if self.tx.is_closed() {
            return;
        }
        let data = match serde_json::to_string(&event) {
            Ok(data) => data,
            Err(e) => {
                tracing::error!(error = %e, "an event could not be serialised");
                return;
            }
        };
        let _ = self
            .tx
            .send(Ok(Event::default().event(event.name()).data(data)))
            .await;
    }
}
