mod list;

pub use list::{ConversationFilter, ConversationListRow, SEARCH_WINDOW};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::clock::Millis;
use crate::states::{MessageStatus, Role};
use crate::store::error::StoreResult;
use crate::store::marks::Marks;
use crate::store::rows::{Kind, Rows, Value};
use crate::store::{Backend, Store, state};
use crate::wire::Usage;

/// The status of an assistant message while its answer is still streaming. It is
/// internal: history leaves such messages out, and a start after a crash marks
/// them failed.
pub const STREAMING: MessageStatus = MessageStatus::Streaming;

#[derive(Debug, Clone)]
pub struct MessageRow {
    pub id: String,
    pub conversation: String,
    pub turn: String,
    pub role: Role,
    pub text: String,
    pub status: MessageStatus,
    pub citations: Option<String>,
    pub created_at: Millis,
    /// For an answer: the process streaming it (see `leases.rs`).
    pub owner: Option<String>,
    /// For an answer: the budget day and the tokens its turn reserved, so that a
    /// crash can give them back.
    pub budget_day: Option<String>,
    pub reserved: i64,
    /// For an operator's reply: the display name it was written under.
    pub author: Option<String>,
}

/// The messages table's columns a new message fills, in the order of
/// `message_values`.
const MESSAGE_COLUMNS: &str = "id, conversation, turn, role, text, status, citations, created_at, owner, budget_day, reserved, author";
/// The kinds of `MESSAGE_COLUMNS`, for PostgreSQL's arrays.
const MESSAGE_KINDS: &[Kind; 12] = &[
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Int,
    Kind::Text,
    Kind::Text,
    Kind::Int,
    Kind::Text,
];

/// A new message's values, in `MESSAGE_COLUMNS`' order.
fn message_values(m: &MessageRow) -> [Value<'_>; 12] {
    [
        Value::from(&m.id),
        Value::from(&m.conversation),
        Value::from(&m.turn),
        Value::from(m.role.as_str()),
        Value::from(&m.text),
        Value::from(m.status.as_str()),
        Value::from(&m.citations),
        Value::from(m.created_at),
        Value::from(&m.owner),
        Value::from(&m.budget_day),
        Value::from(m.reserved),
        Value::from(&m.author),
    ]
}

/// Inserts one message with numbered marks, which both databases take, for
/// callers that do not know which one they write to.
pub(in crate::store) async fn insert_message<'e, E>(
    executor: E,
    m: &MessageRow,
) -> Result<(), sqlx::Error>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let text = format!(
        "INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES {}",
        Marks::Numbered.rows(1, MESSAGE_KINDS.len())
    );
    let mut query = sqlx::query(crate::store::sql(text));
    for value in message_values(m) {
        query = value.bind(query);
    }
    query.execute(executor).await?;
    Ok(())
}

/// Inserts several messages with one statement, written for `backend`
/// (`rows.rs`).
pub(in crate::store) async fn insert_messages<'e, E>(
    executor: E,
    messages: &[&MessageRow],
    backend: Backend,
) -> Result<(), sqlx::Error>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let rows = Rows::new(backend, messages.len(), MESSAGE_KINDS);
    let text = format!("INSERT INTO messages ({MESSAGE_COLUMNS}) {}", rows.table());
    // On SQLite the text grows with the batch: kept out of the connection's
    // statement cache but for the usual one and two rows.
    let persistent = rows.persistent() || messages.len() <= 2;
    let query = sqlx::query(crate::store::sql(text)).persistent(persistent);
    let values = messages.iter().map(|m| message_values(m));
    rows.bind(query, values).execute(executor).await?;
    Ok(())
}

fn message(row: &AnyRow) -> Result<MessageRow, sqlx::Error> {
    Ok(MessageRow {
        id: row.try_get("id")?,
        conversation: row.try_get("conversation")?,
        turn: row.try_get("turn")?,
        role: state(row, "role", Role::parse)?,
        text: row.try_get("text")?,
        status: state(row, "status", MessageStatus::parse)?,
        citations: row.try_get("citations")?,
        created_at: row.try_get("created_at")?,
        owner: None,
        budget_day: None,
        reserved: 0,
        author: row.try_get("author")?,
    })
}

/// Conversations and their messages, and the console's lists of them.
#[derive(Clone, Copy)]
pub struct Conversations<'s>(&'s Store);

impl Store {
    pub fn conversations(&self) -> Conversations<'_> {
        Conversations(self)
    }
}

impl Conversations<'_> {
    /// The site and visitor a conversation belongs to.
    /// A conversation's site, visitor and holder (as stored: `store::desk`'s
    /// `Holder::parse` reads it), in the one read every visitor call makes.
    pub async fn owner(self, id: &str) -> StoreResult<Option<(String, String, String)>> {
        let row = sqlx::query("SELECT site, visitor, holder FROM conversations WHERE id = $1")
            .bind(id)
            .fetch_optional(self.0.pool())
            .await?;
        Ok(match row {
            Some(row) => Some((
                row.try_get("site")?,
                row.try_get("visitor")?,
                row.try_get("holder")?,
            )),
            None => None,
        })
    }

    pub async fn insert_message(self, m: &MessageRow) -> StoreResult<()> {
        insert_message(self.0.writer(), m).await?;
        Ok(())
    }

    /// The messages of a conversation in order, without those still streaming.
    pub async fn messages(self, conversation: &str) -> StoreResult<Vec<MessageRow>> {
        let rows = sqlx::query(
            "SELECT id, conversation, turn, role, text, status, citations, created_at, author FROM messages \
             WHERE conversation = $1 AND status <> $2 ORDER BY created_at, id",
        )
        .bind(conversation)
        .bind(STREAMING.as_str())
        .fetch_all(self.0.pool())
        .await?;
        Ok(rows.iter().map(message).collect::<Result<_, _>>()?)
    }

    /// The last `limit` messages of a conversation in order (for the model's context:
    /// a long conversation is not read whole for every turn).
    pub async fn last_messages(
        self,
        conversation: &str,
        limit: i64,
    ) -> StoreResult<Vec<MessageRow>> {
        let rows = sqlx::query(
            "SELECT id, conversation, turn, role, text, status, citations, created_at, author FROM messages \
             WHERE conversation = $1 AND status <> $2 ORDER BY created_at DESC, id DESC LIMIT $3",
        )
        .bind(conversation)
        .bind(STREAMING.as_str())
        .bind(limit)
        .fetch_all(self.0.pool())
        .await?;
        let mut messages: Vec<MessageRow> = rows.iter().map(message).collect::<Result<_, _>>()?;
        messages.reverse();
        Ok(messages)
    }

    /// Marks answers left streaming by a version without leases (no owner) as
    /// failed, so that they show in history instead of vanishing. Answers with an
    /// owner are recovered through its lease (`leases.rs`).
    /// Only messages started before `before` are touched.
    pub async fn fail_interrupted(self, before: Millis) -> StoreResult<u64> {
        let done = sqlx::query(
            "UPDATE messages SET status = $3 WHERE status = $1 AND created_at < $2 AND owner IS NULL",
        )
        .bind(STREAMING.as_str())
        .bind(before)
        .bind(MessageStatus::Failed.as_str())
        .execute(self.0.writer())
        .await?;
        Ok(done.rows_affected())
    }

    /// Tokens an assistant message used (for tests and budgets).
    pub async fn message_usage(self, id: &str) -> StoreResult<Option<Usage>> {
        let row = sqlx::query("SELECT input_tokens, output_tokens FROM messages WHERE id = $1")
            .bind(id)
            .fetch_optional(self.0.pool())
            .await?;
        Ok(match row {
            Some(row) => Some(Usage {
                input_tokens: row.try_get::<i64, _>("input_tokens")?.max(0) as u64,
                output_tokens: row.try_get::<i64, _>("output_tokens")?.max(0) as u64,
            }),
            None => None,
        })
    }
}
