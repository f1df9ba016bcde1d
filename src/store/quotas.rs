//! Quota uses (SPEC §20), counted in the transaction that stores the call: one
//! conditional upsert per use, so on PostgreSQL the row's lock orders racing
//! calls of any replica, and on SQLite the one writer does. A use is given back
//! in the transaction that closes a card without running it (cancelled,
//! expired, stale, superseded by a new question); a call that ran keeps its
//! use whatever its outcome, since the backend may have acted.

use sqlx::Row;

use super::error::StoreResult;
use super::{Store, Tx};

/// One use of a tool's quota, held by a call: who it counts for, in which UTC
/// day or month, and what the card showed of what is left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaUse {
    pub subject: String,
    pub period: String,
    /// JSON `{"left", "max", "window"}`, once counted.
    pub note: Option<String>,
}

/// A use held by a call of `tool` on `site`.
pub(super) struct Held<'a> {
    pub site: &'a str,
    pub tool: &'a str,
    pub quota: &'a QuotaUse,
}

/// Counts one use for `held` unless `max` are counted already: the uses
/// counted now, this one included, or `None`.
pub(super) async fn count_in(
    tx: &mut Tx<'_>,
    held: Held<'_>,
    max: u32,
) -> Result<Option<u32>, sqlx::Error> {
    let Held { site, tool, quota } = held;
    let row = sqlx::query(
        "INSERT INTO quota_uses (site, tool, subject, period, used) VALUES ($1, $2, $3, $4, 1) \
         ON CONFLICT (site, tool, subject, period) DO UPDATE SET used = quota_uses.used + 1 \
         WHERE quota_uses.used < $5 RETURNING used",
    )
    .bind(site)
    .bind(tool)
    .bind(&quota.subject)
    .bind(&quota.period)
    .bind(i64::from(max))
    .fetch_optional(&mut **tx)
    .await?;
    match row {
        Some(r) => Ok(Some(
            u32::try_from(r.try_get::<i64, _>("used")?).unwrap_or(u32::MAX),
        )),
        None => Ok(None),
    }
}

/// Gives back uses held by calls whose cards closed without running.
pub(super) async fn give_back_in<'a>(
    tx: &mut Tx<'_>,
    held: impl IntoIterator<Item = Held<'a>>,
) -> Result<(), sqlx::Error> {
    for Held { site, tool, quota } in held {
        sqlx::query(
            "UPDATE quota_uses SET used = used - 1 \
             WHERE site = $1 AND tool = $2 AND subject = $3 AND period = $4 AND used > 0",
        )
        .bind(site)
        .bind(tool)
        .bind(&quota.subject)
        .bind(&quota.period)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// One counted quota, for the console's usage view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaCount {
    pub tool: String,
    pub subject: String,
    pub period: String,
    pub used: i64,
}

/// Quota uses (SPEC §20).
#[derive(Clone, Copy)]
pub struct Quotas<'s>(&'s Store);

impl Store {
    pub fn quotas(&self) -> Quotas<'_> {
        Quotas(self)
    }
}

impl Quotas<'_> {
    /// A site's counts in the periods given (such as this day and this month),
    /// most used first, at most `limit`.
    pub async fn of_site(
        self,
        site: &str,
        periods: &[String],
        limit: i64,
    ) -> StoreResult<Vec<QuotaCount>> {
        let mut out = Vec::new();
        for period in periods {
            let rows = sqlx::query(
                "SELECT tool, subject, period, used FROM quota_uses WHERE site = $1 AND period = $2 AND used > 0 \
                 ORDER BY used DESC, tool, subject LIMIT $3",
            )
            .bind(site)
            .bind(period)
            .bind(limit)
            .fetch_all(self.0.pool())
            .await?;
            for r in &rows {
                out.push(QuotaCount {
                    tool: r.try_get("tool")?,
                    subject: r.try_get("subject")?,
                    period: r.try_get("period")?,
                    used: r.try_get("used")?,
                });
            }
        }
        Ok(out)
    }
}
