//! Each site's daily token budget. A turn reserves its cap before it starts and
//! settles to what the provider reported when it ends, so turns running at once can
//! overshoot the budget by at most one turn's cap. Spend is stored, so a restart
//! forgets nothing.

use super::Store;

impl Store {
    /// Reserves `tokens` of a site's budget for `day` if any of it is left.
    pub async fn reserve_budget(
        &self,
        site: &str,
        day: &str,
        tokens: i64,
        budget: i64,
    ) -> anyhow::Result<bool> {
        sqlx::query("INSERT INTO budgets (site, day, spent, reserved) VALUES ($1, $2, 0, 0) ON CONFLICT DO NOTHING")
            .bind(site)
            .bind(day)
            .execute(self.pool())
            .await?;
        let done = sqlx::query(
            "UPDATE budgets SET reserved = reserved + $3 WHERE site = $1 AND day = $2 AND spent + reserved < $4",
        )
        .bind(site)
        .bind(day)
        .bind(tokens)
        .bind(budget)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Turns a reservation into what was really spent.
    pub async fn settle_budget(
        &self,
        site: &str,
        day: &str,
        reserved: i64,
        spent: i64,
    ) -> anyhow::Result<()> {
        sqlx::query("UPDATE budgets SET reserved = reserved - $3, spent = spent + $4 WHERE site = $1 AND day = $2")
            .bind(site)
            .bind(day)
            .bind(reserved)
            .bind(spent)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Tokens spent by a site on a day (settled turns only).
    pub async fn budget_spent(&self, site: &str, day: &str) -> anyhow::Result<i64> {
        use sqlx::Row;
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
