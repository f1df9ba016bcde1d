//! Each site's daily token budget. A turn reserves its cap before it starts and
//! settles to what the provider reported when it ends, so turns running at once can
//! overshoot the budget by at most one turn's cap. Spend is stored, so a restart
//! forgets nothing.

use sqlx::Row;

use super::Store;
use super::turns::BudgetShare;

impl Store {
    /// Whether any of a site's budget is left for `day` (a read: the reservation
    /// itself happens in the turn's first transaction, `reserve_in`).
    pub async fn budget_open(&self, share: &BudgetShare) -> anyhow::Result<bool> {
        let row = sqlx::query(
            "SELECT spent + reserved AS used FROM budgets WHERE site = $1 AND day = $2",
        )
        .bind(&share.site)
        .bind(&share.day)
        .fetch_optional(self.pool())
        .await?;
        Ok(match row {
            Some(r) => r.try_get::<i64, _>("used")? < share.limit,
            None => true,
        })
    }

    /// Turns a reservation into what was spent (0 gives it back unspent).
    pub async fn settle_budget(&self, share: &BudgetShare, spent: i64) -> anyhow::Result<()> {
        settle(self.writer(), share, spent).await?;
        Ok(())
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

/// Turns a reservation into what was really spent.
pub(super) async fn settle<'e, E>(
    executor: E,
    share: &BudgetShare,
    spent: i64,
) -> Result<(), sqlx::Error>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    sqlx::query("UPDATE budgets SET reserved = reserved - $3, spent = spent + $4 WHERE site = $1 AND day = $2")
        .bind(&share.site)
        .bind(&share.day)
        .bind(share.reserved)
        .bind(spent)
        .execute(executor)
        .await?;
    Ok(())
}

/// Reserves a turn's share if any of the budget is left; false when it is spent.
pub(super) async fn reserve_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    share: &BudgetShare,
) -> Result<bool, sqlx::Error> {
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
    Ok(done.rows_affected() == 1)
}
