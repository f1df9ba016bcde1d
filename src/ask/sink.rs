//! The stream of events to the visitor. Sending never fails the turn: once the
//! client is gone, events are dropped and the turn still finishes and is saved.
//! A client that stops reading is gone too: an event that cannot be handed over
//! within the stalled-reader timeout (SPEC §5: 30 s) ends the stream, so a client
//! with a tiny receive window cannot pin a turn, its stream slot and its budget.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::response::sse::Event;
use tokio::sync::mpsc;

use crate::wire::StreamEvent;

pub type SseItem = Result<Event, Infallible>;

#[derive(Clone)]
pub struct Sink {
    tx: mpsc::Sender<SseItem>,
    /// Set once the client counts as gone.
    gone: Arc<AtomicBool>,
    stalled_after: Duration,
    /// The turn's deadline: no send waits past it.
    deadline: Option<tokio::time::Instant>,
}

impl Sink {
    pub fn channel(stalled_after: Duration) -> (Sink, mpsc::Receiver<SseItem>) {
        // Bounded, so a slow reader slows its own turn instead of growing memory.
        let (tx, rx) = mpsc::channel(64);
        let sink = Sink {
            tx,
            gone: Arc::new(AtomicBool::new(false)),
            stalled_after,
            deadline: None,
        };
        (sink, rx)
    }

    /// A sink nobody reads: a turn finished on the server alone (after a crash).
    pub fn detached() -> Sink {
        let (sink, _) = Sink::channel(Duration::ZERO);
        sink
    }

    /// No send of this sink waits past `deadline` (the turn's).
    pub fn until(&mut self, deadline: tokio::time::Instant) {
        self.deadline = Some(deadline);
    }

    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed) || self.tx.is_closed()
    }

    pub async fn send(&self, event: StreamEvent) {
        if self.is_gone() {
            return;
        }
        let data = match serde_json::to_string(&event) {
            Ok(data) => data,
            Err(e) => {
                tracing::error!(error = %e, "an event could not be serialised");
                return;
            }
        };
        let item = Ok(Event::default().event(event.name()).data(data));
        let mut until = tokio::time::Instant::now() + self.stalled_after;
        if let Some(deadline) = self.deadline {
            until = until.min(deadline);
        }
        match tokio::time::timeout_at(until, self.tx.send(item)).await {
            Ok(_) => {}
            Err(_) => {
                tracing::info!("the client stopped reading; the turn goes on without it");
                self.gone.store(true, Ordering::Relaxed);
            }
        }
    }
}
