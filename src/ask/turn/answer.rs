//! The continuation after a card: the visitor's decision, the confirmed call's
//! run with exactly its stored arguments, and the model rounds that follow in a
//! new bubble — and the same continuation for a turn whose process died.

use super::finish::{snippet, step_event};
use super::{Bubble, Turn};
use crate::ask::prompt::{self, Part};
use crate::confirm::{self, Verified};
use crate::ids::new_id;
use crate::llm::{ChatMessage, ModelStream, ProviderError};
use crate::states::CallKind;
use crate::states::{CallStatus, Policy};
use crate::store::{BudgetShare, CallRow, StreamingAnswer};
use crate::tools::Tool;
use crate::tools::arguments::Arguments;
use crate::wire::{Citation, Decision, StreamEvent, TurnStatus};

impl Turn {
    pub(super) async fn run_answer(
        &mut self,
        verified: Verified,
        decision: Decision,
    ) -> anyhow::Result<()> {
        let Verified { mut call, tool } = verified;
        // A `confirm+approve` card goes on to a teammate once confirmed; it
        // runs when they approve (SPEC §20).
        if decision == Decision::Confirm && tool.policy == Policy::ConfirmApprove {
            return self.send_to_teammate(&call, &tool).await;
        }
        let (context, arguments, bubble) = self.continue_from(&call)?;
        let bubble_row = self.bubble_row(&bubble.id);
        let budget = self.admission.as_ref().map(|a| a.share().clone());
        let to =
            match confirm::decide::decide(&self.app, &call, decision, &bubble_row, budget.as_ref())
                .await?
            {
                Ok(to) => to,
                Err(refusal) => {
                    self.start(Err(refusal));
                    return Ok(());
                }
            };
        self.opened(&bubble.id);
        // A confirmed call now runs under this turn's fence, delivered once.
        if decision == Decision::Confirm {
            call.owner = Some(self.fence.to_string());
            call.deliveries = 1;
        }
        crate::crashpoint::reached("after_decide");
        self.start(Ok(()));
        self.sink
            .send(StreamEvent::Decision {
                call: call.id.clone(),
                status: to,
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
                    is_error: true,
                });
                let mut bubble = bubble;
                let status = self.rounds(messages, &mut bubble, None).await;
                self.close(bubble, status).await
            }
        }
    }

    /// A continuation of `call`'s turn begins: what it resumes from and what
    /// would run, read before any decision (a stored call that no longer
    /// parses leaves the card undecided), and the new bubble it answers in.
    pub(super) fn continue_from(
        &mut self,
        call: &CallRow,
    ) -> anyhow::Result<(Vec<ChatMessage>, Arguments, Bubble)> {
        let (context, arguments) = confirm::run::prepare(call)?;
        self.conversation = call.conversation.clone();
        self.turn = call.turn.clone();
        self.card_raised = true;
        let bubble = Bubble {
            id: new_id("m"),
            text: String::new(),
        };
        Ok((context, arguments, bubble))
    }

    /// The visitor confirmed a card that also needs a teammate: it waits in
    /// the approvals queue, and this turn ends waiting with it.
    async fn send_to_teammate(&mut self, call: &CallRow, tool: &Tool) -> anyhow::Result<()> {
        if let Err(refusal) = confirm::approval::await_teammate(&self.app, call, tool).await {
            self.start(Err(refusal));
            return Ok(());
        }
        self.start(Ok(()));
        self.sink
            .send(StreamEvent::Decision {
                call: call.id.clone(),
                status: CallStatus::AwaitingApproval,
            })
            .await;
        self.end_with(TurnStatus::AwaitingConfirmation).await;
        Ok(())
    }

    /// The model's messages for a continuation: the rebuilt system message (with no
    /// retrieval: its only sources are tool results) and the stored transcript.
    pub(super) fn continuation(&self, context: Vec<ChatMessage>) -> Vec<ChatMessage> {
        let mut messages = vec![prompt::system(
            &self.caller.site.config,
            Part::Continuation,
            &prompt::language(self.caller.language),
        )];
        messages.extend(context);
        messages
    }

    /// Runs a confirmed call with exactly its stored arguments and continues the
    /// turn into `bubble` with its result. Used for a visitor's answer and for a
    /// call delivered again after a crash alike.
    pub(super) async fn continue_confirmed(
        &mut self,
        call: &CallRow,
        tool: &Tool,
        arguments: &Arguments,
        context: Vec<ChatMessage>,
        mut bubble: Bubble,
    ) -> anyhow::Result<()> {
        // A card stays answerable while a person holds the conversation: the
        // call runs, but the model is not asked to go on (SPEC §19).
        let held = Box::pin(self.handed_off()).await;
        let mut messages = self.continuation(context);
        let first = self
            .run_confirmed(call, tool, &arguments.value, &mut messages, held.is_ok())
            .await?;
        let status = match held {
            Err(stop) => Box::pin(self.stopped(stop)).await,
            Ok(()) => self.rounds(messages, &mut bubble, first).await,
        };
        self.close(bubble, status).await
    }

    /// Sets a headless turn up to finish the turn of `call` after a crash, under
    /// the fence its claim stamped on the call and the answer.
    pub(in crate::ask) fn resume(
        &mut self,
        call: &CallRow,
        answer: Option<&StreamingAnswer>,
        fence: crate::store::Fence,
    ) {
        self.fence = fence;
        self.conversation = call.conversation.clone();
        self.turn = answer.map_or_else(|| call.turn.clone(), |a| a.turn.clone());
        // A continuation after a card raises no second one.
        self.card_raised = call.kind != CallKind::Auto;
    }

    /// Finishes a turn whose process died while `call` ran: the transcript, what
    /// the interrupted round's calls gave, then model rounds into the answer's
    /// bubble, saved as for a visitor who disconnected.
    pub(in crate::ask) async fn continue_recovered(
        &mut self,
        context: Vec<ChatMessage>,
        results: Vec<ChatMessage>,
        call: &CallRow,
        outcome: &str,
        mut bubble: Bubble,
        reserved: Option<BudgetShare>,
    ) -> anyhow::Result<()> {
        let messages = match call.kind {
            CallKind::Auto => {
                let language = prompt::language(self.caller.language);
                let mut m = vec![prompt::system(
                    &self.caller.site.config,
                    Part::Question,
                    &language,
                )];
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
                    found_by: Vec::new(),
                });
                let mut m = self.continuation(context);
                m.push(ChatMessage::Tool {
                    tool_call_id: call.model_call_id.clone(),
                    content: format!("[1] {outcome}"),
                    is_error: call.status == CallStatus::Failed,
                });
                m
            }
        };
        // The dead turn's reservation is settled with this bubble's final write.
        self.open(&bubble.id, reserved);
        let status = self.rounds(messages, &mut bubble, None).await;
        self.close(bubble, status).await
    }

    /// Runs a confirmed call, hands the result to the model, and records the run
    /// while the model is asked: the first token waits for whichever of the two
    /// takes longer, not for both in turn.
    async fn run_confirmed(
        &mut self,
        call: &CallRow,
        tool: &Tool,
        arguments: &serde_json::Value,
        messages: &mut Vec<ChatMessage>,
        ask_model: bool,
    ) -> anyhow::Result<Option<Result<ModelStream, ProviderError>>> {
        let (outcome, status) = self.run_tool(&call.id, tool, arguments).await?;
        self.sources.push(Citation {
            n: 1,
            title: tool.label.clone(),
            url: None,
            snippet: snippet(&outcome.result),
            found_by: Vec::new(),
        });
        // A card the visitor edited ran with the edited values; the stored
        // transcript already carries them, and the model is told so too.
        let edited = match call.edited_from {
            Some(_) => format!(
                "The visitor changed the arguments on the card before confirming; the call ran with {}. ",
                call.arguments
            ),
            None => String::new(),
        };
        messages.push(ChatMessage::Tool {
            tool_call_id: call.model_call_id.clone(),
            content: format!("{edited}[1] {}", outcome.result),
            is_error: status == CallStatus::Failed,
        });
        self.refresh_tools().await;
        let record = confirm::run::record(&self.app, call, &outcome, status, &self.fence);
        let request = self.request(messages, 0);
        let model = async {
            match ask_model {
                true => Some(self.model(request).await),
                false => None,
            }
        };
        let (recorded, first) = tokio::join!(record, model);
        recorded?;
        self.sink.send(step_event(&call.id, tool, status)).await;
        Ok(first)
    }
}
