//! The end of a turn: the answer saved with its citations, usage and budget
//! settlement, the stream's last events, and failures told in plain words.

use super::{Bubble, Stop, Turn};
use crate::error::ApiError;
use crate::llm::ProviderError;
use crate::store::stored;
use crate::store::{CallStatus, TurnEnd};
use crate::wire::{Citation, StreamEvent, TurnStatus};

impl Turn {
    pub(super) async fn stopped(&mut self, stop: Stop) -> TurnStatus {
        if let Stop::HandedOff(holder) = &stop {
            let name = crate::desk::display_name(&self.app, holder)
                .await
                .unwrap_or_default();
            let event = crate::desk::holder_event(holder, name.as_deref());
            self.sink
                .send(StreamEvent::Holder {
                    holder: event.holder,
                    name: event.name,
                })
                .await;
            return TurnStatus::Answered;
        }
        let (code, message) = match stop {
            Stop::TakenOver => {
                tracing::warn!(
                    "this turn's work was taken over by another process (this one's lease lapsed); it stops here"
                );
                self.written.taken_over();
                (
                    "taken_over",
                    "This answer was taken over by another server. Reload the conversation to see it.",
                )
            }
            Stop::Provider(ProviderError::TurnTimeout) => {
                tracing::warn!("the turn ran out of time");
                crate::ops::metrics::provider_error("turn_timeout");
                (
                    "turn_timeout",
                    "The answer took too long and was stopped. Please try again.",
                )
            }
            Stop::Provider(e) => {
                tracing::warn!(error = %e, "the model stream failed");
                crate::ops::metrics::provider_error(e.kind());
                (
                    "provider_error",
                    "The assistant's model stopped answering. Please try again.",
                )
            }
            Stop::HandedOff(_) => unreachable_handed_off(),
            Stop::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "a turn failed");
                (
                    "internal_error",
                    "Something went wrong on our side. Please try again.",
                )
            }
        };
        self.sink
            .send(StreamEvent::Error {
                code,
                message: message.into(),
            })
            .await;
        TurnStatus::Failed
    }

    /// Saves the bubble with its citations and usage and settles the turn's budget
    /// share (one transaction), then ends the stream. The save is tried again
    /// until it lands (`Store::until_written`): the visitor is told the end only
    /// once the database holds it, and never when another process took the
    /// answer over.
    pub(super) async fn close(&mut self, bubble: Bubble, status: TurnStatus) -> anyhow::Result<()> {
        let open = match self.written.take() {
            super::written::Written::Open(open) => open,
            super::written::Written::TakenOver(taken) => {
                self.written = super::written::Written::TakenOver(taken);
                self.end_taken_over().await;
                return Ok(());
            }
            other => {
                // Only an open answer is closed: nothing else is owed a write.
                self.written = other;
                anyhow::bail!("a turn closed an answer it had not opened");
            }
        };
        let cited = cited_sources(&bubble.text, &self.sources);
        let citations = (!cited.is_empty()).then(|| stored::encode_citations(&cited));
        if !cited.is_empty() {
            self.sink
                .send(StreamEvent::Citations { items: cited })
                .await;
        }
        let end = TurnEnd {
            message: bubble.id.clone(),
            text: bubble.text,
            status: status.into(),
            citations,
            usage: self.usage,
            unreported: self.unreported,
            budget: open.share.clone(),
            owner: self.fence.clone(),
        };
        let store = &self.app.store;
        let saved = store
            .leases()
            .until_written(&self.fence, "an answer's end", || {
                store.turns().finish(end.clone())
            })
            .await;
        if let Err(crate::store::StoreError::TakenOver) = saved {
            self.written = super::written::Written::TakenOver(open.taken_over());
            self.stopped(Stop::TakenOver).await;
            self.end_taken_over().await;
            return Ok(());
        }
        if saved.is_err() {
            // The end did not land: the answer stays open for `settle`.
            self.written = super::written::Written::Open(open);
        } else {
            self.written = super::written::Written::Ended(open.ended());
        }
        saved?;
        // The stream slot is freed with the admission.
        self.admission = None;
        self.ended(status);
        self.app.live.publish(
            &self.caller.site.config.id,
            &self.conversation,
            "turn_ended",
        );
        self.sink
            .send(StreamEvent::Done {
                status,
                usage: self.usage,
            })
            .await;
        Ok(())
    }

    /// The end of a turn whose answer another process took over: the error
    /// was told by `stopped`; only the last event is left.
    async fn end_taken_over(&mut self) {
        self.written.taken_over();
        self.admission = None;
        self.end_with(TurnStatus::Failed).await;
    }

    pub(super) async fn end_with(&mut self, status: TurnStatus) {
        self.ended(status);
        self.sink
            .send(StreamEvent::Done {
                status,
                usage: self.usage,
            })
            .await;
    }

    /// Counts the ended turn, its duration and its tokens (SPEC §18).
    pub(super) fn ended(&self, status: TurnStatus) {
        let site = &self.caller.site.config.id;
        crate::ops::metrics::turn_ended(site, status.as_str(), self.began.elapsed());
        crate::ops::metrics::tokens(site, self.usage.input_tokens, self.usage.output_tokens);
    }

    /// Tells the visitor's stream how a recovered call's run went (nobody may be
    /// reading: a recovered turn's sink is detached).
    pub(in crate::ask) async fn send_step(
        &self,
        call: &str,
        tool: &crate::tools::Tool,
        status: CallStatus,
    ) {
        self.sink.send(step_event(call, tool, status)).await;
    }

    /// An internal failure: before the stream started it is a 500; after, an error
    /// event and a failed `done`.
    pub(super) async fn abort(&mut self, e: anyhow::Error) {
        if self.ready.is_some() {
            // Before anything was streamed: a 503 for a database out of reach,
            // else a 500 (`ApiError::from`).
            Box::pin(self.refuse_after_start(ApiError::from(e))).await;
            return;
        }
        let status = self.stopped(Stop::from(e)).await;
        self.end_with(status).await;
    }

    /// Refuses a question before anything of it was streamed. A start already
    /// written is settled as failed first, so whatever the visitor reads after
    /// the error (the history, the budget) already shows the answer failed and
    /// its reservation given back. A database out of reach would keep its 503
    /// waiting for that write, so it is told at once and the start settled
    /// after (or, failing that, through the replica's lease).
    pub(super) async fn refuse_after_start(&mut self, refused: ApiError) {
        if matches!(refused, ApiError::ServiceUnavailable(_)) {
            self.start(Err(refused));
            return;
        }
        Box::pin(self.settle()).await;
        self.start(Err(refused));
    }
}

/// `stopped` answers a handoff before it matches the failures.
fn unreachable_handed_off() -> (&'static str, &'static str) {
    (
        "internal_error",
        "Something went wrong on our side. Please try again.",
    )
}

pub(in crate::ask) fn step_event(
    call: &str,
    tool: &crate::tools::Tool,
    status: CallStatus,
) -> StreamEvent {
    StreamEvent::Step {
        call: call.to_string(),
        tool: tool.name.clone(),
        label: tool.label.clone(),
        status,
    }
}

pub(super) fn snippet(text: &str) -> String {
    let mut s: String = text.chars().take(200).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

/// The sources whose `[n]` marker appears in the answer, in source order.
fn cited_sources(text: &str, sources: &[Citation]) -> Vec<Citation> {
    sources
        .iter()
        .filter(|s| text.contains(&format!("[{}]", s.n)))
        .cloned()
        .collect()
}
