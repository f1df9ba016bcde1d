//! The operator console's reads (SPEC §15): conversations and audit rows newest
//! first by keyset (a page costs the same at the end of the table as at its
//! start). Filters add constant SQL fragments; every value from a request is
//! bound. Usage per day is `usage.rs`.

use std::collections::HashMap;

use sqlx::Row;

use super::Conversations;
use crate::clock::Millis;
use crate::states::{CallStatus, MessageStatus, Role};
use crate::store::binds::Binds;
use crate::store::error::StoreResult;
use crate::store::{optional_state, state};

#[derive(Debug, Default)]
pub struct ConversationFilter {
    pub site: Option<String>,
    pub status: Option<MessageStatus>,
    pub pending: bool,
    pub q: Option<String>,
    /// Only conversations before this one (its start and id), for the next page.
    pub before: Option<(Millis, String)>,
    pub limit: i64,
    /// Conversations a word search reads at most (`SEARCH_WINDOW`).
    pub window: i64,
}

#[derive(Debug, Clone)]
pub struct ConversationListRow {
    pub id: String,
    pub site: String,
    pub visitor: String,
    pub user_id: Option<String>,
    pub created_at: Millis,
    /// The latest message: its role, text and time.
    pub last: Option<(Role, String, Millis)>,
    /// The latest message's time and id, which orders messages of one instant.
    last_key: Option<(Millis, String)>,
    /// The status of the latest answer.
    pub status: Option<MessageStatus>,
    /// A card waiting for the visitor: call id, tool, label, expiry.
    pub pending: Option<(String, String, String, Option<Millis>)>,
}

/// Conversations one page of a word search reads at most.
pub const SEARCH_WINDOW: i64 = 5_000;

/// Where a page of conversations starts: its site and its cursor.
fn place_clauses(filter: &ConversationFilter, binds: &mut Binds) -> Vec<String> {
    let mut clauses = Vec::new();
    if let Some(site) = &filter.site {
        clauses.push(format!("c.site = {}", binds.text(site)));
    }
    if let Some((at, id)) = &filter.before {
        let (at1, at2, id) = (binds.int(*at), binds.int(*at), binds.text(id));
        clauses.push(format!(
            "(c.created_at < {at1} OR (c.created_at = {at2} AND c.id < {id}))"
        ));
    }
    clauses
}

/// `LIKE` pattern for a substring, with the wildcards escaped. Both sides go
/// through the database's `LOWER`, so the search ignores case as far as the
/// backend's `LOWER` knows it (ASCII on SQLite, Unicode on PostgreSQL).
fn like_pattern(q: &str) -> String {
    let escaped = q
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    format!("%{escaped}%")
}

impl Conversations<'_> {
    /// One page of conversations, newest first.
    /// With a text search, also the oldest conversation the page looked at when
    /// it stopped at its window (`filter.window`): the next page starts there.
    pub async fn list(
        self,
        filter: &ConversationFilter,
    ) -> StoreResult<(Vec<ConversationListRow>, Option<(Millis, String)>)> {
        let mut binds = Binds::default();
        let mut clauses = place_clauses(filter, &mut binds);
        let words = filter.q.as_deref().map(str::trim).filter(|q| {
            !q.is_empty() && !crate::ids::is_valid("c", q) && !crate::ids::is_valid("v", q)
        });
        // A search for words reads messages, so one page reads at most a window of
        // conversations: a word found nowhere costs one window, not the table.
        let window_end = match words {
            Some(_) => self.window_end(filter).await?,
            None => None,
        };
        if let Some((at, id)) = &window_end {
            let (at1, at2, id) = (binds.int(*at), binds.int(*at), binds.text(id));
            clauses.push(format!(
                "(c.created_at > {at1} OR (c.created_at = {at2} AND c.id >= {id}))"
            ));
        }
        if filter.pending {
            clauses.push(format!(
                "c.id IN (SELECT conversation FROM calls WHERE status = {})",
                binds.text(CallStatus::Pending.as_str())
            ));
        }
        if let Some(status) = filter.status {
            // Rare states are found through the status index first; answered
            // conversations are most of them, so those are checked row by row.
            if status != MessageStatus::Answered {
                clauses.push(format!(
                    "c.id IN (SELECT conversation FROM messages WHERE status = {})",
                    binds.text(status.as_str())
                ));
            }
            clauses.push(format!(
                "(SELECT m.status FROM messages m WHERE m.conversation = c.id AND m.role = {} \
                 ORDER BY m.created_at DESC, m.id DESC LIMIT 1) = {}",
                binds.text(Role::Assistant.as_str()),
                binds.text(status.as_str())
            ));
        }
        if let Some(q) = filter.q.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
            // An id finds its conversations through an index; anything else is a
            // user id or words of the messages, read newest first within the
            // page's window.
            if crate::ids::is_valid("c", q) {
                clauses.push(format!("c.id = {}", binds.text(q)));
            } else if crate::ids::is_valid("v", q) {
                clauses.push(format!("c.visitor = {}", binds.text(q)));
            } else {
                let (user, pattern) = (binds.text(q), binds.text(like_pattern(q)));
                clauses.push(format!(
                    "(v.user_id = {user} OR EXISTS (SELECT 1 FROM messages m \
                     WHERE m.conversation = c.id AND LOWER(m.text) LIKE LOWER({pattern}) ESCAPE '\\'))"
                ));
            }
        }
        let filter_sql = match clauses.is_empty() {
            true => String::new(),
            false => format!("WHERE {}", clauses.join(" AND ")),
        };
        let limit = binds.int(filter.limit);
        let rows = binds
            .fetch(
                self.0,
                format!(
                    "SELECT c.id, c.site, c.visitor, c.created_at, v.user_id FROM conversations c \
                     LEFT JOIN visitors v ON v.id = c.visitor {filter_sql} \
                     ORDER BY c.created_at DESC, c.id DESC LIMIT {limit}"
                ),
            )
            .await?;
        let mut list = rows
            .iter()
            .map(|r| -> Result<_, sqlx::Error> {
                Ok(ConversationListRow {
                    id: r.try_get("id")?,
                    site: r.try_get("site")?,
                    visitor: r.try_get("visitor")?,
                    user_id: r.try_get("user_id")?,
                    created_at: r.try_get("created_at")?,
                    last: None,
                    last_key: None,
                    status: None,
                    pending: None,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.fill_latest(&mut list).await?;
        Ok((list, window_end))
    }

    /// The `window`-th conversation from where the page starts, if the
    /// list goes on that far.
    async fn window_end(
        self,
        filter: &ConversationFilter,
    ) -> StoreResult<Option<(Millis, String)>> {
        let mut binds = Binds::default();
        let clauses = place_clauses(filter, &mut binds);
        let filter_sql = match clauses.is_empty() {
            true => String::new(),
            false => format!("WHERE {}", clauses.join(" AND ")),
        };
        let offset = binds.int(filter.window.max(1) - 1);
        let rows = binds
            .fetch(
                self.0,
                format!(
                    "SELECT c.created_at, c.id FROM conversations c {filter_sql} \
                     ORDER BY c.created_at DESC, c.id DESC LIMIT 1 OFFSET {offset}"
                ),
            )
            .await?;
        Ok(match rows.first() {
            Some(r) => Some((r.try_get("created_at")?, r.try_get("id")?)),
            None => None,
        })
    }

    /// The latest message of each role, and the pending card, of each listed
    /// conversation: two reads for the whole page.
    async fn fill_latest(self, list: &mut [ConversationListRow]) -> StoreResult<()> {
        if list.is_empty() {
            return Ok(());
        }
        let mut binds = Binds::default();
        let ids: Vec<String> = list.iter().map(|c| binds.text(&c.id)).collect();
        let ids = ids.join(", ");
        let latest = binds
            .fetch(
                self.0,
                format!(
                    "SELECT id, conversation, role, text, status, created_at FROM (\
                     SELECT id, conversation, role, text, status, created_at, ROW_NUMBER() OVER \
                     (PARTITION BY conversation, role ORDER BY created_at DESC, id DESC) AS n \
                     FROM messages WHERE conversation IN ({ids})) latest \
                     WHERE n = 1"
                ),
            )
            .await?;
        let mut binds = Binds::default();
        let ids: Vec<String> = list.iter().map(|c| binds.text(&c.id)).collect();
        let pending_status = binds.text(CallStatus::Pending.as_str());
        let pending = binds
            .fetch(
                self.0,
                format!(
                    "SELECT id, conversation, tool, label, expires_at FROM calls \
                     WHERE conversation IN ({}) AND status = {pending_status}",
                    ids.join(", ")
                ),
            )
            .await?;
        let mut by_id: HashMap<String, &mut ConversationListRow> =
            list.iter_mut().map(|c| (c.id.clone(), c)).collect();
        for row in &latest {
            let conversation: String = row.try_get("conversation")?;
            let Some(entry) = by_id.get_mut(&conversation) else {
                continue;
            };
            let role = state(row, "role", Role::parse)?;
            let key: (Millis, String) = (row.try_get("created_at")?, row.try_get("id")?);
            let status = optional_state(row, "status", MessageStatus::parse)?;
            let text: String = row.try_get("text")?;
            if role == Role::Assistant {
                entry.status = status;
            }
            // An answer that has only just begun streaming has no text to show yet.
            let blank = status == Some(MessageStatus::Streaming) && text.is_empty();
            if !blank && entry.last_key.as_ref().is_none_or(|last| key > *last) {
                entry.last = Some((role, text, key.0));
                entry.last_key = Some(key);
            }
        }
        for row in &pending {
            let conversation: String = row.try_get("conversation")?;
            if let Some(entry) = by_id.get_mut(&conversation) {
                entry.pending = Some((
                    row.try_get("id")?,
                    row.try_get("tool")?,
                    row.try_get("label")?,
                    row.try_get("expires_at")?,
                ));
            }
        }
        Ok(())
    }

    /// A conversation's site, visitor, user id and start.
    pub async fn head(
        self,
        id: &str,
    ) -> StoreResult<Option<(String, String, Option<String>, Millis)>> {
        let row = sqlx::query(
            "SELECT c.site, c.visitor, v.user_id, c.created_at FROM conversations c \
             LEFT JOIN visitors v ON v.id = c.visitor WHERE c.id = $1",
        )
        .bind(id)
        .fetch_optional(self.0.pool())
        .await?;
        Ok(row
            .map(|r| -> Result<_, sqlx::Error> {
                Ok((
                    r.try_get("site")?,
                    r.try_get("visitor")?,
                    r.try_get("user_id")?,
                    r.try_get("created_at")?,
                ))
            })
            .transpose()?)
    }
}
