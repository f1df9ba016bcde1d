//! A group commit's batch as a handful of statements, whatever its size. Sent job
//! by job, a batch of a hundred turn starts is some three hundred round trips
//! before its commit, and on PostgreSQL those round trips, not the commit, were
//! what a turn waited for. Here the batch's writes are grouped by kind: the budget
//! rows (one statement per row and direction), the answers' final texts, the new
//! conversations, the cards that a new question closes, and the new messages —
//! each one statement for the whole batch.
//!
//! The outcome is the same as running the jobs one after another in the batch's
//! order, ends before starts (the jobs arrived at the same moment, so any order is
//! one they could have had): a budget reservation that would not have passed for
//! every start of its row falls back to reserving one start at a time.

use std::collections::{BTreeMap, HashSet};

use crate::states::{AuditEvent, CallStatus, MessageStatus, Reason};
use crate::store::audit::{self, AuditRow};
use crate::store::calls::{COLUMNS, CallRow, call};
use crate::store::cards::close_card_message;
use crate::store::marks::Marks;
use crate::store::rows::{Kind, Rows, Value};
use crate::store::turns::{TurnEnd, TurnStart};
use crate::store::{Backend, BudgetShare, MessageRow, Reservation, Tx, sql};

type Row<'a> = (&'a str, &'a str);

fn row_of(share: &BudgetShare) -> Row<'_> {
    (share.site.as_str(), share.day.as_str())
}

/// What a batch wrote: each start's reservation, in order, and the answers
/// whose end was saved (an end not among them found its answer no longer
/// streaming under its fence).
pub(in crate::store) struct Written {
    pub reservations: Vec<Reservation>,
    pub ended: HashSet<String>,
}

/// Writes a batch's ends and starts.
pub(in crate::store) async fn write(
    tx: &mut Tx<'_>,
    ends: &[&TurnEnd],
    starts: &[&TurnStart],
) -> Result<Written, sqlx::Error> {
    // An answer ends once; a second end of the same message would find it no
    // longer streaming and change nothing, so it is left out.
    let mut seen = HashSet::new();
    let ends: Vec<&TurnEnd> = ends
        .iter()
        .copied()
        .filter(|e| seen.insert(e.message.as_str()))
        .collect();
    // Budget rows first, in one order (site, then day), settling before reserving.
    let mut rows: BTreeMap<Row<'_>, (Vec<&TurnEnd>, Vec<usize>)> = BTreeMap::new();
    for e in &ends {
        if let Some(b) = &e.budget {
            rows.entry(row_of(b)).or_default().0.push(e);
        }
    }
    for (i, s) in starts.iter().enumerate() {
        if let Some(b) = &s.budget {
            rows.entry(row_of(b)).or_default().1.push(i);
        }
    }
    let mut reservations = vec![Reservation::Reserved; starts.len()];
    for (row, (row_ends, row_starts)) in &rows {
        settle(tx, *row, row_ends).await?;
        let shares: Vec<&BudgetShare> = row_starts
            .iter()
            .filter_map(|&i| starts[i].budget.as_ref())
            .collect();
        for (&i, r) in row_starts.iter().zip(reserve(tx, &shares).await?) {
            reservations[i] = r;
        }
    }
    let mut ended = finish_answers(tx, &ends).await?;
    // An end not saved now may have been saved by an earlier batch whose
    // commit was reported failed: it counts as saved if the answer carries its
    // fence and its status (an answer taken over carries the claimer's fence).
    let unsaved: Vec<&TurnEnd> = ends
        .iter()
        .copied()
        .filter(|e| !ended.contains(&e.message))
        .collect();
    for e in unsaved {
        if crate::store::turns::ended(tx, e).await? {
            ended.insert(e.message.clone());
        }
    }
    let started: Vec<&TurnStart> = starts
        .iter()
        .zip(&reservations)
        .filter(|(_, r)| **r == Reservation::Reserved)
        .map(|(s, _)| *s)
        .collect();
    insert_conversations(tx, &started).await?;
    close_pending_cards(tx, &started).await?;
    let messages: Vec<&MessageRow> = started
        .iter()
        .flat_map(|s| [&s.visitor_message, &s.bubble])
        .collect();
    insert_messages(tx, &messages).await?;
    Ok(Written {
        reservations,
        ended,
    })
}

/// The columns of `settle`'s rows: reserved, spent, message, owner.
const SETTLE: &[Kind; 4] = &[Kind::Int, Kind::Int, Kind::Text, Kind::Text];

/// The statement of `settle` for its `rows`, then the site and the day.
fn settle_text(rows: Rows<4>) -> String {
    let first = rows.taken();
    format!(
        "WITH v (reserved, spent, message, owner) AS ({}), \
         d AS (SELECT COALESCE(SUM(v.reserved), 0) AS reserved, COALESCE(SUM(v.spent), 0) AS spent \
               FROM v JOIN messages m ON m.id = v.message AND m.owner = v.owner AND m.status = '{streaming}' \
               HAVING COUNT(*) > 0) \
         UPDATE budgets SET reserved = budgets.reserved - d.reserved, spent = budgets.spent + d.spent \
         FROM d WHERE budgets.site = {site} AND budgets.day = {day}",
        rows.table(),
        site = Marks::after(first, 1),
        day = Marks::after(first, 2),
        streaming = MessageStatus::Streaming.as_str(),
    )
}

/// Settles the reservations of the ends of one budget row whose answers are still
/// streaming under their owner (see `budgets::settle_once`), in one statement.
async fn settle(tx: &mut Tx<'_>, row: Row<'_>, ends: &[&TurnEnd]) -> Result<(), sqlx::Error> {
    if ends.is_empty() {
        return Ok(());
    }
    let rows = Rows::new(Backend::of(tx), ends.len(), SETTLE);
    let query = sqlx::query(sql(settle_text(rows))).persistent(rows.persistent());
    let values = ends.iter().map(|e| {
        let (reserved, spent) = match &e.budget {
            Some(b) => (b.reserved, crate::budget::spent(e.usage, e.unreported)),
            None => (0, 0),
        };
        [
            Value::from(reserved),
            Value::from(spent),
            Value::from(&e.message),
            Value::from(e.owner.as_str()),
        ]
    });
    let query = rows.bind(query, values).bind(row.0).bind(row.1);
    query.execute(&mut **tx).await?;
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
        out.push(crate::store::budget::reserve_in(tx, share).await?);
    }
    Ok(out)
}

/// The columns of `finish_answers`' rows: id, text, status, citations, input
/// and output tokens, owner.
const FINISH: &[Kind; 7] = &[
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Text,
    Kind::Int,
    Kind::Int,
    Kind::Text,
];

/// The statement of `finish_answers` for its `rows`.
fn finish_text(rows: Rows<7>) -> String {
    format!(
        "WITH v (id, text, status, citations, input_tokens, output_tokens, owner) AS ({}) \
         UPDATE messages SET text = v.text, status = v.status, citations = v.citations, \
         input_tokens = v.input_tokens, output_tokens = v.output_tokens \
         FROM v WHERE messages.id = v.id AND messages.owner = v.owner AND messages.status = '{}' \
         RETURNING messages.id AS id",
        rows.table(),
        MessageStatus::Streaming.as_str(),
    )
}

/// Saves the answers' final texts, only while each is still streaming under its
/// fence (not after another process took it over); returns those saved.
async fn finish_answers(
    tx: &mut Tx<'_>,
    ends: &[&TurnEnd],
) -> Result<HashSet<String>, sqlx::Error> {
    if ends.is_empty() {
        return Ok(HashSet::new());
    }
    let rows = Rows::new(Backend::of(tx), ends.len(), FINISH);
    let query = sqlx::query(sql(finish_text(rows))).persistent(rows.persistent());
    let values = ends.iter().map(|e| {
        [
            Value::from(&e.message),
            Value::from(&e.text),
            Value::from(e.status.as_str()),
            Value::from(&e.citations),
            Value::from(e.usage.input_tokens as i64),
            Value::from(e.usage.output_tokens as i64),
            Value::from(e.owner.as_str()),
        ]
    });
    let rows = rows.bind(query, values).fetch_all(&mut **tx).await?;
    rows.iter()
        .map(|r| sqlx::Row::try_get::<String, _>(r, "id"))
        .collect()
}

/// The columns of a new conversation's row: id, site, visitor, created at.
const CONVERSATIONS: &[Kind; 4] = &[Kind::Text, Kind::Text, Kind::Text, Kind::Int];

async fn insert_conversations(tx: &mut Tx<'_>, starts: &[&TurnStart]) -> Result<(), sqlx::Error> {
    let new: Vec<&&TurnStart> = starts.iter().filter(|s| s.is_new).collect();
    if new.is_empty() {
        return Ok(());
    }
    let rows = Rows::new(Backend::of(tx), new.len(), CONVERSATIONS);
    let text = format!(
        "INSERT INTO conversations (id, site, visitor, created_at) {}",
        rows.table()
    );
    let query = sqlx::query(sql(text)).persistent(rows.persistent());
    let values = new.iter().map(|s| {
        [
            Value::from(&s.conversation),
            Value::from(&s.site),
            Value::from(&s.visitor),
            Value::from(s.now),
        ]
    });
    rows.bind(query, values).execute(&mut **tx).await?;
    Ok(())
}

/// The columns of `close_pending_cards`' rows: conversation, now.
const CLOSE_CARDS: &[Kind; 2] = &[Kind::Text, Kind::Int];

/// The statement of `close_pending_cards` for its `rows`.
fn close_cards_text(rows: Rows<2>) -> String {
    format!(
        "WITH v (v_conversation, v_now) AS ({}) \
         UPDATE calls SET \
         reason = CASE WHEN calls.expires_at <= v.v_now THEN calls.reason ELSE '{superseded}' END, \
         decided_at = CASE WHEN calls.expires_at <= v.v_now THEN calls.expires_at ELSE v.v_now END, \
         status = CASE WHEN calls.expires_at <= v.v_now THEN '{expired}' ELSE '{cancelled}' END \
         FROM v WHERE calls.status = '{pending}' AND calls.conversation = v.v_conversation RETURNING {COLUMNS}",
        rows.table(),
        expired = CallStatus::Expired.as_str(),
        cancelled = CallStatus::Cancelled.as_str(),
        superseded = Reason::Superseded.as_str(),
        pending = CallStatus::Pending.as_str(),
    )
}

/// A new question in a conversation closes its pending card: expired if its time
/// ran out by that question's `now`, else cancelled as superseded — for every
/// continued conversation of the batch in one statement, then an audit row and a
/// closed card message for each card closed (there are seldom any). Of two starts
/// in one conversation, the first closes the card, as it would alone.
async fn close_pending_cards(tx: &mut Tx<'_>, starts: &[&TurnStart]) -> Result<(), sqlx::Error> {
    let mut seen = HashSet::new();
    let continued: Vec<&&TurnStart> = starts
        .iter()
        .filter(|s| !s.is_new && seen.insert(s.conversation.as_str()))
        .collect();
    if continued.is_empty() {
        return Ok(());
    }
    let rows = Rows::new(Backend::of(tx), continued.len(), CLOSE_CARDS);
    let query = sqlx::query(sql(close_cards_text(rows))).persistent(rows.persistent());
    let values = continued
        .iter()
        .map(|s| [Value::from(&s.conversation), Value::from(s.now)]);
    let rows = rows.bind(query, values).fetch_all(&mut **tx).await?;
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

async fn insert_messages(tx: &mut Tx<'_>, messages: &[&MessageRow]) -> Result<(), sqlx::Error> {
    if messages.is_empty() {
        return Ok(());
    }
    let backend = Backend::of(tx);
    crate::store::conversations::insert_messages(&mut **tx, messages, backend).await
}

#[cfg(test)]
mod tests {
    use super::{CLOSE_CARDS, FINISH, SETTLE, close_cards_text, finish_text, settle_text};
    use crate::store::Backend;
    use crate::store::rows::{Kind, Rows};

    /// The `$n` names a statement's text uses.
    fn named(text: &str) -> std::collections::BTreeSet<String> {
        text.match_indices('$')
            .map(|(i, _)| {
                let digits = text[i + 1..].find(|c: char| !c.is_ascii_digit());
                text[i..i + 1 + digits.unwrap_or(text.len() - i - 1)].to_string()
            })
            .collect()
    }

    fn texts(backend: Backend, rows: usize) -> [(String, &'static [Kind], usize); 3] {
        [
            (settle_text(Rows::new(backend, rows, SETTLE)), SETTLE, 2),
            (finish_text(Rows::new(backend, rows, FINISH)), FINISH, 0),
            (
                close_cards_text(Rows::new(backend, rows, CLOSE_CARDS)),
                CLOSE_CARDS,
                0,
            ),
        ]
    }

    /// On SQLite a batch's statements name only their few constants, however
    /// many rows they carry: named parameters cost SQLite and sqlx a walk of
    /// the statement's list of names each (`marks.rs`).
    #[test]
    fn a_batchs_statements_on_sqlite_name_only_their_constants() {
        for rows in [1, 7, 60] {
            for (text, kinds, constants) in texts(Backend::Sqlite, rows) {
                assert_eq!(text.matches('?').count(), rows * kinds.len(), "{text}");
                let expected = (1..=constants)
                    .map(|i| crate::store::marks::Marks::after(rows * kinds.len(), i))
                    .collect();
                assert_eq!(named(&text), expected, "{text}");
            }
        }
    }

    /// On PostgreSQL a batch's statement is the same text whatever the batch's
    /// size, one parameter a column and its constants after them, so that it
    /// is planned once and kept (`rows.rs`).
    #[test]
    fn a_batchs_statements_on_postgres_are_one_text_for_every_size() {
        for ((one, kinds, constants), (many, _, _)) in texts(Backend::Postgres, 1)
            .into_iter()
            .zip(texts(Backend::Postgres, 90))
        {
            assert_eq!(one, many);
            assert!(!one.contains('?'), "{one}");
            let expected = (1..=kinds.len() + constants)
                .map(|i| format!("${i}"))
                .collect();
            assert_eq!(named(&one), expected, "{one}");
        }
        let text = settle_text(Rows::new(Backend::Postgres, 3, SETTLE));
        assert!(
            text.contains("budgets.site = $5 AND budgets.day = $6"),
            "{text}"
        );
    }

    /// The states a batch filters on are in the statements' texts, where a plan
    /// kept for every batch can use the partial index on streaming answers.
    #[test]
    fn the_states_a_batch_filters_on_are_written_into_its_statements() {
        for backend in [Backend::Sqlite, Backend::Postgres] {
            let [(settle, ..), (finish, ..), (cards, ..)] = texts(backend, 2);
            assert!(settle.contains("m.status = 'streaming'"), "{settle}");
            assert!(finish.contains("messages.status = 'streaming'"), "{finish}");
            assert!(cards.contains("calls.status = 'pending'"), "{cards}");
            assert!(
                cards.contains("THEN 'expired' ELSE 'cancelled' END"),
                "{cards}"
            );
            assert!(cards.contains("ELSE 'superseded' END"), "{cards}");
        }
    }
}
