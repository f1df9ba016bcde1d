//! The daily budgets' SQL (the rules are `budget.rs`): reserving a turn's share
//! in the turn's first transaction, reading what is spent, and settling a
//! reservation exactly once.

mod known;
mod reads;

pub(in crate::store) use known::KnownBudgets;
pub(in crate::store) use reads::SiteReads;

use sqlx::Row;

use crate::budget::{BudgetShare, Reservation, judge};
use crate::clock::Millis;
use crate::states::MessageStatus;
use crate::store::Store;
use crate::store::error::StoreResult;
use reads::Found;

/// How long this replica's read of a site's budget counts for asking the model
/// before a question's own read returns.
const EARLY_READ_MAX_AGE_MS: Millis = 60_000;
/// The room, in turns' shares, that must have been left then: a margin for
/// what other replicas may have reserved since without this replica knowing.
/// Past it, a question is sent to the model and the request dropped at once
/// when its reservation is refused; the budget itself is never overshot.
const EARLY_ROOM_IN_TURNS: i64 = 10;

/// The sites' daily budgets: reading, reserving and what was spent (SPEC §12).
#[derive(Clone, Copy)]
pub struct Budgets<'s>(&'s Store);

impl Store {
    pub fn budget(&self) -> Budgets<'_> {
        Budgets(self)
    }
}

impl Budgets<'_> {
    /// Whether a turn could reserve its share of a site's budget for `day` now (a
    /// read: the reservation itself happens in the turn's first transaction,
    /// `reserve_in`).
    pub async fn open(self, share: &BudgetShare) -> StoreResult<Reservation> {
        let row = sqlx::query("SELECT spent, reserved FROM budgets WHERE site = $1 AND day = $2")
            .bind(&share.site)
            .bind(&share.day)
            .fetch_optional(self.0.pool())
            .await?;
        Ok(match row {
            Some(r) => judge(r.try_get("spent")?, r.try_get("reserved")?, share.limit),
            None => Reservation::Reserved,
        })
    }

    /// What a question's turn reads before it asks the model, in one round trip:
    /// whether its budget share could be reserved now (as `budget_open`) and
    /// the site's tool version (as `tool_version`). Under load each read waits
    /// for a pooled connection, so two reads side by side cost a turn the
    /// slower of two waits; and questions of one site asking at the same moment
    /// share one read that began after they asked (`site_reads.rs`).
    /// `now` is when the question asked, for `may_ask_before_reading`.
    pub async fn and_tool_version(
        self,
        share: &BudgetShare,
        now: Millis,
    ) -> StoreResult<(Reservation, i64)> {
        let read = self
            .0
            .site_reads
            .shared(&share.site, &share.day, || async {
                let known = &self.0.known_budgets;
                let mark = known.before_read(&share.site);
                let found = self.read_with_tool_version(share).await?;
                known.read(&share.site, &share.day, now, found.used(), mark);
                Ok(found)
            })
            .await?;
        let budget = match read.budget {
            Some((spent, reserved)) => judge(spent, reserved, share.limit),
            None => Reservation::Reserved,
        };
        Ok((budget, read.tool_version))
    }

    /// Whether a question may ask the model (and write its start, whose
    /// reservation decides) before its budget read returns
    /// (`ask/turn/head.rs`): only when this replica read the site's budget for
    /// the day within the last minute and, counting what it reserved since,
    /// room for `EARLY_ROOM_IN_TURNS` turns' shares was left. A question then
    /// refused for the budget was sent to the model (and dropped at once) only
    /// if other replicas reserved more than that meanwhile.
    pub fn may_ask_before_reading(self, share: &BudgetShare, now: Millis) -> bool {
        let room = share.reserved.saturating_mul(EARLY_ROOM_IN_TURNS);
        let since = now.saturating_sub(EARLY_READ_MAX_AGE_MS);
        self.0
            .known_budgets
            .used(&share.site, &share.day, since)
            .is_some_and(|used| share.limit.saturating_sub(used) >= room)
    }

    /// A turn of this replica reserved its share.
    pub fn note_reserved(self, share: &BudgetShare) {
        let known = &self.0.known_budgets;
        known.reserved(&share.site, &share.day, share.reserved);
    }

    /// The day's budget row (spent, reserved) if it exists, and the site's tool
    /// version.
    async fn read_with_tool_version(self, share: &BudgetShare) -> StoreResult<Found> {
        let row = sqlx::query(
            "SELECT b.spent, b.reserved, \
             (SELECT version FROM tool_versions WHERE site = $1) AS version \
             FROM (SELECT 1 AS one) AS o LEFT JOIN budgets b ON b.site = $1 AND b.day = $2",
        )
        .bind(&share.site)
        .bind(&share.day)
        .fetch_one(self.0.pool())
        .await?;
        let spent: Option<i64> = row.try_get("spent")?;
        let reserved: Option<i64> = row.try_get("reserved")?;
        let version: Option<i64> = row.try_get("version")?;
        Ok(Found {
            budget: spent.zip(reserved),
            tool_version: version.unwrap_or(0),
        })
    }

    /// Tokens spent by a site on a day (settled turns only).
    pub async fn spent(self, site: &str, day: &str) -> StoreResult<i64> {
        let row = sqlx::query("SELECT spent FROM budgets WHERE site = $1 AND day = $2")
            .bind(site)
            .bind(day)
            .fetch_optional(self.0.pool())
            .await?;
        Ok(match row {
            Some(r) => r.try_get("spent")?,
            None => 0,
        })
    }

    /// What the budget was charged on each day (`YYYY-MM-DD`) from `since_day`.
    pub async fn spent_since(
        self,
        site: &str,
        since_day: &str,
    ) -> StoreResult<std::collections::HashMap<String, i64>> {
        let rows = sqlx::query("SELECT day, spent FROM budgets WHERE site = $1 AND day >= $2")
            .bind(site)
            .bind(since_day)
            .fetch_all(self.0.pool())
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("day")?, r.try_get("spent")?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }
}

/// Reserves a turn's share if any of the budget is left after the other turns'
/// reservations, so the budget is overshot by one turn's cap at the most.
pub(in crate::store) async fn reserve_in(
    tx: &mut crate::store::Tx<'_>,
    share: &BudgetShare,
) -> Result<Reservation, sqlx::Error> {
    // One statement: the day's first turn creates the row with its share, a later
    // one adds its share while the day's budget is not spent. (One round trip
    // fewer per turn, which PostgreSQL's group commit feels.)
    let done = sqlx::query(
        "INSERT INTO budgets (site, day, spent, reserved) SELECT $1, $2, 0, $3 WHERE 0 < $4 \
         ON CONFLICT (site, day) DO UPDATE SET reserved = budgets.reserved + $3 \
         WHERE budgets.spent + budgets.reserved < $4",
    )
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
        .fetch_optional(&mut **tx)
        .await?;
    let (spent, reserved) = match row {
        Some(row) => (row.try_get("spent")?, row.try_get("reserved")?),
        None => (0, 0),
    };
    Ok(match judge(spent, reserved, share.limit) {
        // The row changed between the two statements only on another connection's
        // commit; either way this turn did not reserve.
        Reservation::Reserved => Reservation::Held,
        other => other,
    })
}

/// Settles a turn's reservation to what it spent, only while its answer is still
/// streaming under `owner`: of the answer's final write, its failure and its
/// recovery after a crash, whichever comes first settles it, and only that one.
pub(in crate::store) async fn settle_once<'e, E>(
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
