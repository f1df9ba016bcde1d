//! Each site's daily token budget. A turn reserves its cap before it starts and
//! settles to what the provider reported when it ends, so turns running at once can
//! overshoot the budget by at most one turn's cap. Spend is stored, so a restart
//! forgets nothing.

use sqlx::Row;

use super::Store;
use crate::states::MessageStatus;

/// A turn's reservation of its site's daily budget.
#[derive(Debug, Clone)]
pub struct BudgetShare {
    pub site: String,
    pub day: String,
    /// What the turn reserves (its token cap).
    pub reserved: i64,
    /// The site's daily budget.
    pub limit: i64,
}

impl Store {
    /// Whether a turn could reserve its share of a site's budget for `day` now (a
    /// read: the reservation itself happens in the turn's first transaction,
    /// `reserve_in`).
    pub async fn budget_open(&self, share: &BudgetShare) -> anyhow::Result<Reservation> {
        let row = sqlx::query("SELECT spent, reserved FROM budgets WHERE site = $1 AND day = $2")
            .bind(&share.site)
            .bind(&share.day)
            .fetch_optional(self.pool())
            .await?;
        Ok(match row {
            Some(r) => judge(r.try_get("spent")?, r.try_get("reserved")?, share.limit),
            None => Reservation::Reserved,
        })
    }

    /// Tokens spent by a site on a day (settled turns only).
    pub async fn budget_spent(&self, site: &str, day: &str) -> anyhow::Result<i64> {
        let row = sqlx::query("SELECT spent FROM budgets WHERE site = $1 AND day = $2")
            .bind(site)
            .bind(day)
            .fetch_optional(self.pool())
            .await?;
        Ok(match row {
            Some(r) => r.try_get("spent")?,
            None => 0,
        })
    }
}

/// Whether a turn may reserve: the budget is spent only when the day's settled
/// spend has reached it; when running turns' reservations are what stands in the
/// way, they will be settled within a turn's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    Reserved,
    /// Spent tokens have reached the budget: nothing more today.
    Spent,
    /// Only other turns' reservations stand in the way: try again in a moment.
    Held,
}

fn judge(spent: i64, reserved: i64, limit: i64) -> Reservation {
    if spent >= limit {
        Reservation::Spent
    } else if spent + reserved >= limit {
        Reservation::Held
    } else {
        Reservation::Reserved
    }
}

/// Reserves a turn's share if any of the budget is left after the other turns'
/// reservations, so the budget is overshot by one turn's cap at the most.
pub(super) async fn reserve_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    share: &BudgetShare,
) -> Result<Reservation, sqlx::Error> {
    sqlx::query("INSERT INTO budgets (site, day, spent, reserved) VALUES ($1, $2, 0, 0) ON CONFLICT DO NOTHING")
        .bind(&share.site)
        .bind(&share.day)
        .execute(&mut **tx)
        .await?;
    let done = sqlx::query("UPDATE budgets SET reserved = reserved + $3 WHERE site = $1 AND day = $2 AND spent + reserved < $4")
        .bind(&share.site)
        .bind(&share.day)
        .bind(share.reserved)
        .bind(share.limit)
        .execute(&mut **tx)
        .await?;
    if done.rows_affected() == 1 {
        return Ok(Reservation::Reserved);
    }
    let row = sqlx::query("SELECT spent, reserved FROM budgets WHERE site = $1 AND day = $2")
        .bind(&share.site)
        .bind(&share.day)
        .fetch_one(&mut **tx)
        .await?;
    Ok(
        match judge(row.try_get("spent")?, row.try_get("reserved")?, share.limit) {
            // The row changed between the two statements only on another connection's
            // commit; either way this turn did not reserve.
            Reservation::Reserved => Reservation::Held,
            other => other,
        },
    )
}

/// Settles a turn's reservation to what it spent, only while its answer is still
/// streaming under `owner`: of the answer's final write, its failure and its
/// recovery after a crash, whichever comes first settles it, and only that one.
pub(super) async fn settle_once<'e, E>(
    executor: E,
    share: &BudgetShare,
    spent: i64,
    message: &str,
    owner: &str,
) -> Result<(), sqlx::Error>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    sqlx::query(
        "UPDATE budgets SET reserved = reserved - $3, spent = spent + $4 WHERE site = $1 AND day = $2 \
         AND EXISTS (SELECT 1 FROM messages WHERE id = $5 AND status = $7 AND owner = $6)",
    )
    .bind(&share.site)
    .bind(&share.day)
    .bind(share.reserved)
    .bind(spent)
    .bind(message)
    .bind(owner)
    .bind(MessageStatus::Streaming.as_str())
    .execute(executor)
    .await?;
    Ok(())
}
