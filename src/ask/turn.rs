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
use crate::store::stored::{self, decode_transcript};
use crate::store::{
    AuditRow, BudgetShare, CallStatus, Decided, MessageRow, Reservation, TurnEnd, TurnStart,
};
use crate::tools::arguments::Arguments;
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
    /// Tokens estimated for model rounds whose provider reported no usage.
    unreported: u64,
    /// For a turn finished after a crash: the dead turn's reservation to settle.
    pub(super) recovered_share: Option<BudgetShare>,
    /// The answer's bubble once its row is written and until its final write: a
    /// turn that ends without that write marks it failed when it settles.
    open_bubble: Option<String>,
    /// Every model wait ends by this instant (`[llm] turn_timeout_s`).
    deadline: tokio::time::Instant,
    /// When the bubble's text was last saved while streaming.
    checkpointed: tokio::time::Instant,
}

impl Turn {
    pub fn new(app: App, caller: Caller, admission: Admission, sink: Sink, ready: Ready) -> Self {
        let mut turn = Self::headless(app, caller, sink);
        turn.admission = Some(admission);
        turn.ready = Some(ready);
        turn
    }

    /// A turn with no request behind it (one finished after a crash).
    pub(super) fn headless(app: App, caller: Caller, mut sink: Sink) -> Self {
        let now = tokio::time::Instant::now();
        let deadline = now + std::time::Duration::from_secs_f64(app.config.llm.turn_timeout_s);
        sink.until(deadline);
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
            recovered_share: None,
            open_bubble: None,
            deadline,
            checkpointed: now,
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

    fn budget_refused(&self, reservation: Reservation) -> ApiError {
        crate::guard::budget_refusal(reservation, self.app.clock.now_ms())
    }

    /// Frees the stream slot and, if the answer's final write never happened (a
    /// database fault, say), marks the answer failed and settles its reservation
    /// to what was spent — both guarded, so a reservation is settled exactly once
    /// whichever way the turn ended.
    async fn settle(&mut self) {
        let admission = self.admission.take();
        let Some(bubble) = self.open_bubble.take() else {
            return;
        };
        let share = admission
            .as_ref()
            .and_then(Admission::reserved_share)
            .or(self.recovered_share.as_ref());
        let spent = (self.usage.input_tokens + self.usage.output_tokens + self.unreported) as i64;
        if let Err(e) = self.app.store.fail_streaming(&bubble, share, spent).await {
            tracing::error!(
                error = format!("{e:#}"),
                "an unfinished answer could not be marked failed"
            );
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
        let bubble_row = self.bubble_row(&bubble.id);
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
        let (saved, first) = tokio::join!(store.begin_turn(start), self.model(request));
        match saved? {
            Reservation::Reserved => {}
            refusal => {
                // Turns running at once took the budget since the guard looked.
                self.start(Err(self.budget_refused(refusal)));
                return Ok(());
            }
        }
        self.reserved();
        self.open_bubble = Some(bubble.id.clone());
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
                        unreported: 0,
                        budget: self
                            .admission
                            .as_ref()
                            .and_then(Admission::reserved_share)
                            .cloned(),
                        owner: store.owner().to_string(),
                    })
                    .await?;
                self.open_bubble = None;
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
        // Everything the run needs is read before the decision is committed: a stored
        // transcript or arguments that no longer parse leave the card undecided
        // rather than a call decided that can never run.
        let context = decode_transcript(call.context.as_deref().unwrap_or("[]"))?;
        let arguments = Arguments::from_canonical(call.arguments.clone())?;
        let now = self.app.clock.now_ms();
        let (to, reason) = match decision {
            Decision::Confirm => (CallStatus::Confirmed, None),
            Decision::Cancel => (CallStatus::Cancelled, Some("visitor")),
        };
        self.conversation = call.conversation.clone();
        self.turn = call.turn.clone();
        self.card_raised = true;
        let bubble = Bubble {
            id: new_id("m"),
            text: String::new(),
        };
        let bubble_row = self.bubble_row(&bubble.id);
        // The one atomic pending → decided transition (which also opens the
        // continuation's bubble and marks a confirmed call running): of two racing
        // answers, only one gets past this line.
        let budget = self.admission.as_ref().map(|a| a.share().clone());
        match self
            .app
            .store
            .decide(&call, to, reason, now, &bubble_row, budget.as_ref())
            .await?
        {
            Decided::Won => {
                self.reserved();
                self.open_bubble = Some(bubble.id.clone());
                crate::crashpoint::reached("after_decide");
            }
            Decided::Lost => {
                crate::confirm::refuse(&self.app, &call, "replayed").await?;
                self.start(Err(ApiError::CallNotPending));
                return Ok(());
            }
            Decided::Late => {
                self.app
                    .store
                    .expire_due(now, Some(&call.conversation))
                    .await?;
                crate::confirm::refuse(&self.app, &call, "late").await?;
                self.start(Err(ApiError::ConfirmationExpired));
                return Ok(());
            }
            Decided::Budget(refusal) => {
                self.start(Err(self.budget_refused(refusal)));
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
        match decision {
            Decision::Confirm => {
                self.continue_confirmed(&call, &tool, &arguments, context, bubble)
                    .await
            }
            Decision::Cancel => {
                self.withheld = Some(call.tool.clone());
                let mut messages = self.continuation(context);
                messages.push(ChatMessage::Tool {
                    tool_call_id: call.model_call_id.clone(),
                    content: "The visitor did not approve this call, so it did not run. Do not try this call or \
                              tool again in this turn; answer without it."
                        .to_string(),
                });
                let mut bubble = bubble;
                let status = self.rounds(messages, &mut bubble, None).await;
                self.close(bubble, status).await
            }
        }
    }

    /// The model's messages for a continuation: the rebuilt system message (with no
    /// retrieval: its only sources are tool results) and the stored transcript.
    pub(super) fn continuation(&self, context: Vec<ChatMessage>) -> Vec<ChatMessage> {
        let mut messages = vec![prompt::system(
            &self.caller.site.config,
            Part::Continuation,
            "",
        )];
        messages.extend(context);
        messages
    }

    /// Runs a confirmed call with exactly its stored arguments and continues the
    /// turn into `bubble` with its result. Used for a visitor's answer and for a
    /// call delivered again after a crash alike.
    pub(super) async fn continue_confirmed(
        &mut self,
        call: &crate::store::CallRow,
        tool: &crate::tools::Tool,
        arguments: &Arguments,
        context: Vec<ChatMessage>,
        mut bubble: Bubble,
    ) -> anyhow::Result<()> {
        let mut messages = self.continuation(context);
        let first = self
            .run_confirmed(call, tool, &arguments.value, &mut messages)
            .await?;
        let status = self.rounds(messages, &mut bubble, Some(first)).await;
        self.close(bubble, status).await
    }

    /// Sets a headless turn up to finish the turn of `call` after a crash.
    pub(super) fn resume(
        &mut self,
        call: &crate::store::CallRow,
        answer: Option<&crate::store::StreamingAnswer>,
    ) {
        self.conversation = call.conversation.clone();
        self.turn = answer.map_or_else(|| call.turn.clone(), |a| a.turn.clone());
        // A continuation after a card raises no second one.
        self.card_raised = call.kind != "auto";
    }

    /// Finishes a turn whose process died while `call` ran: the transcript, what
    /// the interrupted round's calls gave, then model rounds into the answer's
    /// bubble, saved as for a visitor who disconnected.
    pub(super) async fn continue_recovered(
        &mut self,
        context: Vec<ChatMessage>,
        results: Vec<ChatMessage>,
        call: &crate::store::CallRow,
        outcome: &str,
        mut bubble: Bubble,
    ) -> anyhow::Result<()> {
        let messages = match call.kind.as_str() {
            "auto" => {
                let mut m = vec![prompt::system(&self.caller.site.config, Part::Question, "")];
                m.extend(context);
                m.extend(results);
                m
            }
            _ => {
                self.sources.push(Citation {
                    n: 1,
                    title: call.label.clone(),
                    url: None,
                    snippet: snippet(outcome),
                });
                let mut m = self.continuation(context);
                m.push(ChatMessage::Tool {
                    tool_call_id: call.model_call_id.clone(),
                    content: format!("[1] {outcome}"),
                });
                m
            }
        };
        self.open_bubble = Some(bubble.id.clone());
        let status = self.rounds(messages, &mut bubble, None).await;
        self.close(bubble, status).await
    }

    /// Runs a confirmed call, hands the result to the model, and records the run
    /// while the model is asked: the first token waits for whichever of the two
    /// takes longer, not for both in turn.
    async fn run_confirmed(
        &mut self,
        call: &crate::store::CallRow,
        tool: &crate::tools::Tool,
        arguments: &serde_json::Value,
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
            .record_outcome(call, status, Some(&outcome.result), &audit);
        let request = self.request(messages, 0);
        let (recorded, first) = tokio::join!(record, self.model(request));
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
        let cap = match (&self.admission, &self.recovered_share) {
            (Some(admission), _) => admission.cap(),
            (None, Some(share)) => share.reserved as u64,
            (None, None) => u64::MAX,
        };
        for round in 0..MAX_ROUNDS {
            if round > 0 && self.usage.input_tokens + self.usage.output_tokens >= cap {
                tracing::info!(cap, "the turn reached its token cap");
                return TurnStatus::Answered;
            }
            let request = self.request(&messages, round);
            let prompt_chars = request_chars(&request);
            let stream = match first.take() {
                Some(stream) => stream,
                None => self.model(request).await,
            };
            let outcome = match stream {
                Ok(stream) => self.consume(stream, bubble, prompt_chars).await,
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
            // What a crash while auto calls run leaves behind: the text so far, and
            // the transcript to resume from once the calls' outcomes are known. (A
            // card's call stores its own transcript.)
            let runs_auto = calls.iter().any(|c| {
                self.caller
                    .site
                    .tools
                    .get(&c.name)
                    .is_some_and(|t| t.policy == crate::config::Policy::Auto)
            });
            if runs_auto
                && let Err(e) = self
                    .app
                    .store
                    .checkpoint(
                        &bubble.id,
                        &bubble.text,
                        Some(&stored::encode_transcript(&messages)),
                    )
                    .await
            {
                return self.stopped(Stop::Internal(e)).await;
            }
            match self.handle_calls(&mut messages, bubble, calls).await {
                Ok(true) => return TurnStatus::AwaitingConfirmation,
                Ok(false) => {}
                Err(e) => return self.stopped(Stop::Internal(e)).await,
            }
        }
        TurnStatus::Answered
    }

    /// Asks the model, waiting no later than the turn's deadline.
    pub(super) async fn model(&self, request: ChatRequest) -> Result<ModelStream, ProviderError> {
        tokio::time::timeout_at(self.deadline, self.app.provider.stream(request))
            .await
            .unwrap_or(Err(ProviderError::TurnTimeout))
    }

    /// Streams one model response into the bubble; returns its text and tool calls.
    /// A response the provider reports no usage for is charged an estimate.
    async fn consume(
        &mut self,
        mut stream: ModelStream,
        bubble: &mut Bubble,
        prompt_chars: usize,
    ) -> Result<(String, Vec<crate::llm::ToolCall>), Stop> {
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut reported = false;
        let result = loop {
            let event = match tokio::time::timeout_at(self.deadline, stream.next()).await {
                Ok(Some(event)) => event,
                Ok(None) => break Ok(()),
                Err(_) => break Err(Stop::Provider(ProviderError::TurnTimeout)),
            };
            match event {
                Ok(ModelEvent::Text(delta)) => {
                    // PostgreSQL's text columns refuse NUL; it carries no meaning.
                    let delta = without_nul(delta);
                    text.push_str(&delta);
                    bubble.text.push_str(&delta);
                    self.sink.send(StreamEvent::Delta { text: delta }).await;
                    self.checkpoint_text(bubble).await;
                }
                Ok(ModelEvent::ToolCalls(c)) => calls = c,
                Ok(ModelEvent::Usage(u)) => {
                    reported = true;
                    self.usage.add(u);
                }
                Err(e) => break Err(Stop::Provider(e)),
            }
        };
        if !reported {
            let written: usize = text.len()
                + calls
                    .iter()
                    .map(|c| c.arguments.len() + c.name.len())
                    .sum::<usize>();
            self.unreported += estimate_tokens(prompt_chars + written);
        }
        result.map(|()| (text, calls))
    }

    /// Saves a long answer's text every few seconds while it streams, so a crash
    /// loses at most those seconds of it.
    async fn checkpoint_text(&mut self, bubble: &Bubble) {
        let now = tokio::time::Instant::now();
        if now.duration_since(self.checkpointed) < CHECKPOINT_EVERY {
            return;
        }
        self.checkpointed = now;
        if let Err(e) = self
            .app
            .store
            .checkpoint(&bubble.id, &bubble.text, None)
            .await
        {
            tracing::warn!(
                error = format!("{e:#}"),
                "an answer's text could not be saved"
            );
        }
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
        crate::crashpoint::reached("before_delivery");
        // A call is sent only while the turn has time left, and gets no more than
        // that time: every turn ends within `turn_timeout_s`.
        let timed_out = || crate::tools::http::Outcome {
            succeeded: false,
            http_status: None,
            result: "The tool was not run to the end: the turn ran out of time.".into(),
            failure: Some("timeout"),
            duration_ms: 0,
        };
        let mut outcome = if tokio::time::Instant::now() >= self.deadline {
            timed_out()
        } else {
            let invocation = self.invocation(call, arguments);
            let run = self.app.executor.run(tool, &invocation);
            tokio::time::timeout_at(self.deadline, run)
                .await
                .unwrap_or_else(|_| timed_out())
        };
        outcome.result = without_nul(outcome.result);
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

    /// An assistant bubble's row while it streams: owned by this process (so a
    /// crash is recovered) and carrying its turn's reservation (so it is released).
    pub(super) fn bubble_row(&self, id: &str) -> MessageRow {
        let mut row = self.message_row(id.to_string(), "assistant", "", crate::store::STREAMING);
        row.owner = Some(self.app.store.owner().to_string());
        if let Some(share) = self.admission.as_ref().map(Admission::share) {
            row.budget_day = Some(share.day.clone());
            row.reserved = share.reserved;
        }
        row
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
            owner: None,
            budget_day: None,
            reserved: 0,
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
            Stop::Provider(ProviderError::TurnTimeout) => {
                tracing::warn!("the turn ran out of time");
                (
                    "turn_timeout",
                    "The answer took too long and was stopped. Please try again.",
                )
            }
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
        let citations = (!cited.is_empty()).then(|| stored::encode_citations(&cited));
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
            unreported: self.unreported,
            budget: admission
                .as_ref()
                .and_then(Admission::reserved_share)
                .or(self.recovered_share.as_ref())
                .cloned(),
            owner: self.app.store.owner().to_string(),
        };
        let saved = self.app.store.finish_turn(end).await;
        if saved.is_err() {
            // The settlement did not happen with the message: keep it for `settle`.
            self.admission = admission;
        }
        saved?;
        self.open_bubble = None;
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

/// How often a streaming answer's text is saved.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Text with its NUL characters dropped: PostgreSQL's text columns refuse them,
/// and they carry nothing a visitor could read.
pub(super) fn without_nul(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "")
    } else {
        text
    }
}

/// A rough token count for text a provider reported no usage for (about four
/// characters a token for English), so the budget is charged something.
pub(super) fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

fn request_chars(request: &ChatRequest) -> usize {
    request
        .messages
        .iter()
        .map(|m| match m {
            ChatMessage::System { content } | ChatMessage::User { content } => content.len(),
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => content.len() + tool_calls.iter().map(|c| c.arguments.len()).sum::<usize>(),
            ChatMessage::Tool { content, .. } => content.len(),
        })
        .sum()
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
