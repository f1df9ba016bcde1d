//! A question's start: its first reads, its first writes and its first model
//! request, and what each refusal or failure among them tells the visitor.
//! `head.rs` says when the request and the writes go before the reads.

use std::sync::Arc;

use super::finish::snippet;
use super::head::Asked;
use super::{Bubble, Turn};
use crate::ask::prompt::{self, Part};
use crate::clock::Millis;
use crate::error::ApiError;
use crate::ids::{ConversationId, new_id};
use crate::llm::{ChatMessage, ProviderError};
use crate::states::{MessageStatus, Role};
use crate::store::{BudgetShare, Reservation, StoreResult, TurnEnd, TurnStart};
use crate::tools::Toolbox;
use crate::wire::{Citation, Usage};

/// How far a question's start got beside its first reads: asked the model and
/// wrote its start already (early), or left both for after the reads.
enum Begun {
    Early(Asked, StoreResult<Reservation>, tokio::time::Instant),
    AfterReads(Box<TurnStart>),
}

impl Turn {
    pub(super) async fn run_question(
        &mut self,
        conversation: Option<ConversationId>,
        message: String,
    ) -> anyhow::Result<()> {
        let store = self.app.store.clone();
        let now = self.app.clock.now_ms();
        let is_new = conversation.is_none();
        self.conversation = conversation.map_or_else(|| new_id("c"), |c| c.as_str().to_string());
        // Every later line of this turn names its conversation (JSON logs carry
        // the span's fields).
        tracing::Span::current().record("conversation", self.conversation.as_str());
        tracing::info!(conversation = %self.conversation, turn = %self.turn, "question");
        // A continued conversation's history is read beside the other reads.
        let conversation = self.conversation.clone();
        let history = async {
            match is_new {
                true => Ok(Vec::new()),
                false => prompt::history(&store, &conversation).await,
            }
        };
        let share = self.admission.as_ref().map(|a| a.share().clone());
        // Whether the model is asked, and the turn's start written, while the
        // budget and tool version are read (`head.rs`).
        let early = share
            .as_ref()
            .is_some_and(|s| store.budget().may_ask_before_reading(s, now));
        let reads = self.first_reads(share, early, now);
        let (start, bubble) = self.turn_start(&message, is_new, now);
        let began = self.began;
        let timed = move |at: tokio::time::Instant| at.duration_since(began);
        self.phases.turn(self.began);
        // On its first poll `join!` polls its futures in the order written, and
        // a search in place runs to its end in that poll: the reads are listed
        // first so that a read the request waits for (a question not asked
        // early) is on its way before the search begins.
        let (tools, prompted) = Box::pin(async {
            tokio::join!(reads, async {
                let (history, (passages, retrieved_at)) = tokio::join!(history, async {
                    (self.retrieve(&message).await, tokio::time::Instant::now())
                });
                self.phases.retrieved(retrieved_at - self.began);
                let messages = self.prompt(passages.as_deref(), history?, &message);
                if !early {
                    return anyhow::Ok((messages, Begun::AfterReads(Box::new(start))));
                }
                // Written only now: the history read must not see this turn.
                let asked = self.ask_before_writing(&messages).await;
                let saved = store.turns().begin(start).await;
                let saved_at = tokio::time::Instant::now();
                anyhow::Ok((messages, Begun::Early(asked, saved, saved_at)))
            })
        })
        .await;
        let (messages, begun) = prompted?;
        self.phases.reads(self.began);
        let first = match begun {
            Begun::Early(asked, saved, saved_at) => {
                // A refusal drops the request sent early, before any of it was
                // shown. (The reads refuse nothing here but a failure to read;
                // then the start already written is settled as failed.)
                if !self.started(saved?, &bubble.id, is_new) {
                    return Ok(());
                }
                let tools = match tools {
                    Ok(tools) => tools,
                    Err(refused) => {
                        drop(asked);
                        Box::pin(self.refuse_after_start(refused)).await;
                        return Ok(());
                    }
                };
                self.tools = tools;
                let asked = if asked.offered(&self.tools) {
                    asked
                } else {
                    tracing::info!(
                        "the site's tools changed while the model was asked; asking again"
                    );
                    self.ask(&messages)
                };
                let (first, head_at) = Box::pin(asked.head()).await;
                self.phases.saved_and_head(timed(saved_at), timed(head_at));
                first
            }
            Begun::AfterReads(start) => {
                if !self.took(tools) {
                    return Ok(());
                }
                // The model is asked (on a task of its own) while the turn's first
                // writes commit, and a refused start does not wait for it.
                let asked = self.ask_before_writing(&messages).await;
                let saved = Box::pin(store.turns().begin(*start)).await;
                let saved_at = tokio::time::Instant::now();
                if !self.started(saved?, &bubble.id, is_new) {
                    return Ok(());
                }
                let (first, head_at) = Box::pin(asked.head()).await;
                self.phases.saved_and_head(timed(saved_at), timed(head_at));
                first
            }
        };
        let first = match first {
            Ok(stream) => stream,
            Err(e) => return Box::pin(self.unreached(e, &bubble.id)).await,
        };
        self.start(Ok(()));
        self.announce(&bubble.id).await;
        let mut bubble = bubble;
        let status = self.rounds(messages, &mut bubble, Some(Ok(first))).await;
        Box::pin(self.close(bubble, status)).await
    }

    /// What a question reads before its first model round: the site's tools as
    /// they stand now (an operator's change applies from the next round on
    /// every replica, SPEC §15), their version read with the budget in one
    /// round trip. When the model is asked early the turn's own reservation
    /// decides the budget, and this read only brings the tool version (and
    /// tells this replica what is left); otherwise a spent budget refuses the
    /// question here, before the model is asked (`guard::admit_question`).
    fn first_reads(
        &self,
        share: Option<BudgetShare>,
        early: bool,
        now: Millis,
    ) -> impl Future<Output = Result<Arc<Toolbox>, ApiError>> + use<> {
        let (app, site) = (self.app.clone(), self.caller.site.clone());
        async move {
            // Asked early, the model needs none of these reads, so they give way
            // for one round of the scheduler (a yielded task runs after the
            // tasks that are ready). When the turn's first poll reaches the
            // request (a new conversation, a search in place) its task runs
            // first; on SQLite the reads' statement runs on the server's own
            // cores and took 70 µs ahead of the request with one visitor.
            if early {
                tokio::task::yield_now().await;
            }
            let store = &app.store;
            let version = match share {
                // A failed read fails the question even though its start may
                // be written (the start is then settled as failed): the tools
                // last read here may be older than an operator's change.
                Some(share) if early => store.budget().and_tool_version(&share, now).await?.1,
                Some(share) => crate::guard::budget_open_with_tool_version(&app, &share).await?,
                None => return Ok(site.tools.current(store).await),
            };
            Ok(site.tools.current_at(store, version).await)
        }
    }

    /// The turn's first writes: the visitor's message and the answer's bubble
    /// (its id made second, as ids order the history).
    fn turn_start(&self, message: &str, is_new: bool, now: Millis) -> (TurnStart, Bubble) {
        let visitor_message =
            self.message_row(new_id("m"), Role::Visitor, message, MessageStatus::Sent);
        let bubble = Bubble {
            id: new_id("m"),
            text: String::new(),
        };
        let start = TurnStart {
            conversation: self.conversation.clone(),
            is_new,
            site: self.caller.site.config.id.clone(),
            visitor: self.caller.visitor.clone(),
            now,
            visitor_message,
            bubble: self.bubble_row(&bubble.id),
            budget: self.admission.as_ref().map(|a| a.share().clone()),
        };
        (start, bubble)
    }

    /// Whether the first reads brought the tools, which this turn then offers;
    /// if they refused the question (before its start was written), the
    /// visitor is told so.
    fn took(&mut self, tools: Result<Arc<Toolbox>, ApiError>) -> bool {
        match tools {
            Ok(tools) => {
                self.tools = tools;
                true
            }
            Err(refused) => {
                self.start(Err(refused));
                false
            }
        }
    }

    /// Whether the turn's start was written; if its budget could not be
    /// reserved (turns running at once took it since this replica looked),
    /// the visitor is told so and nothing was written.
    fn started(&mut self, saved: Reservation, bubble: &str, is_new: bool) -> bool {
        if saved != Reservation::Reserved {
            let refusal = self.budget_refused(saved);
            crate::ops::metrics::guard_refused(refusal.code());
            self.start(Err(refusal));
            return false;
        }
        self.opened(bubble);
        if is_new {
            let site = &self.caller.site.config.id;
            self.app.live.publish(site, &self.conversation, "started");
        }
        true
    }

    /// The model could not be reached before anything was streamed: the answer
    /// is saved as failed and the visitor told `provider_unavailable`.
    async fn unreached(&mut self, e: ProviderError, bubble: &str) -> anyhow::Result<()> {
        tracing::warn!(error = %e, "the model could not be reached");
        crate::ops::metrics::provider_error(e.kind());
        self.ended(crate::wire::TurnStatus::Failed);
        let store = self.app.store.clone();
        store
            .turns()
            .finish(TurnEnd {
                message: bubble.to_string(),
                text: String::new(),
                status: MessageStatus::Failed,
                citations: None,
                usage: Usage::ZERO,
                unreported: 0,
                budget: self.written.share().cloned(),
                owner: self.fence.clone(),
            })
            .await?;
        if let super::written::Written::Open(open) = self.written.take() {
            self.written = super::written::Written::Ended(open.ended());
        }
        self.start(Err(ApiError::ProviderUnavailable));
        Ok(())
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
                found_by: p.found.names().into_iter().map(String::from).collect(),
            })
            .collect();
        Some(passages)
    }

    /// The first round's messages: the system prompt with the question's
    /// sources, the conversation so far and the question.
    fn prompt(
        &mut self,
        passages: Option<&[crate::knowledge::Passage]>,
        history: Vec<ChatMessage>,
        question: &str,
    ) -> Vec<ChatMessage> {
        let knowledge = prompt::language(self.caller.language) + &prompt::sources(passages);
        self.knowledge_len = knowledge.len();
        let system = prompt::system(&self.caller.site.config, Part::Question, &knowledge);
        let mut messages = vec![system];
        messages.extend(history);
        messages.push(ChatMessage::User {
            content: question.to_string(),
        });
        messages
    }

    /// Sends the first round's request with the tools as they stand in this turn.
    fn ask(&self, messages: &[ChatMessage]) -> Asked {
        let request = self.request(messages, 0);
        Asked::send(&self.app, request, self.tools.clone(), self.deadline)
    }

    /// Sends the first round's request and lets it go out before the turn's
    /// start is handed to the group commit. The request runs on a task of its
    /// own, which this worker runs only once this task waits; handing over the
    /// start first would wake the committer, which the server's multi-thread
    /// scheduler runs before a task just spawned (a woken task takes the
    /// worker's LIFO slot), and the request would wait behind the commit's
    /// work. With the reads held back too (`first_reads`), one visitor's
    /// request task began 6 µs after the request was made rather than
    /// 94–105 µs (BENCHMARKS.md, "Where one visitor's added first token goes").
    async fn ask_before_writing(&self, messages: &[ChatMessage]) -> Asked {
        let asked = self.ask(messages);
        tokio::task::yield_now().await;
        asked
    }
}
