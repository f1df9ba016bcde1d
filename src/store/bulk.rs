//! A group commit's batch as a handful of statements, whatever its size. Sent job
//! by job, a batch of a hundred turn starts is some three hundred round trips
//! before its commit, and on PostgreSQL those round trips, not the commit, were
//! what a turn waited for. Here the batch's writes are grouped by kind: the budget
//! rows (one statement per row and direction), the answers' final texts, the new
//! conversations, the cards that a new question closes, and the new messages —
//! each one statement for the whole batch.
//!
//! Each statement takes its rows as one JSON array parameter, so its text is the
//! same whatever the batch's size: it is prepared once per connection and kept.
//! With a placeholder per value, every batch was a new statement to parse and
//! plan, which on PostgreSQL took longer than running it, and SQLite looked each
//! of hundreds of numbered parameters up by name.
//!
//! The outcome is the same as running the jobs one after another in the batch's
//! order, ends before starts (the jobs arrived at the same moment, so any order is
//! one they could have had): a budget reservation that would not have passed for
//! every start of its row falls back to reserving one start at a time.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

use super::audit::{self, AuditRow};
use super::calls::{COLUMNS, CallRow, call};
use super::cards::close_card_message;
use super::turns::{TurnEnd, TurnStart};
use super::{Backend, BudgetShare, MessageRow, Reservation, Tx, sql};
use crate::states::{AuditEvent, CallStatus, MessageStatus, Reason};

/// The rows of the JSON array bound as `$1`, as a table `r` whose `r.value` is
/// one row's object (read with `->>`, which both databases have).
fn rows(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => "json_array_elements(CAST($1 AS json)) AS r(value)",
        Backend::Sqlite => "json_each($1) AS r",
    }
}

/// The rows as the JSON text bound as `$1`.
///
/// States a statement filters on are written into its text, not bound: a
/// statement kept prepared may be planned once for any value of its parameters
/// (PostgreSQL's generic plan), and then a partial index such as
/// `messages_streaming` could not be used, leaving a scan of every message.
fn json<T: Serialize>(rows: &[T]) -> Result<String, sqlx::Error> {
    serde_json::to_string(rows).map_err(|e| sqlx::Error::Encode(Box::new(e)))
}

type Row<'a> = (&'a str, &'a str);

fn row_of(share: &BudgetShare) -> Row<'_> {
    (share.site.as_str(), share.day.as_str())
}

/// Writes a batch's ends and starts; returns each start's reservation, in order.
pub(super) async fn write(
    tx: &mut Tx<'_>,
    backend: Backend,
    ends: &[&TurnEnd],
    starts: &[&TurnStart],
) -> Result<Vec<Reservation>, sqlx::Error> {
    // An answer ends once; a second end of the same message would find it no
    // longer streaming and change nothing, so it is left out.
    let mut seen = HashSet::new();
    let ends: Vec<&TurnEnd> = ends
        .iter()
        .copied()
        .filter(|e| seen.insert(e.message.as_str()))
        .collect();
    // Budget rows first, in one order (site, then day), settling before reserving.
    let mut budget_rows: BTreeMap<Row<'_>, (Vec<&TurnEnd>, Vec<usize>)> = BTreeMap::new();
    for e in &ends {
        if let Some(b) = &e.budget {
            budget_rows.entry(row_of(b)).or_default().0.push(e);
        }
    }
    for (i, s) in starts.iter().enumerate() {
        if let Some(b) = &s.budget {
            budget_rows.entry(row_of(b)).or_default().1.push(i);
        }
    }
    let mut reservations = vec![Reservation::Reserved; starts.len()];
    for (row, (row_ends, row_starts)) in &budget_rows {
        settle(tx, backend, *row, row_ends).await?;
        let shares: Vec<&BudgetShare> = row_starts
            .iter()
            .filter_map(|&i| starts[i].budget.as_ref())
            .collect();
        for (&i, r) in row_starts.iter().zip(reserve(tx, &shares).await?) {
            reservations[i] = r;
        }
    }
    finish_answers(tx, backend, &ends).await?;
    let started: Vec<&TurnStart> = starts
        .iter()
        .zip(&reservations)
        .filter(|(_, r)| **r == Reservation::Reserved)
        .map(|(s, _)| *s)
        .collect();
    insert_conversations(tx, backend, &started).await?;
    close_pending_cards(tx, backend, &started).await?;
    let messages: Vec<&MessageRow> = started
        .iter()
        .flat_map(|s| [&s.visitor_message, &s.bubble])
        .collect();
    insert_messages(tx, backend, &messages).await?;
    Ok(reservations)
}

/// One ending answer's share of its budget row, as bound to `settle`.
#[derive(Serialize)]
struct Settled<'a> {
    reserved: i64,
    spent: i64,
    message: &'a str,
    owner: &'a str,
}

/// Settles the reservations of the ends of one budget row whose answers are still
/// streaming under their owner (see `budgets::settle_once`), in one statement.
async fn settle(
    tx: &mut Tx<'_>,
    backend: Backend,
    row: Row<'_>,
    ends: &[&TurnEnd],
) -> Result<(), sqlx::Error> {
    if ends.is_empty() {
        return Ok(());
    }
    let values: Vec<Settled<'_>> = ends
        .iter()
        .map(|e| {
            let (reserved, spent) = match &e.budget {
                Some(b) => (b.reserved, crate::budget::spent(e.usage, e.unreported)),
                None => (0, 0),
            };
            Settled {
                reserved,
                spent,
                message: &e.message,
                owner: &e.owner,
            }
        })
        .collect();
    let text = format!(
        "WITH v AS (SELECT CAST(r.value->>'reserved' AS BIGINT) AS reserved, \
                           CAST(r.value->>'spent' AS BIGINT) AS spent, \
                           r.value->>'message' AS message, r.value->>'owner' AS owner FROM {}), \
         d AS (SELECT COALESCE(SUM(v.reserved), 0) AS reserved, COALESCE(SUM(v.spent), 0) AS spent \
               FROM v JOIN messages m ON m.id = v.message AND m.owner = v.owner AND m.status = '{}' \
               HAVING COUNT(*) > 0) \
         UPDATE budgets SET reserved = budgets.reserved - d.reserved, spent = budgets.spent + d.spent \
         FROM d WHERE budgets.site = $2 AND budgets.day = $3",
        rows(backend),
        MessageStatus::Streaming.as_str()
    );
    sqlx::query(sql(text))
        .bind(json(&values)?)
        .bind(row.0)
        .bind(row.1)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Reserves the shares of one budget row's starts. One statement reserves them
/// all when the last of them would still have passed after the others (the
/// check is monotone, so then every one would have); otherwise they are reserved
/// one at a time, as they would have been alone.
async fn reserve(
    tx: &mut Tx<'_>,
    shares: &[&BudgetShare],
) -> Result<Vec<Reservation>, sqlx::Error> {
    let (Some(first), Some(last)) = (shares.first(), shares.last()) else {
        return Ok(Vec::new());
    };
    let total: i64 = shares.iter().map(|s| s.reserved).sum();
    let before_last = total - last.reserved;
    let one_limit = shares.iter().all(|s| s.limit == first.limit);
    if one_limit {
        let done = sqlx::query(
            "INSERT INTO budgets (site, day, spent, reserved) SELECT $1, $2, 0, $3 WHERE $5 < $4 \
             ON CONFLICT (site, day) DO UPDATE SET reserved = budgets.reserved + $3 \
             WHERE budgets.spent + budgets.reserved + $5 < $4",
        )
        .bind(&first.site)
        .bind(&first.day)
        .bind(total)
        .bind(first.limit)
        .bind(before_last)
        .execute(&mut **tx)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(vec![Reservation::Reserved; shares.len()]);
        }
    }
    let mut out = Vec::with_capacity(shares.len());
    for share in shares {
        out.push(super::budgets::reserve_in(tx, share).await?);
    }
    Ok(out)
}

/// An answer's end, as bound to `finish_answers`.
#[derive(Serialize)]
struct Finished<'a> {
    id: &'a str,
    text: &'a str,
    status: &'a str,
    citations: Option<&'a str>,
    input_tokens: i64,
    output_tokens: i64,
    owner: &'a str,
}

/// Saves the answers' final texts, only while each is still streaming under its
/// owner (not after another process took it over).
async fn finish_answers(
    tx: &mut Tx<'_>,
    backend: Backend,
    ends: &[&TurnEnd],
) -> Result<(), sqlx::Error> {
    if ends.is_empty() {
        return Ok(());
    }
    let values: Vec<Finished<'_>> = ends
        .iter()
        .map(|e| Finished {
            id: &e.message,
            text: &e.text,
            status: e.status.as_str(),
            citations: e.citations.as_deref(),
            input_tokens: e.usage.input_tokens as i64,
            output_tokens: e.usage.output_tokens as i64,
            owner: &e.owner,
        })
        .collect();
    let text = format!(
        "WITH v AS (SELECT r.value->>'id' AS id, r.value->>'text' AS text, r.value->>'status' AS status, \
                           r.value->>'citations' AS citations, \
                           CAST(r.value->>'input_tokens' AS BIGINT) AS input_tokens, \
                           CAST(r.value->>'output_tokens' AS BIGINT) AS output_tokens, \
                           r.value->>'owner' AS owner FROM {}) \
         UPDATE messages SET text = v.text, status = v.status, citations = v.citations, \
         input_tokens = v.input_tokens, output_tokens = v.output_tokens \
         FROM v WHERE messages.id = v.id AND messages.owner = v.owner AND messages.status = '{}'",
        rows(backend),
        MessageStatus::Streaming.as_str()
    );
    sqlx::query(sql(text))
        .bind(json(&values)?)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A new conversation, as bound to `insert_conversations`.
#[derive(Serialize)]
struct NewConversation<'a> {
    id: &'a str,
    site: &'a str,
    visitor: &'a str,
    created_at: i64,
}

async fn insert_conversations(
    tx: &mut Tx<'_>,
    backend: Backend,
    starts: &[&TurnStart],
) -> Result<(), sqlx::Error> {
    let values: Vec<NewConversation<'_>> = starts
        .iter()
        .filter(|s| s.is_new)
        .map(|s| NewConversation {
            id: &s.conversation,
            site: &s.site,
            visitor: &s.visitor,
            created_at: s.now,
        })
        .collect();
    if values.is_empty() {
        return Ok(());
    }
    let text = format!(
        "INSERT INTO conversations (id, site, visitor, created_at) \
         SELECT r.value->>'id', r.value->>'site', r.value->>'visitor', \
                CAST(r.value->>'created_at' AS BIGINT) FROM {}",
        rows(backend)
    );
    sqlx::query(sql(text))
        .bind(json(&values)?)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A continued conversation and its question's time, as bound to
/// `close_pending_cards`.
#[derive(Serialize)]
struct Continued<'a> {
    conversation: &'a str,
    now: i64,
}

/// A new question in a conversation closes its pending card: expired if its time
/// ran out by that question's `now`, else cancelled as superseded — for every
/// continued conversation of the batch in one statement, then an audit row and a
/// closed card message for each card closed (there are seldom any). Of two starts
/// in one conversation, the first closes the card, as it would alone.
async fn close_pending_cards(
    tx: &mut Tx<'_>,
    backend: Backend,
    starts: &[&TurnStart],
) -> Result<(), sqlx::Error> {
    let mut seen = HashSet::new();
    let continued: Vec<&&TurnStart> = starts
        .iter()
        .filter(|s| !s.is_new && seen.insert(s.conversation.as_str()))
        .collect();
    if continued.is_empty() {
        return Ok(());
    }
    let values: Vec<Continued<'_>> = continued
        .iter()
        .map(|s| Continued {
            conversation: &s.conversation,
            now: s.now,
        })
        .collect();
    let text = format!(
        "WITH v AS (SELECT r.value->>'conversation' AS v_conversation, \
                           CAST(r.value->>'now' AS BIGINT) AS v_now FROM {}) \
         UPDATE calls SET \
         reason = CASE WHEN calls.expires_at <= v.v_now THEN calls.reason ELSE $4 END, \
         decided_at = CASE WHEN calls.expires_at <= v.v_now THEN calls.expires_at ELSE v.v_now END, \
         status = CASE WHEN calls.expires_at <= v.v_now THEN $2 ELSE $3 END \
         FROM v WHERE calls.status = '{}' AND calls.conversation = v.v_conversation RETURNING {COLUMNS}",
        rows(backend),
        CallStatus::Pending.as_str()
    );
    let rows = sqlx::query(sql(text))
        .bind(json(&values)?)
        .bind(CallStatus::Expired.as_str())
        .bind(CallStatus::Cancelled.as_str())
        .bind(Reason::Superseded.as_str())
        .fetch_all(&mut **tx)
        .await?;
    let closed: Vec<CallRow> = rows.iter().map(call).collect::<Result<_, _>>()?;
    for c in &closed {
        let now = continued
            .iter()
            .find(|s| s.conversation == c.conversation)
            .map_or(0, |s| s.now);
        let (event, reason, at, counted) = match c.status {
            CallStatus::Expired => (
                AuditEvent::Expired,
                None,
                c.expires_at.unwrap_or(now),
                "expired",
            ),
            _ => (
                AuditEvent::Cancelled,
                Some(Reason::Superseded),
                now,
                "superseded",
            ),
        };
        audit::insert(&mut **tx, &AuditRow::for_call(c, event, reason, at)).await?;
        close_card_message(tx, &c.message).await?;
        // Counted before the batch commits: a batch that fails is run again job
        // by job, which may count a card twice (rare, and only in the metric).
        crate::ops::metrics::confirmation(&c.site, counted);
    }
    Ok(())
}

/// A new message, as bound to `insert_messages`.
#[derive(Serialize)]
struct NewMessage<'a> {
    id: &'a str,
    conversation: &'a str,
    turn: &'a str,
    role: &'a str,
    text: &'a str,
    status: &'a str,
    citations: Option<&'a str>,
    created_at: i64,
    owner: Option<&'a str>,
    budget_day: Option<&'a str>,
    reserved: i64,
}

async fn insert_messages(
    tx: &mut Tx<'_>,
    backend: Backend,
    messages: &[&MessageRow],
) -> Result<(), sqlx::Error> {
    if messages.is_empty() {
        return Ok(());
    }
    let values: Vec<NewMessage<'_>> = messages
        .iter()
        .map(|m| NewMessage {
            id: &m.id,
            conversation: &m.conversation,
            turn: &m.turn,
            role: m.role.as_str(),
            text: &m.text,
            status: m.status.as_str(),
            citations: m.citations.as_deref(),
            created_at: m.created_at,
            owner: m.owner.as_deref(),
            budget_day: m.budget_day.as_deref(),
            reserved: m.reserved,
        })
        .collect();
    let text = format!(
        "INSERT INTO messages (id, conversation, turn, role, text, status, citations, created_at, owner, budget_day, reserved) \
         SELECT r.value->>'id', r.value->>'conversation', r.value->>'turn', r.value->>'role', \
                r.value->>'text', r.value->>'status', r.value->>'citations', \
                CAST(r.value->>'created_at' AS BIGINT), r.value->>'owner', r.value->>'budget_day', \
                CAST(r.value->>'reserved' AS BIGINT) FROM {}",
        rows(backend)
    );
    sqlx::query(sql(text))
        .bind(json(&values)?)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
