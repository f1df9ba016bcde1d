//! The append-only audit table (SPEC §10). Rows are only ever inserted; the
//! migrations add triggers that make the database refuse updates and deletes.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::binds::Binds;
use super::error::StoreResult;
use super::{Store, optional_state, sql, state};
use crate::clock::Millis;
use crate::ids::new_id;
use crate::states::{AuditEvent, Policy, Reason};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub at: Millis,
    pub event: AuditEvent,
    pub reason: Option<Reason>,
    pub call: String,
    pub site: String,
    pub conversation: String,
    pub visitor: String,
    pub tool: String,
    pub policy: Policy,
    /// Canonical JSON (RFC 8785) of the call's arguments.
    pub arguments: String,
    pub http_status: Option<i64>,
    pub duration_ms: Option<i64>,
    /// The operator behind a `tool_changed` row; `None` on call rows.
    pub operator: Option<String>,
    /// On a `requested` row: the `confirm_when` that decided the call's gate.
    pub rule: Option<String>,
}

/// Inserts one audit row with any executor, so it can join a transaction.
pub(in crate::store) async fn insert<'e, E>(executor: E, row: &AuditRow) -> Result<(), sqlx::Error>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    sqlx::query(
        "INSERT INTO audit (id, at, event, reason, call, site, conversation, visitor, tool, policy, arguments, http_status, duration_ms, operator, rule) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
    )
    .bind(new_id("a"))
    .bind(row.at)
    .bind(row.event.as_str())
    .bind(row.reason.map(Reason::as_str))
    .bind(&row.call)
    .bind(&row.site)
    .bind(&row.conversation)
    .bind(&row.visitor)
    .bind(&row.tool)
    .bind(row.policy.as_str())
    .bind(&row.arguments)
    .bind(row.http_status)
    .bind(row.duration_ms)
    .bind(&row.operator)
    .bind(&row.rule)
    .execute(executor)
    .await?;
    Ok(())
}

pub(super) fn audit_row(row: &AnyRow) -> Result<AuditRow, sqlx::Error> {
    Ok(AuditRow {
        at: row.try_get("at")?,
        event: state(row, "event", AuditEvent::parse)?,
        reason: optional_state(row, "reason", Reason::parse)?,
        call: row.try_get("call")?,
        site: row.try_get("site")?,
        conversation: row.try_get("conversation")?,
        visitor: row.try_get("visitor")?,
        tool: row.try_get("tool")?,
        policy: state(row, "policy", Policy::parse)?,
        arguments: row.try_get("arguments")?,
        http_status: row.try_get("http_status")?,
        duration_ms: row.try_get("duration_ms")?,
        operator: row.try_get("operator")?,
        rule: row.try_get("rule")?,
    })
}

pub(super) const SELECT_COLUMNS: &str = "at, event, reason, call, site, conversation, visitor, tool, policy, arguments, http_status, duration_ms, operator, rule";

/// The append-only audit table (SPEC §10).
#[derive(Clone, Copy)]
pub struct Audit<'s>(&'s Store);

impl Store {
    pub fn audit(&self) -> Audit<'_> {
        Audit(self)
    }
}

impl Audit<'_> {
    pub async fn append(self, row: &AuditRow) -> StoreResult<()> {
        insert(self.0.writer(), row).await?;
        Ok(())
    }

    /// Up to `limit` audit rows after `after` (a row's time and id), oldest first,
    /// optionally of one site, with the id of each: an export walks the table a
    /// page at a time, so its memory does not grow with the table.
    pub async fn page(
        self,
        site: Option<&str>,
        after: Option<(Millis, String)>,
        limit: i64,
    ) -> StoreResult<Vec<(String, AuditRow)>> {
        let (at, id) = after.unwrap_or((Millis::MIN, String::new()));
        let rows = sqlx::query(
            "SELECT id, at, event, reason, call, site, conversation, visitor, tool, policy, arguments, http_status, duration_ms, operator, rule \
             FROM audit WHERE ($1 = '' OR site = $1) AND (at > $2 OR (at = $2 AND id > $3)) ORDER BY at, id LIMIT $4",
        )
        .bind(site.unwrap_or(""))
        .bind(at)
        .bind(id)
        .bind(limit)
        .fetch_all(self.0.pool())
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, audit_row(r)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// The audit rows of one call, oldest first.
    pub async fn for_call(self, call: &str) -> StoreResult<Vec<AuditRow>> {
        let rows = sqlx::query(sql(format!(
            "SELECT {SELECT_COLUMNS} FROM audit WHERE call = $1 ORDER BY at, id"
        )))
        .bind(call)
        .fetch_all(self.0.pool())
        .await?;
        Ok(rows.iter().map(audit_row).collect::<Result<_, _>>()?)
    }

    /// One page of audit rows, newest first.
    pub async fn filtered(self, filter: &AuditFilter) -> StoreResult<Vec<(String, AuditRow)>> {
        let mut binds = Binds::default();
        let mut clauses = Vec::new();
        let text_filters = [
            ("site", &filter.site),
            ("event", &filter.event),
            ("tool", &filter.tool),
            ("call", &filter.call),
        ];
        for (column, value) in text_filters {
            if let Some(value) = value {
                clauses.push(format!("{column} = {}", binds.text(value)));
            }
        }
        if let Some(after) = filter.after {
            clauses.push(format!("at >= {}", binds.int(after)));
        }
        if let Some(before) = filter.before {
            clauses.push(format!("at < {}", binds.int(before)));
        }
        if let Some((at, id)) = &filter.cursor {
            let (at1, at2, id) = (binds.int(*at), binds.int(*at), binds.text(id));
            clauses.push(format!("(at < {at1} OR (at = {at2} AND id < {id}))"));
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
                    "SELECT id, {SELECT_COLUMNS} FROM audit {filter_sql} ORDER BY at DESC, id DESC LIMIT {limit}"
                ),
            )
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, audit_row(r)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }
}

#[derive(Debug, Default)]
pub struct AuditFilter {
    pub site: Option<String>,
    pub event: Option<String>,
    pub tool: Option<String>,
    pub call: Option<String>,
    pub after: Option<Millis>,
    pub before: Option<Millis>,
    pub cursor: Option<(Millis, String)>,
    pub limit: i64,
}
