//! Calls waiting for a teammate (SPEC §20): a visitor's confirmation that
//! sends a `confirm+approve` card on to the approvals queue, and the queue's
//! reads. The teammate's decision is the cards' one conditional transition
//! (`Cards::decide` from `awaiting_approval`).

use super::audit::{self, AuditRow};
use super::calls::{COLUMNS, CallRow, call};
use super::cards::{Cards, Decided, why_lost};
use super::error::StoreResult;
use super::{Store, sql};
use crate::clock::Millis;
use crate::states::{AuditEvent, CallStatus};

impl Cards<'_> {
    /// A visitor's Confirm of a card that also needs a teammate: pending →
    /// awaiting approval, with its new expiry and approval signature, and the
    /// visitor's `confirmed` row, in one conditional update.
    pub async fn to_approval(
        self,
        c: &CallRow,
        now: Millis,
        expires_at: Millis,
        signature: &str,
    ) -> StoreResult<Decided> {
        let mut tx = self.store().writer().begin().await?;
        let moved = sqlx::query(
            "UPDATE calls SET status = $1, expires_at = $2, signature = $3, decided_at = $4 \
             WHERE id = $5 AND status = $6 AND expires_at > $4",
        )
        .bind(CallStatus::AwaitingApproval.as_str())
        .bind(expires_at)
        .bind(signature)
        .bind(now)
        .bind(&c.id)
        .bind(CallStatus::Pending.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if moved != 1 {
            return why_lost(&mut tx, c, now).await;
        }
        audit::insert(
            &mut *tx,
            &AuditRow::for_call(c, AuditEvent::Confirmed, None, now),
        )
        .await?;
        tx.commit().await?;
        Ok(Decided::Won)
    }
}

/// The approvals queue (SPEC §20).
#[derive(Clone, Copy)]
pub struct Approvals<'s>(&'s Store);

impl Store {
    pub fn approvals(&self) -> Approvals<'_> {
        Approvals(self)
    }
}

/// At most this many waiting calls are listed at once.
const LISTED: i64 = 200;

impl Approvals<'_> {
    /// The calls waiting for a teammate and not yet expired, oldest first.
    pub async fn waiting(self, now: Millis) -> StoreResult<Vec<CallRow>> {
        let rows = sqlx::query(sql(format!(
            "SELECT {COLUMNS} FROM calls WHERE status = $1 AND expires_at > $2 ORDER BY created_at, id LIMIT {LISTED}"
        )))
        .bind(CallStatus::AwaitingApproval.as_str())
        .bind(now)
        .fetch_all(self.0.pool())
        .await?;
        Ok(rows.iter().map(call).collect::<Result<_, _>>()?)
    }

    /// How many calls wait for a teammate now (the `deskbell_approvals_waiting`
    /// gauge).
    pub async fn count(self, now: Millis) -> StoreResult<i64> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM calls WHERE status = $1 AND expires_at > $2")
                .bind(CallStatus::AwaitingApproval.as_str())
                .bind(now)
                .fetch_one(self.0.pool())
                .await?,
        )
    }
}
