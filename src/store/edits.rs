//! A card replaced by the card signed for a visitor's edits (SPEC §20): in one
//! transaction, the old card closes `cancelled` (reason `superseded`) by the
//! same conditional update as every card's transition — so of an edit and a
//! confirm racing, one wins — and the new card is stored pending with its own
//! `requested` row. The quota use moves from the old card to the new one.

use super::audit::{self, AuditRow};
use super::calls::{CallRow, insert_in};
use super::cards::{Cards, Decided, why_lost};
use super::error::StoreResult;
use crate::clock::Millis;
use crate::states::{AuditEvent, CallStatus, Reason};

impl Cards<'_> {
    pub async fn replace_edited(
        self,
        old: &CallRow,
        new: &CallRow,
        now: Millis,
    ) -> StoreResult<Decided> {
        let mut tx = self.store().writer().begin().await?;
        let closed = sqlx::query(
            "UPDATE calls SET status = $1, decided_at = $2, reason = $3 \
             WHERE id = $4 AND status = $5 AND expires_at > $2",
        )
        .bind(CallStatus::Cancelled.as_str())
        .bind(now)
        .bind(Reason::Superseded.as_str())
        .bind(&old.id)
        .bind(CallStatus::Pending.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if closed != 1 {
            return why_lost(&mut tx, old, now).await;
        }
        let cancelled =
            AuditRow::for_call(old, AuditEvent::Cancelled, Some(Reason::Superseded), now);
        audit::insert(&mut *tx, &cancelled).await?;
        let requested = AuditRow::for_call(new, AuditEvent::Requested, None, now);
        insert_in(&mut tx, new, &[requested]).await?;
        tx.commit().await?;
        Ok(Decided::Won)
    }
}
