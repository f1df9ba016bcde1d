//! The console's reads of the desk: the queue, and the email a visitor left.

use sqlx::Row;

use super::{Desk, Holder};
use crate::clock::Millis;
use crate::store::error::StoreResult;

/// A conversation with a person or waiting for one, as the console's queue
/// lists it.
#[derive(Debug, Clone)]
pub struct QueueRow {
    pub conversation: String,
    pub site: String,
    pub holder: Holder,
    pub since: Millis,
    /// The visitor's messages since the last operator reply (or since it
    /// reached the desk).
    pub unread: i64,
}

impl Desk<'_> {
    /// Every conversation with a person or waiting for one, the longest
    /// waiting first (at most `limit`).
    pub async fn queue(self, limit: i64) -> StoreResult<Vec<QueueRow>> {
        let rows = sqlx::query(
            "SELECT c.id, c.site, c.holder, c.holder_since, \
             (SELECT COUNT(*) FROM messages m WHERE m.conversation = c.id AND m.role = 'visitor' \
               AND m.created_at > COALESCE((SELECT MAX(o.created_at) FROM messages o \
                 WHERE o.conversation = c.id AND o.role = 'operator'), c.holder_since)) AS unread \
             FROM conversations c WHERE c.holder = 'queue' OR c.holder LIKE 'operator:%' \
             ORDER BY CASE WHEN c.holder = 'queue' THEN 0 ELSE 1 END, c.holder_since, c.id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self.0.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let holder: String = r.try_get("holder")?;
                Ok(QueueRow {
                    conversation: r.try_get("id")?,
                    site: r.try_get("site")?,
                    holder: Holder::parse(&holder),
                    since: r.try_get::<Option<i64>, _>("holder_since")?.unwrap_or(0),
                    unread: r.try_get("unread")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// Keeps the email a visitor left for the team.
    pub async fn leave_contact(
        self,
        conversation: &str,
        email: &str,
        now: Millis,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO conversation_contacts (conversation, email, at) VALUES ($1, $2, $3) \
             ON CONFLICT (conversation, at) DO UPDATE SET email = excluded.email",
        )
        .bind(conversation)
        .bind(email)
        .bind(now)
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    /// The latest email a visitor left in a conversation.
    pub async fn contact(self, conversation: &str) -> StoreResult<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT email FROM conversation_contacts WHERE conversation = $1 ORDER BY at DESC LIMIT 1",
        )
        .bind(conversation)
        .fetch_optional(self.0.pool())
        .await?)
    }
}
