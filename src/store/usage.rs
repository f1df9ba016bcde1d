//! Usage for the operator console (SPEC §15): per UTC day, questions, tokens,
//! audit events by kind and what the budget was charged; and each answer's
//! tokens in a conversation.

use std::collections::HashMap;

use sqlx::Row;
use sqlx::any::AnyRow;

use super::Store;
use super::error::StoreResult;
use crate::clock::Millis;
use crate::states::Role;

/// The console's usage figures (SPEC §15).
#[derive(Clone, Copy)]
pub struct UsageReads<'s>(&'s Store);

impl Store {
    pub fn usage(&self) -> UsageReads<'_> {
        UsageReads(self)
    }
}

impl UsageReads<'_> {
    /// The tokens each answer of a conversation cost, by message id.
    pub async fn by_message(self, conversation: &str) -> StoreResult<HashMap<String, (i64, i64)>> {
        let rows = sqlx::query(
            "SELECT id, input_tokens, output_tokens FROM messages WHERE conversation = $1 AND role = 'assistant'",
        )
        .bind(conversation)
        .fetch_all(self.0.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("id")?,
                    (r.try_get("input_tokens")?, r.try_get("output_tokens")?),
                ))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// Per UTC day number (days since the epoch) from `since`: visitor
    /// questions, and the tokens answers cost.
    pub async fn turns(
        self,
        site: &str,
        since: Millis,
    ) -> StoreResult<HashMap<i64, (i64, i64, i64)>> {
        let rows = sqlx::query(
            "SELECT m.created_at / 86400000 AS d, \
             CAST(SUM(CASE WHEN m.role = $3 THEN 1 ELSE 0 END) AS BIGINT) AS turns, \
             CAST(SUM(m.input_tokens) AS BIGINT) AS input, CAST(SUM(m.output_tokens) AS BIGINT) AS output \
             FROM conversations c JOIN messages m ON m.conversation = c.id \
             WHERE c.site = $1 AND m.created_at >= $2 GROUP BY m.created_at / 86400000",
        )
        .bind(site)
        .bind(since)
        .bind(Role::Visitor.as_str())
        .fetch_all(self.0.pool())
        .await?;
        let mut days = HashMap::new();
        for r in &rows {
            let day: i64 = r.try_get("d")?;
            days.insert(day, (sum(r, "turns")?, sum(r, "input")?, sum(r, "output")?));
        }
        Ok(days)
    }

    /// Per UTC day number from `since`: audit rows counted by event and policy.
    pub async fn events(
        self,
        site: &str,
        since: Millis,
    ) -> StoreResult<Vec<(i64, String, String, i64)>> {
        let rows = sqlx::query(
            "SELECT at / 86400000 AS d, event, policy, COUNT(*) AS n FROM audit \
             WHERE site = $1 AND at >= $2 GROUP BY at / 86400000, event, policy",
        )
        .bind(site)
        .bind(since)
        .fetch_all(self.0.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("d")?,
                    r.try_get("event")?,
                    r.try_get("policy")?,
                    r.try_get("n")?,
                ))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }
}

/// A sum, which is NULL over no rows.
fn sum(row: &AnyRow, column: &str) -> Result<i64, sqlx::Error> {
    Ok(row.try_get::<Option<i64>, _>(column)?.unwrap_or(0))
}
