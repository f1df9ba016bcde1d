//! A card's transitions. Every status change of a confirmation happens in one
//! conditional UPDATE (`WHERE status = pending`) inside a transaction with its
//! audit row, so two answers racing — in one process or in two replicas sharing
//! the database — can never both win, and no decision is stored without its audit
//! row.

use sqlx::Row;

use super::audit::{self, AuditRow};
use super::calls::{COLUMNS, CallRow, call};
use super::error::StoreResult;
use super::{Store, Tx, sql};
use crate::clock::Millis;
use crate::states::{AuditEvent, CallStatus, MessageStatus, Reason};

/// A card's decision: from which status (pending for a visitor's answer,
/// awaiting approval for a teammate's) to which, why, and by which operator.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    pub from: CallStatus,
    pub to: CallStatus,
    pub reason: Option<Reason>,
    pub by: Option<&'a str>,
}

/// How an answer's attempt at the pending → decided transition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decided {
    Won,
    /// Another answer got there first.
    Lost,
    /// The card's time ran out between the checks and the decision.
    Late,
    /// An operator changed the card's tool between the checks and the decision.
    Stale,
    /// The site's daily budget could not be reserved (spent, or held by turns
    /// running at the same time).
    Budget(super::Reservation),
}

/// Confirmation cards' answers and expiry (SPEC §7).
#[derive(Clone, Copy)]
pub struct Cards<'s>(&'s Store);

impl Store {
    pub fn cards(&self) -> Cards<'_> {
        Cards(self)
    }
}

impl<'s> Cards<'s> {
    pub(super) fn store(self) -> &'s Store {
        self.0
    }
}

impl Cards<'_> {
    /// The one atomic pending → decided transition, which also opens the bubble of
    /// the continuation and, for a confirmation, marks the call running under this
    /// process: if it dies before the outcome is recorded, recovery finds the call.
    /// Returns `Lost` when another answer (or an expiry) got there first; then
    /// nothing was changed or audited.
    ///
    /// Locks are taken in the one order every write of a turn uses — budget, then
    /// call, then audit and messages — so a decision racing a new question in the
    /// same conversation waits instead of deadlocking on PostgreSQL.
    pub async fn decide(
        self,
        c: &CallRow,
        step: Step<'_>,
        now: Millis,
        bubble: &super::MessageRow,
        budget: Option<&super::BudgetShare>,
    ) -> StoreResult<Decided> {
        let Step {
            from,
            to,
            reason,
            by,
        } = step;
        let mut tx = self.0.writer().begin().await?;
        if let Some(share) = budget {
            match super::budget::reserve_in(&mut tx, share).await? {
                super::Reservation::Reserved => {}
                other => return Ok(Decided::Budget(other)),
            }
        }
        let (run_message, run_status, owner, deliveries) = match to {
            CallStatus::Confirmed => (
                Some(bubble.id.as_str()),
                Some(CallStatus::Running.as_str()),
                // The call runs under the fence of the continuation's bubble.
                bubble.owner.as_deref(),
                1,
            ),
            _ => (None, None, None, 0),
        };
        let won = sqlx::query(
            "UPDATE calls SET status = $1, decided_at = $2, reason = $3, run_message = $5, run_status = $6, owner = $7, deliveries = $8 \
             WHERE id = $4 AND status = $9 AND expires_at > $2",
        )
        .bind(to.as_str())
        .bind(now)
        .bind(reason.map(Reason::as_str))
        .bind(&c.id)
        .bind(run_message)
        .bind(run_status)
        .bind(owner)
        .bind(deliveries)
        .bind(from.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !won {
            // Dropping the transaction gives the reservation back.
            return why_lost(&mut tx, c, now).await;
        }
        let event = match to {
            CallStatus::Confirmed => AuditEvent::Confirmed,
            _ => {
                super::quotas::give_back_in(&mut tx, c.held()).await?;
                AuditEvent::Cancelled
            }
        };
        let mut row = AuditRow::for_call(c, event, reason, now);
        row.operator = by.map(str::to_string);
        audit::insert(&mut *tx, &row).await?;
        close_card_message(&mut tx, &c.message).await?;
        super::conversations::insert_message(&mut *tx, bubble).await?;
        tx.commit().await?;
        Ok(Decided::Won)
    }

    /// Expires a conversation's cards whose time ran out by `now`, before a
    /// reader reads it — taking the writer only when one is due, so a history
    /// read of a conversation with nothing due writes nothing and waits for no
    /// writer. (The reader then reads messages before calls, as ever: an answer
    /// it sees finished has its call's outcome in the calls it reads after.)
    pub async fn expire_due_in(self, conversation: &str, now: Millis) -> StoreResult<()> {
        let due = sqlx::query(
            "SELECT 1 AS due FROM calls WHERE conversation = $1 AND status IN ($2, $4) AND expires_at <= $3 LIMIT 1",
        )
        .bind(conversation)
        .bind(CallStatus::Pending.as_str())
        .bind(now)
        .bind(CallStatus::AwaitingApproval.as_str())
        .fetch_optional(self.0.pool())
        .await?;
        if due.is_some() {
            self.expire_due(now, Some(conversation)).await?;
        }
        Ok(())
    }

    /// Marks every pending call whose time ran out as expired, with its expiry time
    /// as the decision time, whether or not anybody answered. Optionally only in one
    /// conversation. Returns the calls it expired.
    pub async fn expire_due(
        self,
        now: Millis,
        conversation: Option<&str>,
    ) -> StoreResult<Vec<CallRow>> {
        let mut tx = self.0.writer().begin().await?;
        let expired = expire_in(&mut tx, now, conversation).await?;
        tx.commit().await?;
        for c in &expired {
            crate::ops::metrics::confirmation(&c.site, "expired");
            // A call that waited for a teammate ends on the visitor's live
            // channel too, whichever path expired it: "Waiting for a
            // teammate" becomes "Expired". After the commit, and not owed.
            if c.policy.asks_teammate() {
                let data =
                    serde_json::json!({"call": c.id, "status": CallStatus::Expired}).to_string();
                let event = super::desk::NewEvent {
                    kind: "card",
                    data: &data,
                };
                if let Err(e) = self.0.desk().append(&c.conversation, event, now).await {
                    tracing::warn!(error = format!("{e:#}"), call = %c.id, "an expired approval could not be put on the visitor's channel");
                }
            }
        }
        Ok(expired)
    }
}

/// Why a card's conditional transition changed nothing: whether the card ran
/// out of time, went stale or another answer won is read from the row as it is
/// now, since an expiry sweep may have come between the checks and the update.
pub(super) async fn why_lost(tx: &mut Tx<'_>, c: &CallRow, now: Millis) -> StoreResult<Decided> {
    let row = sqlx::query("SELECT status, expires_at, reason FROM calls WHERE id = $1")
        .bind(&c.id)
        .fetch_optional(&mut **tx)
        .await?;
    let Some(row) = row else {
        return Ok(Decided::Lost);
    };
    let status = super::state(&row, "status", CallStatus::parse)?;
    let expires_at: Option<Millis> = row.try_get("expires_at")?;
    let reason = super::optional_state(&row, "reason", Reason::parse)?;
    Ok(match status {
        CallStatus::Expired if reason == Some(Reason::Stale) => Decided::Stale,
        CallStatus::Expired => Decided::Late,
        CallStatus::Pending | CallStatus::AwaitingApproval
            if expires_at.is_none_or(|at| at <= now) =>
        {
            Decided::Late
        }
        _ => Decided::Lost,
    })
}

pub(super) async fn expire_in(
    tx: &mut Tx<'_>,
    now: Millis,
    conversation: Option<&str>,
) -> Result<Vec<CallRow>, sqlx::Error> {
    let rows = match conversation {
        Some(conv) => {
            sqlx::query(sql(format!(
                "UPDATE calls SET status = $3, decided_at = expires_at \
                 WHERE status IN ($4, $5) AND expires_at <= $1 AND conversation = $2 RETURNING {COLUMNS}"
            )))
            .bind(now)
            .bind(conv)
            .bind(CallStatus::Expired.as_str())
            .bind(CallStatus::Pending.as_str())
            .bind(CallStatus::AwaitingApproval.as_str())
            .fetch_all(&mut **tx)
            .await?
        }
        None => {
            sqlx::query(sql(format!(
                "UPDATE calls SET status = $2, decided_at = expires_at \
                 WHERE status IN ($3, $4) AND expires_at <= $1 RETURNING {COLUMNS}"
            )))
            .bind(now)
            .bind(CallStatus::Expired.as_str())
            .bind(CallStatus::Pending.as_str())
            .bind(CallStatus::AwaitingApproval.as_str())
            .fetch_all(&mut **tx)
            .await?
        }
    };
    let expired: Vec<CallRow> = rows.iter().map(call).collect::<Result<_, _>>()?;
    super::quotas::give_back_in(tx, expired.iter().filter_map(CallRow::held)).await?;
    for c in &expired {
        let at = c.expires_at.unwrap_or(now);
        audit::insert(
            &mut **tx,
            &AuditRow::for_call(c, AuditEvent::Expired, None, at),
        )
        .await?;
        close_card_message(tx, &c.message).await?;
    }
    Ok(expired)
}

impl Cards<'_> {
    /// An operator's Cancel of a pending, unexpired card (SPEC §19): cancelled
    /// with reason `operator`, audited with the operator, in one conditional
    /// UPDATE as every card's transition. `None`: no such pending card in the
    /// conversation (answered, expired, or another's).
    pub async fn cancel_by_operator(
        self,
        conversation: &str,
        call_id: &str,
        operator: &str,
        now: Millis,
    ) -> StoreResult<Option<CallRow>> {
        let mut tx = self.0.writer().begin().await?;
        let row = sqlx::query(sql(format!(
            "UPDATE calls SET status = $4, decided_at = $3, reason = $5 \
             WHERE id = $1 AND conversation = $2 AND status = $6 AND kind = 'confirmation' AND expires_at > $3 \
             RETURNING {COLUMNS}"
        )))
        .bind(call_id)
        .bind(conversation)
        .bind(now)
        .bind(CallStatus::Cancelled.as_str())
        .bind(Reason::Operator.as_str())
        .bind(CallStatus::Pending.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let cancelled = call(&row)?;
        super::quotas::give_back_in(&mut tx, cancelled.held()).await?;
        let mut audit_row = AuditRow::for_call(
            &cancelled,
            AuditEvent::Cancelled,
            Some(Reason::Operator),
            now,
        );
        audit_row.operator = Some(operator.to_string());
        audit::insert(&mut *tx, &audit_row).await?;
        close_card_message(&mut tx, &cancelled.message).await?;
        tx.commit().await?;
        Ok(Some(cancelled))
    }
}

/// Closes every pending card of a site's tool as expired, reason `stale`: an
/// operator changed the tool, so the cards show what would no longer run (SPEC
/// §8, §15). In the change's transaction, so no answer can win a card after the
/// change committed.
pub(super) async fn stale_in(
    tx: &mut Tx<'_>,
    site: &str,
    tool: &str,
    now: Millis,
) -> Result<Vec<CallRow>, sqlx::Error> {
    let rows = sqlx::query(sql(format!(
        "UPDATE calls SET status = $4, decided_at = $3, reason = $5 \
         WHERE status IN ($6, $7) AND site = $1 AND tool = $2 RETURNING {COLUMNS}"
    )))
    .bind(site)
    .bind(tool)
    .bind(now)
    .bind(CallStatus::Expired.as_str())
    .bind(Reason::Stale.as_str())
    .bind(CallStatus::Pending.as_str())
    .bind(CallStatus::AwaitingApproval.as_str())
    .fetch_all(&mut **tx)
    .await?;
    let stale: Vec<CallRow> = rows.iter().map(call).collect::<Result<_, _>>()?;
    super::quotas::give_back_in(tx, stale.iter().filter_map(CallRow::held)).await?;
    for c in &stale {
        audit::insert(
            &mut **tx,
            &AuditRow::for_call(c, AuditEvent::Expired, Some(Reason::Stale), now),
        )
        .await?;
        close_card_message(tx, &c.message).await?;
    }
    Ok(stale)
}

/// Closes the pending card of a conversation as cancelled (reason `superseded`)
/// because the visitor asked something new.
pub(super) async fn supersede_in(
    tx: &mut Tx<'_>,
    conversation: &str,
    now: Millis,
) -> Result<Vec<CallRow>, sqlx::Error> {
    let rows = sqlx::query(sql(format!(
        "UPDATE calls SET status = $3, decided_at = $1, reason = $4 \
         WHERE status = $5 AND conversation = $2 RETURNING {COLUMNS}"
    )))
    .bind(now)
    .bind(conversation)
    .bind(CallStatus::Cancelled.as_str())
    .bind(Reason::Superseded.as_str())
    .bind(CallStatus::Pending.as_str())
    .fetch_all(&mut **tx)
    .await?;
    let superseded: Vec<CallRow> = rows.iter().map(call).collect::<Result<_, _>>()?;
    super::quotas::give_back_in(tx, superseded.iter().filter_map(CallRow::held)).await?;
    for c in &superseded {
        audit::insert(
            &mut **tx,
            &AuditRow::for_call(c, AuditEvent::Cancelled, Some(Reason::Superseded), now),
        )
        .await?;
        close_card_message(tx, &c.message).await?;
    }
    Ok(superseded)
}

/// Once its card is decided, the message that raised it is no longer waiting.
pub(super) async fn close_card_message(tx: &mut Tx<'_>, message: &str) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE messages SET status = $2 WHERE id = $1 AND status = $3")
        .bind(message)
        .bind(MessageStatus::Answered.as_str())
        .bind(MessageStatus::AwaitingConfirmation.as_str())
        .execute(&mut **tx)
        .await?;
    Ok(())
}
