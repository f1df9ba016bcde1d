//! The turn engine (SPEC §6): model rounds, tool calls, the card that stops a turn,
//! and the continuation after the visitor answers it.

use futures_util::StreamExt;

use super::prompt::{self, Part};
use super::{Ready, Sink};
use crate::app::App;
use crate::confirm::Verified;
use crate::error::ApiError;
use crate::guard::{Admission, Caller};
use crate::ids::new_id;
use crate::llm::{ChatMessage, ChatRequest, ModelEvent, ModelStream, ProviderError};
use crate::store::{AuditRow, CallStatus, Decided, MessageRow, TurnEnd, TurnStart};
use crate::tools::http::Invocation;
use crate::wire::{Citation, Decision, StreamEvent, TurnStatus, Usage};

/// At most this many model responses per turn; the last is offered no tools, so it
/// must answer in words.
pub const MAX_ROUNDS: usize = 8;

/// Why a turn stopped early.
pub(super) enum Stop {
    Provider(ProviderError),
    Internal(anyhow::Error),
}

impl From<anyhow::Error> for Stop {
    fn from(e: anyhow::Error) -> Self {
        Stop::Internal(e)
    }
}

/// One assistant message (a bubble) as it is being written.
pub(super) struct Bubble {
    pub id: String,
    pub text: String,
}

pub struct Turn {
    pub(super) app: App,
    pub(super) caller: Caller,
    /// The budget share and stream slot this turn holds until it ends.
    admission: Option<Admission>,
    pub(super) sink: Sink,
    ready: Option<Ready>,
    pub(super) conversation: String,
    pub(super) turn: String,
    usage: Usage,
    /// Set once this turn has shown its one card (or is the continuation of one).
    pub(super) card_raised: bool,
    /// A tool the visitor declined: it is not offered again in this turn.
    withheld: Option<String>,
    /// Numbered sources the answer may cite.
    sources: Vec<Citation>,
    /// The length of the question's sources at the end of the system message.
    knowledge_len: usize,
}

impl Turn {
    pub fn new(app: App, caller: Caller, admission: Admission, sink: Sink, ready: Ready) -> Self {
        Self {
            app,
            caller,
            admission: Some(admission),
            sink,
            ready: Some(ready),
            conversation: String::new(),
            turn: new_id("t"),
            usage: Usage::ZERO,
            card_raised: false,
            withheld: None,
            sources: Vec::new(),
            knowledge_len: 0,
        }
    }

    /// A new question: save it, reach the model, stream the answer.
    pub async fn question(mut self, conversation: Option<String>, message: String) {
        if let Err(e) = self.run_question(conversation, message).await {
            self.abort(e).await;
        }
        self.settle().await;
    }

    /// The answer to a card whose checks passed.
    pub async fn answer(mut self, verified: Verified, decision: Decision) {
        if let Err(e) = self.run_answer(verified, decision).await {
            self.abort(e).await;
        }
        self.settle().await;
    }

    /// The budget share is now reserved in the database and must be settled.
    fn reserved(&mut self) {
        if let Some(a) = self.admission.as_mut() {
            a.mark_reserved();
        }
    }

    fn budget_spent(&self) -> ApiError {
        ApiError::DailyBudgetExhausted(crate::guard::admission_seconds_to_midnight(
            self.app.clock.now_ms(),
        ))
    }

    /// Records the tokens spent against the budget and frees the stream slot.
    async fn settle(&mut self) {
        if let Some(admission) = self.admission.take() {
            admission.settle(self.usage).await;
        }
    }

    async fn run_question(
        &mut self,
        conversation: Option<String>,
        message: String,
    ) -> anyhow::Result<()> {
        let store = self.app.store.clone();
        let now = self.app.clock.now_ms();
        let site = self.caller.site.clone();
        let is_new = conversation.is_none();
        self.conversation = conversation.unwrap_or_else(|| new_id("c"));
        tracing::info!(conversation = %self.conversation, turn = %self.turn, "question");
        let history = match is_new {
            true => Vec::new(),
            false => prompt::history(&store, &self.conversation).await?,
        };
        let passages = self.retrieve(&message).await;
        let knowledge = prompt::sources(passages.as_deref());
        self.knowledge_len = knowledge.len();
        let mut messages = vec![prompt::system(&site.config, Part::Question, &knowledge)];
        messages.extend(history);
        messages.push(ChatMessage::User {
            content: message.clone(),
        });
        let visitor_message = self.message_row(new_id("m"), "visitor", &message, "sent");
        let bubble = Bubble {
            id: new_id("m"),
            text: String::new(),
        };
        let bubble_row =
            self.message_row(bubble.id.clone(), "assistant", "", crate::store::STREAMING);
        let start = TurnStart {
            conversation: self.conversation.clone(),
            is_new,
            site: site.config.id.clone(),
            visitor: self.caller.visitor.clone(),
            now,
            visitor_message,
            bubble: bubble_row,
            budget: self.admission.as_ref().map(|a| a.share().clone()),
        };
        // The model is asked while the turn's first writes commit: neither waits
        // for the other, and the model's answer does not depend on them.
        let request = self.request(&messages, 0);
        let (saved, first) =
            tokio::join!(store.begin_turn(start), self.app.provider.stream(request));
        if !saved? {
            // Turns running at once spent the budget since the guard looked.
            self.start(Err(self.budget_spent()));
            return Ok(());
        }
        self.reserved();
        let first = match first {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "the model could not be reached");
                store
                    .finish_turn(TurnEnd {
                        message: bubble.id.clone(),
                        text: String::new(),
                        status: TurnStatus::Failed.as_str().into(),
                        citations: None,
                        usage: Usage::ZERO,
                        budget: None,
                    })
                    .await?;
                self.start(Err(ApiError::ProviderUnavailable));
                return Ok(());
            }
        };
        self.start(Ok(()));
        self.announce(&bubble.id).await;
        let mut bubble = bubble;
        let status = self.rounds(messages, &mut bubble, Some(Ok(first))).await;
        self.close(bubble, status).await
    }

    async fn run_answer(&mut self, verified: Verified, decision: Decision) -> anyhow::Result<()> {
        let Verified { call, tool } = verified;
        let now = self.app.clock.now_ms();
        let (to, reason) = match decision {
            Decision::Confirm => (CallStatus::Confirmed, None),
            Decision::Cancel => (CallStatus::Cancelled, Some("visitor")),
        };
        self.conversation = call.conversation.clone();
        self.turn = call.turn.clone();
        self.card_raised = true;
        let mut bubble = Bubble {
            id: new_id("m"),
            text: String::new(),
        };
        let bubble_row =
            self.message_row(bubble.id.clone(), "assistant", "", crate::store::STREAMING);
        // The one atomic pending → decided transition (which also opens the
        // continuation's bubble): of two racing answers, only one gets past this line.
        let budget = self.admission.as_ref().map(|a| a.share().clone());
        match self
            .app
            .store
            .decide(&call, to, reason, now, &bubble_row, budget.as_ref())
            .await?
        {
            Decided::Won => self.reserved(),
            Decided::Lost => {
                crate::confirm::refuse(&self.app, &call, "replayed").await?;
                self.start(Err(ApiError::CallNotPending));
                return Ok(());
            }
            Decided::BudgetSpent => {
                self.start(Err(self.budget_spent()));
                return Ok(());
            }
        }
        self.start(Ok(()));
        self.sink
            .send(StreamEvent::Decision {
                call: call.id.clone(),
                status: to.as_str(),
            })
            .await;
        self.announce(&bubble.id).await;
        // The continuation runs no retrieval: its only sources are tool results.
        let mut messages = vec![prompt::system(
            &self.caller.site.config,
            Part::Continuation,
            "",
        )];
        let context: Vec<ChatMessage> =
            serde_json::from_str(call.context.as_deref().unwrap_or("[]"))?;
        messages.extend(context);
        let first = match decision {
            Decision::Confirm => {
                let arguments: serde_json::Value = serde_json::from_str(&call.arguments)?;
                Some(
                    self.run_confirmed(&call, &tool, &arguments, &bubble.id, &mut messages)
                        .await?,
                )
            }
            Decision::Cancel => {
                self.withheld = Some(call.tool.clone());
                messages.push(ChatMessage::Tool {
                    tool_call_id: call.model_call_id.clone(),
                    content: "The visitor did not approve this call, so it did not run. Do not try this call or \
                              tool again in this turn; answer without it."
                        .to_string(),
                });
                None
            }
        };
        let status = self.rounds(messages, &mut bubble, first).await;
        self.close(bubble, status).await
    }

    /// Runs a confirmed call with exactly its stored arguments, hands the result to
    /// the model, and records the run while the model is asked: the first token
    /// waits for whichever of the two takes longer, not for both in turn.
    async fn run_confirmed(
        &mut self,
        call: &crate::store::CallRow,
        tool: &crate::tools::Tool,
        arguments: &serde_json::Value,
        message: &str,
        messages: &mut Vec<ChatMessage>,
    ) -> anyhow::Result<Result<ModelStream, ProviderError>> {
        let (outcome, status) = self.run_tool(&call.id, tool, arguments).await;
        self.sources.push(Citation {
            n: 1,
            title: tool.label.clone(),
            url: None,
            snippet: snippet(&outcome.result),
        });
        messages.push(ChatMessage::Tool {
            tool_call_id: call.model_call_id.clone(),
            content: format!("[1] {}", outcome.result),
        });
        let audit = audit_outcome(call, &outcome, self.app.clock.now_ms());
        let record = self
            .app
            .store
            .set_run(&call.id, message, status, Some(&audit));
        let request = self.request(messages, 0);
        let (recorded, first) = tokio::join!(record, self.app.provider.stream(request));
        recorded?;
        self.sink
            .send(step_event(&call.id, tool, status.as_str()))
            .await;
        Ok(first)
    }

    /// The site's passages for a question, numbered as the answer's possible
    /// citations; `None` when the site has no knowledge. A failed search is logged
    /// and the turn goes on without sources.
    async fn retrieve(&mut self, question: &str) -> Option<Vec<crate::knowledge::Passage>> {
        let site = &self.caller.site.config.id;
        if !self.app.knowledge.has(site) {
            return None;
        }
        let passages = match self.app.knowledge.search(site, question).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "knowledge search failed");
                Vec::new()
            }
        };
        self.sources = passages
            .iter()
            .enumerate()
            .map(|(i, p)| Citation {
                n: i as u32 + 1,
                title: p.title.clone(),
                url: p.url.clone(),
                snippet: snippet(&p.text),
            })
            .collect();
        Some(passages)
    }

    /// Model rounds until the model answers without tool calls, a card stops the
    /// turn, or something fails.
    async fn rounds(
        &mut self,
        mut messages: Vec<ChatMessage>,
        bubble: &mut Bubble,
        mut first: Option<Result<ModelStream, ProviderError>>,
    ) -> TurnStatus {
        let cap = self.admission.as_ref().map_or(u64::MAX, Admission::cap);
        for round in 0..MAX_ROUNDS {
            if round > 0 && self.usage.input_tokens + self.usage.output_tokens >= cap {
                tracing::info!(cap, "the turn reached its token cap");
                return TurnStatus::Answered;
            }
            let stream = match first.take() {
                Some(stream) => stream,
                None => {
                    self.app
                        .provider
                        .stream(self.request(&messages, round))
                        .await
                }
            };
            let outcome = match stream {
                Ok(stream) => self.consume(stream, bubble).await,
                Err(e) => Err(Stop::Provider(e)),
            };
            let (text, calls) = match outcome {
                Ok(result) => result,
                Err(stop) => return self.stopped(stop).await,
            };
            if calls.is_empty() || round + 1 == MAX_ROUNDS {
                return TurnStatus::Answered;
            }
            messages.push(ChatMessage::Assistant {
                content: text,
                tool_calls: calls.clone(),
            });
            match self.handle_calls(&mut messages, bubble, calls).await {
                Ok(true) => return TurnStatus::AwaitingConfirmation,
                Ok(false) => {}
                Err(e) => return self.stopped(Stop::Internal(e)).await,
            }
        }
        TurnStatus::Answered
    }

    /// Streams one model response into the bubble; returns its text and tool calls.
    async fn consume(
        &mut self,
        mut stream: ModelStream,
        bubble: &mut Bubble,
    ) -> Result<(String, Vec<crate::llm::ToolCall>), Stop> {
        let mut text = String::new();
        let mut calls = Vec::new();
        while let Some(event) = stream.next().await {
            match event.map_err(Stop::Provider)? {
                ModelEvent::Text(delta) => {
                    text.push_str(&delta);
                    bubble.text.push_str(&delta);
                    self.sink.send(StreamEvent::Delta { text: delta }).await;
                }
                ModelEvent::ToolCalls(c) => calls = c,
                ModelEvent::Usage(u) => self.usage.add(u),
            }
        }
        Ok((text, calls))
    }

    fn request(&self, messages: &[ChatMessage], round: usize) -> ChatRequest {
        let tools = if round + 1 < MAX_ROUNDS {
            self.caller.site.tools.offered(self.withheld.as_deref())
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

    /// Runs a call on its tool's endpoint, announced with a `running` step; the caller
    /// records the outcome, then sends the final step.
    pub(super) async fn run_tool(
        &self,
        call: &str,
        tool: &crate::tools::Tool,
        arguments: &serde_json::Value,
    ) -> (crate::tools::http::Outcome, CallStatus) {
        self.sink.send(step_event(call, tool, "running")).await;
        let outcome = self
            .app
            .executor
            .run(tool, &self.invocation(call, arguments))
            .await;
        let status = if outcome.succeeded {
            CallStatus::Succeeded
        } else {
            CallStatus::Failed
        };
        (outcome, status)
    }

    pub(super) fn invocation<'a>(
        &'a self,
        call: &'a str,
        arguments: &'a serde_json::Value,
    ) -> Invocation<'a> {
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

    /// Tells the handler how the start went; only the first word counts.
    fn start(&mut self, result: Result<(), ApiError>) {
        if let Some(ready) = self.ready.take() {
            let _ = ready.send(result);
        }
    }

    pub(super) fn message_row(
        &self,
        id: String,
        role: &str,
        text: &str,
        status: &str,
    ) -> MessageRow {
        MessageRow {
            id,
            conversation: self.conversation.clone(),
            turn: self.turn.clone(),
            role: role.into(),
            text: text.into(),
            status: status.into(),
            citations: None,
            created_at: self.app.clock.now_ms(),
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

    async fn stopped(&self, stop: Stop) -> TurnStatus {
        let (code, message) = match stop {
            Stop::Provider(e) => {
                tracing::warn!(error = %e, "the model stream failed");
                (
                    "provider_error",
                    "The assistant's model stopped answering. Please try again.",
                )
            }
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
    /// share (one transaction), then ends the stream.
    async fn close(&mut self, bubble: Bubble, status: TurnStatus) -> anyhow::Result<()> {
        let cited = cited_sources(&bubble.text, &self.sources);
        let citations = if cited.is_empty() {
            None
        } else {
            Some(serde_json::to_string(&cited)?)
        };
        if !cited.is_empty() {
            self.sink
                .send(StreamEvent::Citations { items: cited })
                .await;
        }
        let admission = self.admission.take();
        let end = TurnEnd {
            message: bubble.id.clone(),
            text: bubble.text,
            status: status.as_str().into(),
            citations,
            usage: self.usage,
            budget: admission
                .as_ref()
                .and_then(Admission::reserved_share)
                .cloned(),
        };
        let saved = self.app.store.finish_turn(end).await;
        if saved.is_err() {
            // The settlement did not happen with the message: keep it for `settle`.
            self.admission = admission;
        }
        saved?;
        self.sink
            .send(StreamEvent::Done {
                status,
                usage: self.usage,
            })
            .await;
        Ok(())
    }

    /// An internal failure: before the stream started it is a 500; after, an error
    /// event and a failed `done`.
    async fn abort(&mut self, e: anyhow::Error) {
        if self.ready.is_some() {
            self.start(Err(ApiError::Internal(e)));
            return;
        }
        let status = self.stopped(Stop::Internal(e)).await;
        self.sink
            .send(StreamEvent::Done {
                status,
                usage: self.usage,
            })
            .await;
    }
}

pub(super) fn step_event(
    call: &str,
    tool: &crate::tools::Tool,
    status: &'static str,
) -> StreamEvent {
    StreamEvent::Step {
        call: call.to_string(),
        tool: tool.name.clone(),
        label: tool.label.clone(),
        status,
    }
}

pub(super) fn audit_outcome(
    call: &crate::store::CallRow,
    outcome: &crate::tools::http::Outcome,
    now: i64,
) -> AuditRow {
    let (event, reason) = if outcome.succeeded {
        ("executed", None)
    } else {
        ("failed", outcome.failure)
    };
    let mut row = AuditRow::for_call(call, event, reason, now);
    row.http_status = outcome.http_status.map(i64::from);
    row.duration_ms = Some(outcome.duration_ms);
    row
}

fn snippet(text: &str) -> String {
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
