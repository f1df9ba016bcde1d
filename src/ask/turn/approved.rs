//! A teammate's decision on a waiting call (SPEC §20), as a turn with no
//! visitor request behind it: the one conditional transition from
//! `awaiting_approval` (which also opens the continuation's bubble and, for an
//! approval, marks the call running under this process), then the call's run
//! with exactly its stored arguments, or the model told it was declined, and
//! the continuation saved as for a visitor who left. The handler is told how
//! the decision went as soon as it is committed.

use tokio::sync::oneshot;

use super::Turn;
use crate::budget::BudgetShare;
use crate::confirm;
use crate::confirm::approval::Approval;
use crate::error::ApiError;
use crate::llm::ChatMessage;
use crate::states::{CallStatus, Reason};
use crate::store::{Decided, Step};

/// What a teammate said of a waiting call.
pub struct Teammate {
    pub operator: String,
    pub approve: bool,
    pub note: Option<String>,
}

pub type Told = oneshot::Sender<Result<CallStatus, ApiError>>;

impl Turn {
    pub(in crate::ask) async fn teammate(mut self, approval: Approval, said: Teammate, told: Told) {
        if let Err(e) = Box::pin(self.run_teammate(approval, said, told)).await {
            Box::pin(self.abort(e)).await;
        }
        Box::pin(self.settle()).await;
    }

    async fn run_teammate(
        &mut self,
        approval: Approval,
        said: Teammate,
        told: Told,
    ) -> anyhow::Result<()> {
        let Approval { mut call, tool, .. } = approval;
        let (context, arguments, bubble) = self.continue_from(&call)?;
        let row = self.bubble_row(&bubble.id);
        let (to, reason) = match said.approve {
            true => (CallStatus::Confirmed, None),
            false => (CallStatus::Cancelled, Some(Reason::Declined)),
        };
        let step = Step {
            from: CallStatus::AwaitingApproval,
            to,
            reason,
            by: Some(&said.operator),
        };
        let now = self.app.clock.now_ms();
        // The continuation is a turn like any other: it reserves its share of
        // the site's daily budget in the decision's transaction, and its
        // bubble names the share, so a crash's recovery settles it.
        let limits = &self.caller.site.config.limits;
        let share = BudgetShare::for_turn(
            &call.site,
            limits.max_tokens_per_turn,
            limits.daily_token_budget,
            now,
        );
        let mut row = row;
        row.budget_day = Some(share.day.clone());
        row.reserved = share.reserved;
        let decided = self
            .app
            .store
            .cards()
            .decide(&call, step, now, &row, Some(&share));
        match decided.await? {
            Decided::Won => {}
            lost => {
                // Nothing was decided. A spent budget refuses nothing: the
                // call still waits and may be approved once it allows.
                let error = match lost {
                    Decided::Budget(reservation) => crate::budget::budget_refusal(reservation, now),
                    other => {
                        let by = Some(said.operator.as_str());
                        confirm::decide::refused(&self.app, &call, other, now, by).await?
                    }
                };
                let _ = told.send(Err(error));
                return Ok(());
            }
        }
        self.app.store.budget().note_reserved(&share);
        self.open(&bubble.id, Some(share));
        let _ = told.send(Ok(to));
        crate::crashpoint::reached("after_approval");
        // The notices are not owed: a failure to write the visitor's `card`
        // event must not leave the call running without its run.
        confirm::approval::decided(&self.app, &call, to).await;
        let message = bubble.id.clone();
        if said.approve {
            // The call runs under this turn's fence, delivered once.
            call.owner = Some(self.fence.to_string());
            call.deliveries = 1;
            self.continue_confirmed(&call, &tool, &arguments, context, bubble)
                .await?;
        } else {
            let note = said
                .note
                .filter(|n| !n.trim().is_empty())
                .map(|n| format!(" The teammate's note: {n}"))
                .unwrap_or_default();
            self.withheld = Some(call.tool.clone());
            let mut messages = self.continuation(context);
            messages.push(ChatMessage::Tool {
                tool_call_id: call.model_call_id.clone(),
                content: format!(
                    "A teammate declined this call, so it did not run.{note} Tell the visitor; do not try this \
                     call or tool again in this turn."
                ),
                is_error: true,
            });
            let mut bubble = bubble;
            let status = self.rounds(messages, &mut bubble, None).await;
            self.close(bubble, status).await?;
        }
        crate::conversation::deliver(&self.app, &call.conversation, &message).await
    }
}
