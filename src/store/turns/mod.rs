//! The writes at the start and the end of a turn, as SQL that joins whatever
//! transaction it is given: a group commit's (`group.rs`), or its own.

mod bulk;
mod group;

pub(in crate::store) use group::GroupCommit;

use crate::clock::Millis;
use crate::store::cards::{expire_in, supersede_in};
use crate::store::conversations::insert_messages;
use crate::store::{BudgetShare, MessageRow, Reservation};
use crate::wire::Usage;

use crate::states::MessageStatus;
use crate::store::Tx;
use crate::store::ownership::Fence;

pub struct TurnStart {
    pub conversation: String,
    /// True when the conversation is created by this turn.
    pub is_new: bool,
    pub site: String,
    pub visitor: String,
    pub now: Millis,
    pub visitor_message: MessageRow,
    pub bubble: MessageRow,
    /// The turn's share of the daily budget, reserved here.
    pub budget: Option<BudgetShare>,
}

#[derive(Clone)]
pub struct TurnEnd {
    pub message: String,
    pub text: String,
    pub status: MessageStatus,
    pub citations: Option<String>,
    pub usage: Usage,
    /// Tokens spent in model rounds whose provider reported no usage (a stream cut
    /// before its usage chunk, a server that never sends one), estimated: the
    /// budget is charged for them rather than nothing.
    pub unreported: u64,
    /// The reservation to settle to `usage` and `unreported`.
    pub budget: Option<BudgetShare>,
    /// The fence of the work streaming the answer: the end is saved only while
    /// the answer is still streaming under it (not after another process took
    /// it over).
    pub owner: Fence,
}

pub(in crate::store) async fn begin_in(
    tx: &mut Tx<'_>,
    t: &TurnStart,
) -> Result<Reservation, sqlx::Error> {
    if let Some(share) = &t.budget {
        match crate::store::budget::reserve_in(tx, share).await? {
            Reservation::Reserved => {}
            other => return Ok(other),
        }
    }
    if t.is_new {
        sqlx::query(
            "INSERT INTO conversations (id, site, visitor, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(&t.conversation)
        .bind(&t.site)
        .bind(&t.visitor)
        .bind(t.now)
        .execute(&mut **tx)
        .await?;
    } else {
        // Counted before the batch commits: a batch that fails is run again job
        // by job, which may count a card twice (rare, and only in the metric).
        for c in expire_in(tx, t.now, Some(&t.conversation)).await? {
            crate::ops::metrics::confirmation(&c.site, "expired");
        }
        for c in supersede_in(tx, &t.conversation, t.now).await? {
            crate::ops::metrics::confirmation(&c.site, "superseded");
        }
    }
    let backend = crate::store::Backend::of(tx);
    insert_messages(&mut **tx, &[&t.visitor_message, &t.bubble], backend).await?;
    Ok(Reservation::Reserved)
}

/// Whether a start's rows are already there: a batch whose commit went through
/// although its caller was told it failed (an ambiguous commit) is not written
/// twice when its jobs run again one by one.
pub(in crate::store) async fn begun(tx: &mut Tx<'_>, t: &TurnStart) -> Result<bool, sqlx::Error> {
    let row = sqlx::query("SELECT 1 AS found FROM messages WHERE id = $1")
        .bind(&t.bubble.id)
        .fetch_optional(&mut **tx)
        .await?;
    Ok(row.is_some())
}

/// The budget first, then the message: every write of a turn takes its locks in
/// the order budget, call, audit, messages (see `Store::decide`). Returns
/// whether the end is saved: written now, or found already written under the
/// same fence (a run again after an ambiguous commit); false when the answer
/// is no longer streaming under the end's fence.
pub(in crate::store) async fn end_in(tx: &mut Tx<'_>, e: &TurnEnd) -> Result<bool, sqlx::Error> {
    if let Some(b) = &e.budget {
        let spent = crate::budget::spent(e.usage, e.unreported);
        crate::store::budget::settle_once(&mut **tx, b, spent, &e.message, e.owner.as_str())
            .await?;
    }
    let saved = sqlx::query(
        "UPDATE messages SET text = $1, status = $2, citations = $3, input_tokens = $4, output_tokens = $5 \
         WHERE id = $6 AND status = $8 AND owner = $7",
    )
    .bind(&e.text)
    .bind(e.status.as_str())
    .bind(&e.citations)
    .bind(e.usage.input_tokens as i64)
    .bind(e.usage.output_tokens as i64)
    .bind(&e.message)
    .bind(e.owner.as_str())
    .bind(MessageStatus::Streaming.as_str())
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if saved == 1 {
        return Ok(true);
    }
    ended(tx, e).await
}

/// Whether `e` was already saved: the answer carries its fence and its final
/// status (an answer taken over carries the claimer's fence).
pub(in crate::store) async fn ended(tx: &mut Tx<'_>, e: &TurnEnd) -> Result<bool, sqlx::Error> {
    ended_as(tx, &e.message, e.status, &e.owner).await
}

/// Whether answer `message` ended with `status` under `fence`.
pub(in crate::store) async fn ended_as(
    tx: &mut Tx<'_>,
    message: &str,
    status: MessageStatus,
    fence: &Fence,
) -> Result<bool, sqlx::Error> {
    use sqlx::Row;
    let row = sqlx::query("SELECT status, owner FROM messages WHERE id = $1")
        .bind(message)
        .fetch_optional(&mut **tx)
        .await?;
    let Some(row) = row else {
        return Ok(false);
    };
    let now: String = row.try_get("status")?;
    let owner: Option<String> = row.try_get("owner")?;
    Ok(now == status.as_str() && owner.as_deref() == Some(fence.as_str()))
}
