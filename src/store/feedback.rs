//! Visitors' ratings of answers (issue 41): one row per answer, replaced when
//! rated again; read per conversation (history, the console), per day
//! (usage's satisfaction) and in pages (the export).

use std::collections::HashMap;

use sqlx::Row;
use sqlx::any::AnyRow;

use super::Store;
use super::error::StoreResult;
use crate::clock::Millis;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackRow {
    pub message: String,
    pub conversation: String,
    pub site: String,
    /// `up` or `down`.
    pub rating: String,
    pub comment: Option<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

#[derive(Clone, Copy)]
pub struct Feedback<'s>(&'s Store);

impl Store {
    pub fn feedback(&self) -> Feedback<'_> {
        Feedback(self)
    }
}

const COLUMNS: &str = "message, conversation, site, rating, comment, created_at, updated_at";

impl Feedback<'_> {
    /// Records a rating, replacing the answer's earlier one (its first time
    /// stays in `created_at`). Returns the row as stored.
    pub async fn put(self, row: &FeedbackRow) -> StoreResult<FeedbackRow> {
        // The row as this statement left it, not as a racing rating left it.
        let stored = sqlx::query(super::sql(format!(
            "INSERT INTO feedback (message, conversation, site, rating, comment, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6) \
             ON CONFLICT (message) DO UPDATE SET rating = $4, comment = $5, updated_at = $6 \
             RETURNING {COLUMNS}"
        )))
        .bind(&row.message)
        .bind(&row.conversation)
        .bind(&row.site)
        .bind(&row.rating)
        .bind(&row.comment)
        .bind(row.updated_at)
        .fetch_one(self.0.writer())
        .await?;
        Ok(feedback(&stored)?)
    }

    /// The ratings of a conversation's answers, by message.
    pub async fn in_conversation(
        self,
        conversation: &str,
    ) -> StoreResult<HashMap<String, FeedbackRow>> {
        let rows = sqlx::query(super::sql(format!(
            "SELECT {COLUMNS} FROM feedback WHERE conversation = $1"
        )))
        .bind(conversation)
        .fetch_all(self.0.pool())
        .await?;
        rows.iter()
            .map(|r| feedback(r).map(|f| (f.message.clone(), f)))
            .collect::<Result<_, _>>()
            .map_err(Into::into)
    }

    /// Ratings given (or last changed) since `since`, counted by UTC day
    /// number and rating.
    pub async fn per_day(self, site: &str, since: Millis) -> StoreResult<Vec<(i64, String, u64)>> {
        let rows = sqlx::query(
            "SELECT updated_at / 86400000 AS day, rating, COUNT(*) AS n FROM feedback \
             WHERE site = $1 AND updated_at >= $2 GROUP BY updated_at / 86400000, rating",
        )
        .bind(site)
        .bind(since)
        .fetch_all(self.0.pool())
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let n: i64 = r.try_get("n")?;
            out.push((r.try_get("day")?, r.try_get("rating")?, n.max(0) as u64));
        }
        Ok(out)
    }

    /// One page of the export, oldest change first, after the row `after`
    /// (its `updated_at` and message) when given.
    pub async fn page(
        self,
        site: Option<&str>,
        after: Option<&(Millis, String)>,
        limit: i64,
    ) -> StoreResult<Vec<FeedbackRow>> {
        let (at, message) = after.map_or((-1, ""), |(at, m)| (*at, m.as_str()));
        let rows = sqlx::query(super::sql(format!(
            "SELECT {COLUMNS} FROM feedback WHERE ($1 = '' OR site = $1) \
             AND (updated_at > $2 OR (updated_at = $2 AND message > $3)) \
             ORDER BY updated_at, message LIMIT $4"
        )))
        .bind(site.unwrap_or(""))
        .bind(at)
        .bind(message)
        .bind(limit)
        .fetch_all(self.0.pool())
        .await?;
        rows.iter()
            .map(feedback)
            .collect::<Result<_, _>>()
            .map_err(Into::into)
    }
}

fn feedback(r: &AnyRow) -> Result<FeedbackRow, sqlx::Error> {
    Ok(FeedbackRow {
        message: r.try_get("message")?,
        conversation: r.try_get("conversation")?,
        site: r.try_get("site")?,
        rating: r.try_get("rating")?,
        comment: r.try_get("comment")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}
