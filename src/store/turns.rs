//! The writes at the start and the end of a turn, each one transaction: on SQLite
//! every commit is an fsync, and they are what a turn's latency is made of.

use super::calls::{expire_in, supersede_in};
use super::conversations::insert_message;
use super::{MessageRow, Store};
use crate::clock::Millis;
use crate::wire::Usage;

pub struct TurnStart<'a> {
    pub conversation: &'a str,
    /// True when the conversation is created by this turn.
    pub is_new: bool,
    pub site: &'a str,
    pub visitor: &'a str,
    pub now: Millis,
    pub visitor_message: &'a MessageRow,
    pub bubble: &'a MessageRow,
}

/// A turn's reservation of its site's daily budget.
#[derive(Debug, Clone)]
pub struct BudgetShare {
    pub site: String,
    pub day: String,
    /// What the turn reserves (its token cap).
    pub reserved: i64,
    /// The site's daily budget.
    pub limit: i64,
}

impl Store {
    /// Reserves the turn's share of the budget, creates the conversation or closes
    /// its stale and superseded cards, saves the visitor's message and opens the
    /// answer's bubble — one commit. Returns false, changing nothing, when the budget
    /// turned out to be spent.
    pub async fn begin_turn(
        &self,
        t: &TurnStart<'_>,
        budget: Option<&BudgetShare>,
    ) -> anyhow::Result<bool> {
        let mut tx = self.writer().begin().await?;
        if let Some(share) = budget
            && !super::budgets::reserve_in(&mut tx, share).await?
        {
            return Ok(false);
        }
        if t.is_new {
            sqlx::query(
                "INSERT INTO conversations (id, site, visitor, created_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(t.conversation)
            .bind(t.site)
            .bind(t.visitor)
            .bind(t.now)
            .execute(&mut *tx)
            .await?;
        } else {
            expire_in(&mut tx, t.now, Some(t.conversation)).await?;
            supersede_in(&mut tx, t.conversation, t.now).await?;
        }
        insert_message(&mut *tx, t.visitor_message).await?;
        insert_message(&mut *tx, t.bubble).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Saves an answer's final text, status, citations and usage, and settles the
    /// turn's budget reservation to what it spent.
    pub async fn finish_turn(
        &self,
        message: &str,
        text: &str,
        status: &str,
        citations: Option<&str>,
        usage: Usage,
        budget: Option<&BudgetShare>,
    ) -> anyhow::Result<()> {
        let mut tx = self.writer().begin().await?;
        sqlx::query(
            "UPDATE messages SET text = $1, status = $2, citations = $3, input_tokens = $4, output_tokens = $5 WHERE id = $6",
        )
        .bind(text)
        .bind(status)
        .bind(citations)
        .bind(usage.input_tokens as i64)
        .bind(usage.output_tokens as i64)
        .bind(message)
        .execute(&mut *tx)
        .await?;
        if let Some(b) = budget {
            super::budgets::settle(
                &mut *tx,
                b,
                (usage.input_tokens + usage.output_tokens) as i64,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
