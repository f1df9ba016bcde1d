//! The human desk's SQL (SPEC §19): who holds a conversation, the changes of
//! holder with their audit rows, operators' replies, and the visitor's live
//! channel's events, numbered per conversation.
//!
//! Every change of holder is a compare-and-set on the conversation's row, so
//! two operators taking over at once find one winner, and a handoff asked for
//! twice is one handoff. An event's number is taken by incrementing the
//! conversation's `event_seq` in the event's own transaction: that locks the
//! row, so one conversation's events commit in the order of their numbers and a
//! reader that has seen event n never later meets an event below n.

mod queue;
mod wakers;

pub use queue::QueueRow;
pub(in crate::store) use wakers::Wakers;
pub use wakers::Watch;

use sqlx::Row;
use tokio::sync::broadcast;

use crate::clock::Millis;
use crate::store::audit::insert as insert_audit;
use crate::store::conversations::insert_message;
use crate::store::error::StoreResult;
use crate::store::{AuditRow, Backend, MessageRow, Store, Tx};

/// The PostgreSQL channel that carries "this conversation has a new event"
/// between replicas (`desk::notify`): its payload is the conversation's id.
pub const EVENTS_CHANNEL: &str = "deskbell_desk_events";

/// Who holds a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    Assistant,
    /// Waiting for a person.
    Queue,
    /// An operator, by email (never shown to a visitor).
    Operator(String),
}

impl Holder {
    pub fn as_text(&self) -> String {
        match self {
            Holder::Assistant => "assistant".into(),
            Holder::Queue => "queue".into(),
            Holder::Operator(email) => format!("operator:{email}"),
        }
    }

    pub fn parse(text: &str) -> Holder {
        match text.strip_prefix("operator:") {
            Some(email) => Holder::Operator(email.to_string()),
            None if text == "queue" => Holder::Queue,
            // Only the three spellings are written; anything else reads as the
            // assistant, which answers as before the desk existed.
            None => Holder::Assistant,
        }
    }

    /// Whether a person (or the queue waiting for one) has the conversation.
    pub fn is_person(&self) -> bool {
        !matches!(self, Holder::Assistant)
    }
}

/// One event of a visitor's live channel, as stored.
#[derive(Debug, Clone)]
pub struct DeskEvent {
    pub seq: i64,
    /// `message` or `holder`.
    pub kind: String,
    /// The event's JSON.
    pub data: String,
}

/// An event to append: its kind and JSON.
pub struct NewEvent<'a> {
    pub kind: &'static str,
    pub data: &'a str,
}

/// A change of holder with what is written beside it.
pub struct HolderChange<'a> {
    pub conversation: &'a str,
    /// The holder as last read: the change happens only if it still holds.
    pub from: &'a Holder,
    pub to: &'a Holder,
    pub now: Millis,
    /// `handoff` or `released`.
    pub audit: &'a AuditRow,
    /// The visitor's `holder` event.
    pub event: NewEvent<'a>,
    /// A line for history ("Back with the assistant").
    pub note: Option<&'a MessageRow>,
}

/// How a change of holder went.
#[derive(Debug, PartialEq, Eq)]
pub enum Changed {
    /// The holder changed from the one given.
    From(Holder),
    /// Nothing changed: the conversation is held as given (by another
    /// operator, or already by the one asking).
    Held(Holder),
    /// No such conversation.
    Missing,
}

/// The human desk: holders, replies and the visitor's events.
#[derive(Clone, Copy)]
pub struct Desk<'s>(&'s Store);

impl Store {
    pub fn desk(&self) -> Desk<'_> {
        Desk(self)
    }
}

impl Desk<'_> {
    /// The conversation's holder and since when it has held it.
    pub async fn holder(self, conversation: &str) -> StoreResult<Option<(Holder, Option<Millis>)>> {
        let row = sqlx::query("SELECT holder, holder_since FROM conversations WHERE id = $1")
            .bind(conversation)
            .fetch_optional(self.0.pool())
            .await?;
        Ok(row
            .map(|r| -> Result<_, sqlx::Error> {
                let holder: String = r.try_get("holder")?;
                Ok((Holder::parse(&holder), r.try_get("holder_since")?))
            })
            .transpose()?)
    }

    /// Moves the conversation from `from` (as last read) to `to`, with its audit
    /// row and the visitor's `holder` event, in one transaction. A holder that
    /// changed since it was read changes nothing and is reported.
    pub async fn change_holder(self, change: HolderChange<'_>) -> StoreResult<Changed> {
        let HolderChange {
            conversation,
            from,
            to,
            now,
            audit,
            event,
            note,
        } = change;
        let mut tx = self.0.writer().begin().await?;
        let since = match to {
            Holder::Assistant => None,
            _ => Some(now),
        };
        let moved = sqlx::query(
            "UPDATE conversations SET holder = $1, holder_since = $2 WHERE id = $3 AND holder = $4",
        )
        .bind(to.as_text())
        .bind(since)
        .bind(conversation)
        .bind(from.as_text())
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() == 0 {
            drop(tx);
            return Ok(match self.holder(conversation).await? {
                Some((holder, _)) => Changed::Held(holder),
                None => Changed::Missing,
            });
        }
        insert_audit(&mut *tx, audit).await?;
        if let Some(note) = note {
            insert_message(&mut *tx, note).await?;
        }
        self.append_in(&mut tx, conversation, event, now).await?;
        tx.commit().await?;
        self.committed(conversation);
        Ok(Changed::From(from.clone()))
    }

    /// Stores an operator's reply under its display name, with the visitor's
    /// `message` event, only while `holder` holds the conversation.
    pub async fn reply(
        self,
        holder: &Holder,
        message: &MessageRow,
        event: NewEvent<'_>,
    ) -> StoreResult<bool> {
        let mut tx = self.0.writer().begin().await?;
        // The event's number is taken first: it locks the conversation's row, so
        // a release racing this reply waits for it (or this reply for it).
        self.append_in(&mut tx, &message.conversation, event, message.created_at)
            .await?;
        let still = sqlx::query("SELECT 1 FROM conversations WHERE id = $1 AND holder = $2")
            .bind(&message.conversation)
            .bind(holder.as_text())
            .fetch_optional(&mut *tx)
            .await?;
        if still.is_none() {
            return Ok(false);
        }
        insert_message(&mut *tx, message).await?;
        tx.commit().await?;
        self.committed(&message.conversation);
        Ok(true)
    }

    /// Appends an event whatever holds the conversation (a card an operator
    /// cancelled).
    pub async fn append(
        self,
        conversation: &str,
        event: NewEvent<'_>,
        now: Millis,
    ) -> StoreResult<()> {
        let mut tx = self.0.writer().begin().await?;
        self.append_in(&mut tx, conversation, event, now).await?;
        tx.commit().await?;
        self.committed(conversation);
        Ok(())
    }

    /// Appends an event that changes nothing else (an operator typing), only
    /// while `holder` holds the conversation.
    pub async fn note(
        self,
        conversation: &str,
        holder: &Holder,
        event: NewEvent<'_>,
        now: Millis,
    ) -> StoreResult<bool> {
        let mut tx = self.0.writer().begin().await?;
        // The event's number first: it locks the row, so the holder read next
        // cannot change before this commits.
        self.append_in(&mut tx, conversation, event, now).await?;
        let held = sqlx::query("SELECT 1 FROM conversations WHERE id = $1 AND holder = $2")
            .bind(conversation)
            .bind(holder.as_text())
            .fetch_optional(&mut *tx)
            .await?;
        if held.is_none() {
            return Ok(false);
        }
        tx.commit().await?;
        self.committed(conversation);
        Ok(true)
    }

    /// Stores a visitor's message while a person holds the conversation (or it
    /// waits for one). `false`: the conversation is back with the assistant (or
    /// gone), and nothing was stored.
    pub async fn queue_visitor_message(self, message: &MessageRow) -> StoreResult<bool> {
        let mut tx = self.0.writer().begin().await?;
        // The conversation's row is locked first, as a release locks it: a
        // release racing this message either commits before (and the message
        // becomes a question) or waits for it (and the person got it).
        let held = sqlx::query(
            "UPDATE conversations SET event_seq = event_seq WHERE id = $1 AND holder <> 'assistant'",
        )
        .bind(&message.conversation)
        .execute(&mut *tx)
        .await?;
        if held.rows_affected() == 0 {
            return Ok(false);
        }
        insert_message(&mut *tx, message).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Up to `limit` of the conversation's events after number `after`, in order.
    pub async fn events_after(
        self,
        conversation: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<DeskEvent>> {
        let rows = sqlx::query(
            "SELECT seq, kind, data FROM conversation_events WHERE conversation = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(conversation)
        .bind(after)
        .bind(limit)
        .fetch_all(self.0.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(DeskEvent {
                    seq: r.try_get("seq")?,
                    kind: r.try_get("kind")?,
                    data: r.try_get("data")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// This process's wake-ups for new events: a conversation's id after each
    /// commit here, and (`desk::notify`) after each commit anywhere.
    pub fn subscribe(self) -> broadcast::Receiver<String> {
        self.0.desk_events.subscribe()
    }

    /// Wakes this process's readers of a conversation's events (`"*"`: all
    /// of them), and its turns, which watch for changes of holder.
    pub fn wake(self, conversation: &str) {
        match conversation {
            "*" => self.0.desk_wakers.wake_all(),
            one => self.0.desk_wakers.wake(one),
        }
        // No turn listening is the usual case and not an error.
        let _ = self.0.desk_events.send(conversation.to_string());
    }

    /// A live channel's watch on its conversation (`wakers.rs`).
    pub fn watch(self, conversation: &str) -> Watch {
        self.0.desk_wakers.watch(conversation)
    }

    async fn append_in(
        self,
        tx: &mut Tx<'_>,
        conversation: &str,
        event: NewEvent<'_>,
        now: Millis,
    ) -> Result<i64, sqlx::Error> {
        let seq: i64 = sqlx::query_scalar(
            "UPDATE conversations SET event_seq = event_seq + 1 WHERE id = $1 RETURNING event_seq",
        )
        .bind(conversation)
        .fetch_one(&mut **tx)
        .await?;
        sqlx::query(
            "INSERT INTO conversation_events (conversation, seq, kind, data, at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(conversation)
        .bind(seq)
        .bind(event.kind)
        .bind(event.data)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        // PostgreSQL sends a notification only when its transaction commits, so
        // no replica is woken for an event it cannot read yet, and none misses
        // one that committed.
        if self.0.backend == Backend::Postgres {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(EVENTS_CHANNEL)
                .bind(conversation)
                .execute(&mut **tx)
                .await?;
        }
        Ok(seq)
    }

    fn committed(self, conversation: &str) {
        self.wake(conversation);
    }
}
