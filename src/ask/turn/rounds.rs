//! Model rounds: stream a response into the bubble, run or refuse its tool calls,
//! and go on until the model answers in words, a card stops the turn, or the
//! turn's time or tokens run out.

use futures_util::StreamExt;

use super::finish::step_event;
use super::{Bubble, MAX_ROUNDS, Stop, Turn};
use crate::config::Policy;
use crate::llm::{
    ChatMessage, ChatRequest, ModelEvent, ModelStream, ProviderError, estimate_tokens,
};
use crate::states::Reason;
use crate::store::{CallStatus, stored};
use crate::wire::{StreamEvent, TurnStatus};

impl Turn {
    /// Model rounds until the model answers without tool calls, a card stops the
    /// turn, or something fails.
    pub(super) async fn rounds(
        &mut self,
        mut messages: Vec<ChatMessage>,
        bubble: &mut Bubble,
        mut first: Option<Result<ModelStream, ProviderError>>,
    ) -> TurnStatus {
        // The share the answer holds: the turn's own, or a dead turn's.
        let cap = match (self.written.share(), &self.admission) {
            (Some(share), _) => share.reserved as u64,
            (None, Some(admission)) => admission.cap(),
            (None, None) => u64::MAX,
        };
        for round in 0..MAX_ROUNDS {
            if round > 0 && self.usage.input_tokens + self.usage.output_tokens >= cap {
                tracing::info!(cap, "the turn reached its token cap");
                return TurnStatus::Answered;
            }
            // A person holding the conversation gets no words of the model's:
            // not from a continuation, nor from a turn finished after a crash.
            if let Err(stop) = Box::pin(self.handed_off()).await {
                return Box::pin(self.stopped(stop)).await;
            }
            if first.is_none() {
                Box::pin(self.refresh_tools()).await;
            }
            let request = self.request(&messages, round);
            let prompt_chars = request_chars(&request);
            let stream = match first.take() {
                Some(stream) => stream,
                None => Box::pin(self.model(request)).await,
            };
            let outcome = match stream {
                Ok(stream) => self.consume(stream, bubble, prompt_chars).await,
                Err(e) => Err(Stop::Provider(e)),
            };
            let (text, calls) = match outcome {
                Ok(result) => result,
                Err(stop) => return Box::pin(self.stopped(stop)).await,
            };
            if calls.is_empty() || round + 1 == MAX_ROUNDS {
                return TurnStatus::Answered;
            }
            // A person who took the conversation while the model wrote its
            // calls: none of them runs, no card is shown.
            if let Err(stop) = Box::pin(self.handed_off()).await {
                return Box::pin(self.stopped(stop)).await;
            }
            // The assistant asked for a person: the conversation waits for one
            // and the assistant says nothing more (SPEC §19).
            if let Some(reason) = self.handoff_asked(&calls) {
                return Box::pin(self.hand_off(&reason)).await;
            }
            messages.push(ChatMessage::Assistant {
                content: text,
                tool_calls: calls.clone(),
            });
            // The calls are judged under the tools as they are now, so a tool an
            // operator switched to Needs confirmation while the model wrote does
            // not run on its own.
            Box::pin(self.refresh_tools()).await;
            // What a crash while auto calls run leaves behind: the text so far, and
            // the transcript to resume from once the calls' outcomes are known. (A
            // card's call stores its own transcript.)
            let runs_auto = calls.iter().any(|c| {
                self.tools
                    .get(&c.name)
                    .is_some_and(|t| t.policy == Policy::Auto)
            });
            if runs_auto
                && let Err(e) = Box::pin(self.app.store.leases().checkpoint(
                    &bubble.id,
                    &bubble.text,
                    Some(&stored::encode_transcript(&messages)),
                    &self.fence,
                ))
                .await
            {
                return Box::pin(self.stopped(Stop::from(anyhow::Error::from(e)))).await;
            }
            match Box::pin(self.handle_calls(&mut messages, bubble, calls)).await {
                Ok(true) => return TurnStatus::AwaitingConfirmation,
                Ok(false) => {}
                Err(e) => return Box::pin(self.stopped(Stop::from(e))).await,
            }
        }
        TurnStatus::Answered
    }

    /// Streams one model response into the bubble; returns its text and tool calls.
    /// A response the provider reports no usage for is charged an estimate.
    pub(super) async fn consume(
        &mut self,
        mut stream: ModelStream,
        bubble: &mut Bubble,
        prompt_chars: usize,
    ) -> Result<(String, Vec<crate::llm::ToolCall>), Stop> {
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut reported = false;
        let deadline = self.deadline;
        let result = loop {
            // A person taking the conversation stops the answer at once, not
            // at the model's next word (which may be far off).
            let next = tokio::select! {
                next = tokio::time::timeout_at(deadline, stream.next()) => next,
                woken = self.desk.recv() => {
                    let ours = match &woken {
                        Ok(c) => *c == self.conversation || c == "*",
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                        // The store's sender lives as long as the app; were it
                        // gone, listening again keeps this from spinning.
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                            self.desk = self.app.store.desk().subscribe();
                            false
                        }
                    };
                    if ours {
                        self.holder_known = false;
                        if let Err(stop) = self.handed_off().await {
                            break Err(stop);
                        }
                    }
                    continue;
                }
            };
            let event = match next {
                Ok(Some(event)) => event,
                Ok(None) => break Ok(()),
                Err(_) => break Err(Stop::Provider(ProviderError::TurnTimeout)),
            };
            match event {
                Ok(ModelEvent::Text(delta)) => {
                    // Nothing more is told once the answer may have been taken
                    // over: a process that was paused past its lease checks
                    // with the database before its next word.
                    if let Err(stop) = self.still_held().await {
                        break Err(stop);
                    }
                    // Nor once a person has the conversation.
                    if let Err(stop) = self.handed_off().await {
                        break Err(stop);
                    }
                    if !self.streamed {
                        self.streamed = true;
                        self.phases.first_token(self.began);
                        crate::ops::metrics::first_token(
                            &self.caller.site.config.id,
                            self.began.elapsed(),
                        );
                    }
                    // PostgreSQL's text columns refuse NUL; it carries no meaning.
                    let delta = without_nul(delta);
                    text.push_str(&delta);
                    bubble.text.push_str(&delta);
                    self.sink.send(StreamEvent::Delta { text: delta }).await;
                    if let Err(stop) = self.checkpoint_text(bubble).await {
                        break Err(stop);
                    }
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
    /// loses at most those seconds of it. An answer found taken over stops.
    pub(super) async fn checkpoint_text(&mut self, bubble: &Bubble) -> Result<(), Stop> {
        let now = tokio::time::Instant::now();
        if now.duration_since(self.checkpointed) < CHECKPOINT_EVERY {
            return Ok(());
        }
        self.checkpointed = now;
        let saved = Box::pin(self.app.store.leases().checkpoint(
            &bubble.id,
            &bubble.text,
            None,
            &self.fence,
        ))
        .await;
        match saved {
            Ok(()) => Ok(()),
            Err(crate::store::StoreError::TakenOver) => Err(Stop::TakenOver),
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "an answer's text could not be saved"
                );
                Ok(())
            }
        }
    }

    /// Ok while the assistant holds the conversation. Free unless a change of
    /// holder woke this turn (or it never read the holder): then one read.
    pub(super) async fn handed_off(&mut self) -> Result<(), Stop> {
        use tokio::sync::broadcast::error::TryRecvError;
        let mut woken = !self.holder_known;
        loop {
            match self.desk.try_recv() {
                Ok(c) => woken |= c == self.conversation || c == "*",
                Err(TryRecvError::Lagged(_)) => woken = true,
                Err(_) => break,
            }
        }
        if !woken || self.conversation.is_empty() {
            return Ok(());
        }
        match self.app.store.desk().holder(&self.conversation).await {
            Ok(Some((holder, _))) if holder.is_person() => Err(Stop::HandedOff(holder)),
            Ok(_) => {
                self.holder_known = true;
                Ok(())
            }
            // The answer goes on; the next word asks again only if woken.
            Err(e) => {
                tracing::warn!(error = %e, "the conversation's holder could not be read");
                Ok(())
            }
        }
    }

    /// Ok while this turn's work is still this process's: free when the lease
    /// was renewed within its length, else a word with the database (waiting,
    /// no later than the turn's deadline, while it cannot be reached).
    async fn still_held(&self) -> Result<(), Stop> {
        if !self.app.store.leases().lapsed(&self.fence) {
            return Ok(());
        }
        match tokio::time::timeout_at(self.deadline, self.app.store.leases().hold(&self.fence))
            .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(crate::store::StoreError::TakenOver)) => Err(Stop::TakenOver),
            Ok(Err(e)) => Err(Stop::Internal(e.into())),
            Err(_) => Err(Stop::Provider(ProviderError::TurnTimeout)),
        }
    }

    /// Runs a call on its tool's endpoint, announced with a `running` step; the caller
    /// records the outcome, then sends the final step. The call is sent only
    /// while this process's lease holds for a while yet under the turn's fence:
    /// a process that cannot renew its lease delivers nothing until it has one
    /// again, and one whose work was taken over never delivers it (`TakenOver`).
    pub(in crate::ask) async fn run_tool(
        &self,
        call: &str,
        tool: &crate::tools::Tool,
        arguments: &serde_json::Value,
    ) -> anyhow::Result<(crate::tools::http::Outcome, CallStatus)> {
        self.sink
            .send(step_event(call, tool, CallStatus::Running))
            .await;
        crate::crashpoint::reached("before_delivery");
        // A call is sent only while the turn has time left, and gets no more than
        // that time: every turn ends within `turn_timeout_s`.
        let timed_out = || crate::tools::http::Outcome {
            succeeded: false,
            http_status: None,
            result: "The tool was not run to the end: the turn ran out of time.".into(),
            failure: Some(Reason::Timeout),
            duration_ms: 0,
        };
        let held =
            tokio::time::timeout_at(self.deadline, self.app.store.leases().hold(&self.fence)).await;
        let mut outcome = if let Ok(held) = held
            && tokio::time::Instant::now() < self.deadline
        {
            held?;
            let invocation = self.invocation(call, arguments);
            let run = self.app.executor.run(tool, &invocation);
            tokio::time::timeout_at(self.deadline, run)
                .await
                .unwrap_or_else(|_| timed_out())
        } else {
            timed_out()
        };
        outcome.result = without_nul(outcome.result);
        let status = if outcome.succeeded {
            CallStatus::Succeeded
        } else {
            CallStatus::Failed
        };
        Ok((outcome, status))
    }
}

/// How often a streaming answer's text is saved.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Text with its NUL characters dropped: PostgreSQL's text columns refuse them,
/// and they carry nothing a visitor could read.
pub(in crate::ask) fn without_nul(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "")
    } else {
        text
    }
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
