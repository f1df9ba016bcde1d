//! The turn engine (SPEC §6): one visitor message and everything the assistant
//! does for it. This file holds the turn's state; `question.rs` a question's
//! start (its first reads, writes and model request, `head.rs` the request);
//! `rounds.rs` the model rounds, `calls.rs` what happens to each tool call, `answer.rs` the
//! continuation after a card is answered (or after a crash), `finish.rs` saving
//! the answer and ending the stream. The confirmation flow itself — raising,
//! verifying, deciding, running, recovering — is `confirm/`, which this calls.
//!
//! A turn's future is held for every open stream, and an async function's future
//! is as large as its largest state. So what a turn awaits only before or after
//! its answer streams (the reads and writes around it, tool calls, failures) is
//! boxed (`Box::pin`): a question's future is then about the size of its
//! streaming state, some 6 KB rather than 35 KB.

mod answer;
mod approved;
mod calls;
mod finish;
mod handoff;
mod head;
mod phases;
mod question;
mod rounds;
mod written;

use std::sync::Arc;

use super::{Ready, Sink};
use crate::app::App;
use crate::confirm::Verified;
use crate::error::ApiError;
use crate::guard::{Admission, Caller};
use crate::ids::{ConversationId, new_id};
use crate::llm::{ChatMessage, ChatRequest, ModelStream, ProviderError};
use crate::states::{MessageStatus, Role};
use crate::store::{BudgetShare, Fence, MessageRow, Reservation};
use crate::tools::Toolbox;
use crate::tools::http::Invocation;
use crate::wire::{Citation, Decision, StreamEvent, Usage};

/// At most this many model responses per turn; the last is offered no tools, so it
/// must answer in words.
pub const MAX_ROUNDS: usize = 8;

/// Why a turn stopped early.
enum Stop {
    Provider(ProviderError),
    /// Another process took the turn's work over (its lease lapsed): nothing
    /// more of it is written or told but that (`store::ownership`).
    TakenOver,
    Internal(anyhow::Error),
    /// A person took the conversation while the assistant answered (SPEC §19):
    /// it stops at once, keeping what it had said.
    HandedOff(crate::store::desk::Holder),
}

impl From<anyhow::Error> for Stop {
    fn from(e: anyhow::Error) -> Self {
        match crate::store::StoreError::taken_over(&e) {
            true => Stop::TakenOver,
            false => Stop::Internal(e),
        }
    }
}

/// One assistant message (a bubble) as it is being written.
pub(in crate::ask) struct Bubble {
    pub id: String,
    pub text: String,
}

pub(in crate::ask) use approved::Teammate;

pub struct Turn {
    app: App,
    caller: Caller,
    /// The budget share and stream slot this turn holds until it ends.
    admission: Option<Admission>,
    sink: Sink,
    ready: Option<Ready>,
    conversation: String,
    turn: String,
    usage: Usage,
    /// Set once this turn has shown its one card (or is the continuation of one).
    card_raised: bool,
    /// A tool the visitor declined: it is not offered again in this turn.
    withheld: Option<String>,
    /// Numbered sources the answer may cite.
    sources: Vec<Citation>,
    /// The length of the question's sources at the end of the system message.
    knowledge_len: usize,
    /// Tokens estimated for model rounds whose provider reported no usage.
    unreported: u64,
    /// What the database holds of the answer, and so what the turn still owes
    /// it (`written.rs`): a turn that ends without its final write marks the
    /// open answer failed when it settles.
    written: written::Written,
    /// The site's tools as of this round: the file's with the console's changes.
    tools: Arc<Toolbox>,
    /// The lease this turn's work is stamped with; its writes hold only while
    /// the rows still carry it.
    fence: Fence,
    /// Every model wait ends by this instant (`[llm] turn_timeout_s`).
    deadline: tokio::time::Instant,
    /// When the bubble's text was last saved while streaming.
    checkpointed: tokio::time::Instant,
    /// When the turn began, for its time to first token and duration (SPEC §18):
    /// for a visitor's ask, when the request reached the handler.
    began: tokio::time::Instant,
    /// A question's way to its first token, logged at debug level.
    phases: phases::Phases,
    /// Whether any text has streamed yet (or, for a turn whose first token is
    /// not a question's — a continuation after a card or a crash — whether it
    /// is no longer to be timed).
    streamed: bool,
    /// Counts this turn in the open-streams gauge from its ask until it ends
    /// (a visitor who left meanwhile is counted until then).
    _open: Option<crate::ops::metrics::OpenStream>,
    /// Wake-ups for changes of holder (`store::desk`): a person taking the
    /// conversation stops the assistant at once (SPEC §19).
    desk: tokio::sync::broadcast::Receiver<String>,
    /// Whether the holder was read after `desk` began listening; until then
    /// the turn reads it before it asks the model.
    holder_known: bool,
}

impl Turn {
    pub fn new(app: App, caller: Caller, admission: Admission, sink: Sink, ready: Ready) -> Self {
        let mut turn = Self::headless(app, caller, sink);
        turn.admission = Some(admission);
        turn.ready = Some(ready);
        turn._open = Some(crate::ops::metrics::OpenStream::open());
        turn
    }

    /// A question whose conversation the handler found with the assistant
    /// after `desk` began listening: any later change of holder wakes it.
    pub fn watching(mut self, desk: tokio::sync::broadcast::Receiver<String>) -> Self {
        self.desk = desk;
        self.holder_known = true;
        self
    }

    /// Times the turn from `received`, when its request reached the handler, so
    /// that its time to first token includes the guards.
    pub fn received_at(mut self, received: tokio::time::Instant) -> Self {
        self.began = received;
        self
    }

    /// A turn with no request behind it (one finished after a crash).
    pub(in crate::ask) fn headless(app: App, caller: Caller, mut sink: Sink) -> Self {
        let now = tokio::time::Instant::now();
        let deadline = now + std::time::Duration::from_secs_f64(app.config.llm.turn_timeout_s);
        sink.until(deadline);
        let tools = caller.site.tools.last_read();
        let fence = app.store.leases().fence();
        let app_desk = app.store.desk().subscribe();
        Self {
            app,
            caller,
            admission: None,
            sink,
            ready: None,
            conversation: String::new(),
            turn: new_id("t"),
            usage: Usage::ZERO,
            card_raised: false,
            withheld: None,
            sources: Vec::new(),
            knowledge_len: 0,
            unreported: 0,
            written: written::Written::new(),
            deadline,
            checkpointed: now,
            tools,
            fence,
            began: now,
            phases: phases::Phases::default(),
            streamed: true,
            _open: None,
            desk: app_desk,
            holder_known: false,
        }
    }

    /// A new question: save it, reach the model, stream the answer.
    pub async fn question(mut self, conversation: Option<ConversationId>, message: String) {
        // Only a question's first token is timed (SPEC §18): a continuation's
        // would include the tool's run.
        self.streamed = false;
        if let Err(e) = self.run_question(conversation, message).await {
            Box::pin(self.abort(e)).await;
        }
        Box::pin(self.settle()).await;
    }

    /// The answer to a card whose checks passed.
    pub async fn answer(mut self, verified: Verified, decision: Decision) {
        if let Err(e) = Box::pin(self.run_answer(verified, decision)).await {
            Box::pin(self.abort(e)).await;
        }
        Box::pin(self.settle()).await;
    }

    /// The answer's first write landed with the turn's budget share reserved:
    /// from now on its end and its settlement are owed.
    fn opened(&mut self, bubble: &str) {
        let share = self.admission.as_ref().map(|a| a.share().clone());
        if let Some(share) = &share {
            self.app.store.budget().note_reserved(share);
        }
        self.open(bubble, share);
    }

    /// Unwritten → Open (`written.rs`); for a turn finished after a crash,
    /// `share` is the dead turn's reservation.
    fn open(&mut self, bubble: &str, share: Option<BudgetShare>) {
        self.written = match self.written.take() {
            written::Written::Unwritten(unwritten) => {
                written::Written::Open(unwritten.open(bubble.to_string(), share))
            }
            // A turn opens one answer: a second open keeps what the first owes.
            other => {
                tracing::error!("a turn's answer was opened twice");
                other
            }
        };
    }

    fn budget_refused(&self, reservation: Reservation) -> ApiError {
        crate::budget::budget_refusal(reservation, self.app.clock.now_ms())
    }

    /// Frees the stream slot and, if the answer's final write never happened (a
    /// database fault, say), marks the answer failed and settles its reservation
    /// to what was spent — both guarded, so a reservation is settled exactly once
    /// whichever way the turn ended.
    async fn settle(&mut self) {
        // The stream slot is freed when the admission drops, at the end.
        let _admission = self.admission.take();
        // Unwritten owes nothing, Ended is settled, and the process that took
        // the answer over settles it.
        let open = match self.written.take() {
            written::Written::Open(open) => open,
            other => {
                self.written = other;
                return;
            }
        };
        let spent = crate::budget::spent(self.usage, self.unreported);
        let store = &self.app.store;
        let failed = store
            .leases()
            .until_written(&self.fence, "an unfinished answer", || {
                store.leases().fail_open_answer(
                    &open.bubble,
                    open.share.as_ref(),
                    spent,
                    &self.fence,
                )
            })
            .await;
        self.written = match failed {
            Err(crate::store::StoreError::TakenOver) => {
                written::Written::TakenOver(open.taken_over())
            }
            // Failed to write, the answer's row is still the lease's: the
            // process that claims it fails and settles it.
            _ => written::Written::Ended(open.ended()),
        };
        if let Err(e) = failed {
            tracing::error!(
                error = format!("{e:#}"),
                "an unfinished answer could not be marked failed"
            );
        }
    }

    fn request(&self, messages: &[ChatMessage], round: usize) -> ChatRequest {
        let tools = if round + 1 < MAX_ROUNDS {
            let mut tools = self.tools.offered(self.withheld.as_deref());
            if self.caller.site.config.handoff.enabled {
                tools.push(crate::desk::handoff_tool());
            }
            tools
        } else {
            Vec::new()
        };
        let stable_system = match messages.first() {
            Some(ChatMessage::System { content }) => {
                content.len().saturating_sub(self.knowledge_len)
            }
            _ => 0,
        };
        ChatRequest {
            messages: messages.to_vec(),
            tools,
            max_tokens: self.app.config.llm.max_output_tokens,
            stable_system,
        }
    }

    /// Asks the model, waiting no later than the turn's deadline.
    async fn model(&self, request: ChatRequest) -> Result<ModelStream, ProviderError> {
        tokio::time::timeout_at(self.deadline, self.app.provider.stream(request))
            .await
            .unwrap_or(Err(ProviderError::TurnTimeout))
    }

    fn invocation<'a>(&'a self, call: &'a str, arguments: &'a serde_json::Value) -> Invocation<'a> {
        Invocation {
            call,
            arguments,
            site: &self.caller.site.config.id,
            conversation: &self.conversation,
            visitor: &self.caller.visitor,
            user_id: self.caller.user_id.as_deref(),
            unix_seconds: self.app.clock.now_ms() / 1000,
        }
    }

    /// Reads the site's tools again, for the next model round or the calls of
    /// the last one.
    async fn refresh_tools(&mut self) {
        self.tools = self.caller.site.tools.current(&self.app.store).await;
    }

    /// Tells the handler how the start went; only the first word counts.
    fn start(&mut self, result: Result<(), ApiError>) {
        if let Some(ready) = self.ready.take() {
            let _ = ready.send(result);
        }
    }

    /// An assistant bubble's row while it streams: owned by this process (so a
    /// crash is recovered) and carrying its turn's reservation (so it is released).
    fn bubble_row(&self, id: &str) -> MessageRow {
        let mut row = self.message_row(
            id.to_string(),
            Role::Assistant,
            "",
            MessageStatus::Streaming,
        );
        row.owner = Some(self.fence.to_string());
        if let Some(share) = self.admission.as_ref().map(Admission::share) {
            row.budget_day = Some(share.day.clone());
            row.reserved = share.reserved;
        }
        row
    }

    fn message_row(&self, id: String, role: Role, text: &str, status: MessageStatus) -> MessageRow {
        MessageRow {
            id,
            conversation: self.conversation.clone(),
            turn: self.turn.clone(),
            role,
            text: text.into(),
            status,
            citations: None,
            created_at: self.app.clock.now_ms(),
            owner: None,
            budget_day: None,
            reserved: 0,
            author: None,
        }
    }

    /// The `turn` event that opens a bubble in the widget.
    async fn announce(&self, message: &str) {
        self.sink
            .send(StreamEvent::Turn {
                conversation: self.conversation.clone(),
                turn: self.turn.clone(),
                message: message.to_string(),
            })
            .await;
    }
}
