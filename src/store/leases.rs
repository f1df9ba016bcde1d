//! Process leases (SPEC §6.5, §16). Every process holds a heartbeat row; the calls
//! it runs and the answers it streams carry its name. When a lease lapses — the
//! process died — one other process claims what it left (in one transaction that
//! deletes the dead lease, so two replicas can never both claim it) and finishes it.

use sqlx::Row;

use super::calls::{COLUMNS, call};
use super::{CallRow, Store, sql};
use crate::clock::Millis;

/// How long a lease holds without renewal.
pub const LEASE_MS: Millis = 15_000;
/// How often a live process renews its lease (and looks for lapsed ones).
pub const RENEW_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// What a dead process left, now owned by this one.
#[derive(Debug, Default)]
pub struct Claimed {
    /// Calls that were running, with `deliveries` already counting the next one.
    pub calls: Vec<CallRow>,
    /// Answers that were streaming.
    pub answers: Vec<StreamingAnswer>,
}

/// An answer that was streaming when its process died.
#[derive(Debug, Clone)]
pub struct StreamingAnswer {
    pub id: String,
    pub conversation: String,
    pub turn: String,
    pub site: String,
    pub visitor: String,
    /// The text saved at its last checkpoint.
    pub text: String,
    /// The model transcript saved before its last tool round, if any.
    pub context: Option<String>,
    /// The budget day and the tokens its turn reserved.
    pub budget_day: Option<String>,
    pub reserved: i64,
}

impl Store {
    /// Takes this process's lease (at start).
    pub async fn take_lease(&self, now: Millis) -> anyhow::Result<()> {
        sqlx::query("INSERT INTO leases (owner, started_at, expires_at) VALUES ($1, $2, $3)")
            .bind(self.owner())
            .bind(now)
            .bind(now + LEASE_MS)
            .execute(self.writer())
            .await?;
        Ok(())
    }

    /// Renews the lease. Returns false if it had lapsed and was claimed by another
    /// process (this one was paused for longer than a lease): the lease is taken
    /// anew, and what it was running has been finished elsewhere.
    pub async fn renew_lease(&self, now: Millis) -> anyhow::Result<bool> {
        let renewed = sqlx::query("UPDATE leases SET expires_at = $2 WHERE owner = $1")
            .bind(self.owner())
            .bind(now + LEASE_MS)
            .execute(self.writer())
            .await?
            .rows_affected();
        if renewed == 0 {
            self.take_lease(now).await?;
        }
        Ok(renewed == 1)
    }

    /// Gives the lease up at a clean shutdown (nothing is left running then).
    pub async fn release_lease(&self) -> anyhow::Result<()> {
        sqlx::query("DELETE FROM leases WHERE owner = $1")
            .bind(self.owner())
            .execute(self.writer())
            .await?;
        Ok(())
    }

    /// Claims the work of every process whose lease has lapsed by `now` — or, with
    /// `every_other`, of every other process (a start on SQLite, where the database
    /// file has one process at a time, so any other lease is a dead one).
    pub async fn claim_dead(&self, now: Millis, every_other: bool) -> anyhow::Result<Claimed> {
        let cutoff = if every_other { Millis::MAX } else { now };
        let dead: Vec<String> =
            sqlx::query("SELECT owner FROM leases WHERE owner <> $1 AND expires_at < $2")
                .bind(self.owner())
                .bind(cutoff)
                .fetch_all(self.writer())
                .await?
                .iter()
                .map(|r| r.try_get("owner"))
                .collect::<Result<_, _>>()?;
        let mut claimed = Claimed::default();
        for owner in dead {
            self.claim(&owner, cutoff, &mut claimed).await?;
        }
        Ok(claimed)
    }

    async fn claim(&self, dead: &str, cutoff: Millis, claimed: &mut Claimed) -> anyhow::Result<()> {
        let mut tx = self.writer().begin().await?;
        let won = sqlx::query("DELETE FROM leases WHERE owner = $1 AND expires_at < $2")
            .bind(dead)
            .bind(cutoff)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        if !won {
            // Another replica claimed it, or it renewed in time.
            return Ok(());
        }
        let calls = sqlx::query(sql(format!(
            "UPDATE calls SET owner = $1, deliveries = deliveries + 1 WHERE owner = $2 RETURNING {COLUMNS}"
        )))
        .bind(self.owner())
        .bind(dead)
        .fetch_all(&mut *tx)
        .await?;
        for row in &calls {
            claimed.calls.push(call(row)?);
        }
        let ids: Vec<String> = sqlx::query(
            "UPDATE messages SET owner = $1 WHERE owner = $2 AND status = 'streaming' RETURNING id",
        )
        .bind(self.owner())
        .bind(dead)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect::<Result<_, _>>()?;
        for id in ids {
            let row = sqlx::query(
                "SELECT m.id, m.conversation, m.turn, m.text, m.context, m.budget_day, m.reserved, c.site, c.visitor \
                 FROM messages m JOIN conversations c ON c.id = m.conversation WHERE m.id = $1",
            )
            .bind(&id)
            .fetch_one(&mut *tx)
            .await?;
            claimed.answers.push(StreamingAnswer {
                id: row.try_get("id")?,
                conversation: row.try_get("conversation")?,
                turn: row.try_get("turn")?,
                site: row.try_get("site")?,
                visitor: row.try_get("visitor")?,
                text: row.try_get("text")?,
                context: row.try_get("context")?,
                budget_day: row.try_get("budget_day")?,
                reserved: row.try_get("reserved")?,
            });
        }
        tx.commit().await?;
        tracing::warn!(
            owner = dead,
            calls = calls.len(),
            "claimed the unfinished work of a stopped process"
        );
        Ok(())
    }

    /// Marks an interrupted answer failed, keeping its saved text, and gives its
    /// budget reservation back (settled to `spent`, an estimate of what it used).
    pub async fn fail_answer(&self, answer: &StreamingAnswer, spent: i64) -> anyhow::Result<()> {
        let mut tx = self.writer().begin().await?;
        if let Some(day) = &answer.budget_day {
            super::budgets::release(&mut *tx, &answer.site, day, answer.reserved, spent).await?;
        }
        sqlx::query("UPDATE messages SET status = 'failed' WHERE id = $1 AND status = 'streaming'")
            .bind(&answer.id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Saves an answer's text so far and, before a tool round, the model transcript
    /// to resume it from: what a crash leaves is then what history shows.
    pub async fn checkpoint(
        &self,
        message: &str,
        text: &str,
        context: Option<&str>,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "UPDATE messages SET text = $2, context = COALESCE($3, context) WHERE id = $1 AND status = 'streaming'",
        )
        .bind(message)
        .bind(text)
        .bind(context)
        .execute(self.writer())
        .await?;
        Ok(())
    }
}
