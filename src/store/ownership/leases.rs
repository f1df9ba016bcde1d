//! Process leases (SPEC §6.5, §16). Every process holds a heartbeat row; the calls
//! it runs and the answers it streams carry its name. When a lease lapses — the
//! process died — one other process claims what it left (in one transaction that
//! deletes the dead lease, so two replicas can never both claim it) and finishes it.

use sqlx::Row;

use super::{Fence, Leases, owned};
use crate::states::MessageStatus;
use crate::store::calls::{COLUMNS, call};
use crate::store::error::StoreResult;
use crate::store::{BudgetShare, CallRow, sql};

/// SQLite: a lock file beside the database that every process using it holds
/// shared for its lifetime; the OS lets go of it when a process dies, however it
/// dies. A start that can take it exclusively knows it is the only live process,
/// so every other lease in the file belongs to a dead one and is claimed at once;
/// a start beside a live process (a second `serve` on the same file, or a test's
/// second app) claims only lapsed leases, like a replica on PostgreSQL.
pub struct FileLock {
    _file: std::fs::File,
    /// This process was the only one when it started.
    pub solo: bool,
}

impl FileLock {
    pub(crate) fn take(url: &str) -> std::io::Result<Option<FileLock>> {
        let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
        let path = rest.split('?').next().unwrap_or_default();
        if path.is_empty() || path == ":memory:" {
            return Ok(None);
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(format!("{path}-lease"))?;
        let solo = file.try_lock().is_ok();
        // Held shared from now on: a later start beside this one cannot take it
        // exclusively. (Converting the lock is not atomic; a start slipping in
        // between would only see this process's new lease, with no work yet.)
        file.lock_shared()?;
        Ok(Some(FileLock { _file: file, solo }))
    }
}

/// What a dead process left, now owned by this one under `fence`.
#[derive(Debug)]
pub struct Claimed {
    /// The fence the claimed work was stamped with: the work that finishes it
    /// writes under this one.
    pub fence: Fence,
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

impl StreamingAnswer {
    /// The budget reservation its turn holds, to settle when it is finished.
    pub fn share(&self) -> Option<BudgetShare> {
        self.budget_day.as_ref().map(|day| BudgetShare {
            site: self.site.clone(),
            day: day.clone(),
            reserved: self.reserved,
            limit: 0,
        })
    }
}

impl Leases<'_> {
    /// Takes or keeps the duty `name` for `hold_ms` (on the database's clock):
    /// true while this process holds it. Another process's hold is taken over only
    /// once it lapsed.
    pub async fn hold_duty(self, name: &str, hold_ms: i64) -> StoreResult<bool> {
        let now = self.0.now_sql();
        let held = sqlx::query(sql(format!(
            "INSERT INTO duties (name, holder, expires_at) VALUES ($1, $2, {now} + $3) \
             ON CONFLICT (name) DO UPDATE SET holder = $2, expires_at = {now} + $3 \
             WHERE duties.holder = $2 OR duties.expires_at < {now}"
        )))
        .bind(name)
        .bind(self.fence().as_str())
        .bind(hold_ms)
        .execute(self.0.writer())
        .await?
        .rows_affected();
        Ok(held == 1)
    }

    /// Claims the work of every process whose lease has lapsed, and of owners with
    /// no lease at all (a process that stopped with work left). `at_start`: a
    /// start that found itself the only process on a SQLite file claims every
    /// other lease, lapsed or not.
    pub async fn claim_dead(self, at_start: bool) -> StoreResult<Claimed> {
        let every_other = at_start && self.0.file_lock.as_ref().is_some_and(|l| l.solo);
        let fence = self.fence();
        let lapsed = match every_other {
            true => "1 = 1".to_string(),
            false => format!("expires_at < {}", self.0.now_sql()),
        };
        let dead = sqlx::query(sql(format!(
            "SELECT owner, 1 AS leased FROM leases WHERE owner <> $1 AND {lapsed} \
             UNION SELECT DISTINCT owner, 0 AS leased FROM calls WHERE owner IS NOT NULL AND owner NOT IN (SELECT owner FROM leases) \
             UNION SELECT DISTINCT owner, 0 AS leased FROM messages WHERE status = $2 AND owner IS NOT NULL AND owner NOT IN (SELECT owner FROM leases)"
        )))
        .bind(fence.as_str())
        .bind(MessageStatus::Streaming.as_str())
        .fetch_all(self.0.writer())
        .await?;
        let mut claimed = Claimed {
            fence,
            calls: Vec::new(),
            answers: Vec::new(),
        };
        for row in dead {
            let owner: String = row.try_get("owner")?;
            let leased: i64 = row.try_get("leased")?;
            if let Err(e) = self.claim(&owner, leased == 1, &lapsed, &mut claimed).await {
                tracing::warn!(
                    error = format!("{e:#}"),
                    owner,
                    "a dead process's work could not be claimed"
                );
            }
        }
        Ok(claimed)
    }

    async fn claim(
        self,
        dead: &str,
        leased: bool,
        lapsed: &str,
        claimed: &mut Claimed,
    ) -> StoreResult<()> {
        let mut tx = self.0.writer().begin().await?;
        // Deleting the lapsed lease is what wins the claim: of two replicas, one
        // deletes it and the other finds nothing to delete.
        if leased {
            let won = sqlx::query(sql(format!(
                "DELETE FROM leases WHERE owner = $1 AND {lapsed}"
            )))
            .bind(dead)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if !won {
                return Ok(());
            }
        }
        let calls = sqlx::query(sql(format!(
            "UPDATE calls SET owner = $1, deliveries = deliveries + 1 WHERE owner = $2 RETURNING {COLUMNS}"
        )))
        .bind(claimed.fence.as_str())
        .bind(dead)
        .fetch_all(&mut *tx)
        .await?;
        let mut calls_claimed = Vec::new();
        for row in &calls {
            calls_claimed.push(call(row)?);
        }
        let ids: Vec<String> = sqlx::query(
            "UPDATE messages SET owner = $1 WHERE owner = $2 AND status = $3 RETURNING id",
        )
        .bind(claimed.fence.as_str())
        .bind(dead)
        .bind(MessageStatus::Streaming.as_str())
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect::<Result<_, _>>()?;
        let mut answers = Vec::new();
        for id in ids {
            let row = sqlx::query(
                "SELECT m.id, m.conversation, m.turn, m.text, m.context, m.budget_day, m.reserved, c.site, c.visitor \
                 FROM messages m JOIN conversations c ON c.id = m.conversation WHERE m.id = $1",
            )
            .bind(&id)
            .fetch_one(&mut *tx)
            .await?;
            answers.push(StreamingAnswer {
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
        if !calls_claimed.is_empty() || !answers.is_empty() {
            tracing::warn!(
                owner = dead,
                calls = calls_claimed.len(),
                answers = answers.len(),
                "claimed the unfinished work of a stopped process"
            );
        }
        claimed.calls.extend(calls_claimed);
        claimed.answers.extend(answers);
        Ok(())
    }

    /// Marks an interrupted answer failed, keeping its saved text, and gives its
    /// budget reservation back (settled to `spent`, an estimate of what it used).
    pub async fn fail_interrupted_answer(
        self,
        answer: &StreamingAnswer,
        spent: i64,
        fence: &Fence,
    ) -> StoreResult<()> {
        self.fail_open_answer(&answer.id, answer.share().as_ref(), spent, fence)
            .await
    }

    /// Marks a streaming answer failed and settles its reservation — both only
    /// if it is still streaming under `fence`, so a reservation is never given
    /// back twice; `TakenOver` when it no longer is. The budget row is written
    /// first, as in every turn's writes (see `Store::decide`).
    pub async fn fail_open_answer(
        self,
        message: &str,
        share: Option<&BudgetShare>,
        spent: i64,
        fence: &Fence,
    ) -> StoreResult<()> {
        let mut tx = self.0.writer().begin().await?;
        if let Some(share) = share {
            crate::store::budget::settle_once(&mut *tx, share, spent, message, fence.as_str())
                .await?;
        }
        let failed = sqlx::query(
            "UPDATE messages SET status = $3 WHERE id = $1 AND status = $4 AND owner = $2",
        )
        .bind(message)
        .bind(fence.as_str())
        .bind(MessageStatus::Failed.as_str())
        .bind(MessageStatus::Streaming.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        // A failure written before under this fence (a commit reported
        // failed that went through) counts as done.
        if failed == 0
            && crate::store::turns::ended_as(&mut tx, message, MessageStatus::Failed, fence).await?
        {
            return Ok(());
        }
        owned(failed)?;
        tx.commit().await?;
        Ok(())
    }

    /// Saves an answer's text so far and, before a tool round, the model transcript
    /// to resume it from: what a crash leaves is then what history shows. Only
    /// while the answer streams under `fence`; else `TakenOver`.
    pub async fn checkpoint(
        self,
        message: &str,
        text: &str,
        context: Option<&str>,
        fence: &Fence,
    ) -> StoreResult<()> {
        let saved = sqlx::query(
            "UPDATE messages SET text = $2, context = COALESCE($3, context) WHERE id = $1 AND status = $4 AND owner = $5",
        )
        .bind(message)
        .bind(text)
        .bind(context)
        .bind(MessageStatus::Streaming.as_str())
        .bind(fence.as_str())
        .execute(self.0.writer())
        .await?
        .rows_affected();
        owned(saved)
    }
}
