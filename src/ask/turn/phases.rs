//! Where a question's first token spent its time. When an operator asks why
//! answers start late, the total (`deskbell_time_to_first_token_seconds`) does
//! not say whether retrieval, the database or the model was waited for; one
//! debug line per question does, under the target `deskbell::first_token`
//! (`DESKBELL_LOG=deskbell::first_token=debug`). Each phase is microseconds
//! since the request reached the handler.

use std::time::Duration;

use tokio::time::Instant;

#[derive(Default)]
pub(super) struct Phases {
    /// The turn's task running, past the guards.
    turn: Option<Duration>,
    /// The passages found.
    retrieved: Option<Duration>,
    /// Knowledge, budget, tool version and history read (at once).
    reads: Option<Duration>,
    /// The turn's start committed.
    saved: Option<Duration>,
    /// The model's response head received.
    head: Option<Duration>,
}

impl Phases {
    pub(super) fn turn(&mut self, began: Instant) {
        self.turn = Some(began.elapsed());
    }

    pub(super) fn retrieved(&mut self, after: Duration) {
        self.retrieved = Some(after);
    }

    pub(super) fn reads(&mut self, began: Instant) {
        self.reads = Some(began.elapsed());
    }

    pub(super) fn saved_and_head(&mut self, saved: Duration, head: Duration) {
        self.saved = Some(saved);
        self.head = Some(head);
    }

    /// Logs the phases with the first token's own time, once it has arrived from
    /// the model and before it is sent to the visitor.
    pub(super) fn first_token(&self, began: Instant) {
        let us = |d: Option<Duration>| d.map_or(0, |d| d.as_micros() as u64);
        tracing::debug!(
            target: "deskbell::first_token",
            turn_us = us(self.turn),
            retrieved_us = us(self.retrieved),
            reads_us = us(self.reads),
            saved_us = us(self.saved),
            model_head_us = us(self.head),
            first_token_us = us(Some(began.elapsed())),
            "first token"
        );
    }
}
