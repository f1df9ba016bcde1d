//! The console's changes to a site's tools (SPEC §15): stored overrides that win
//! over the file's values until reset, a per-site version that moves with each
//! change, and the `tool_changed` audit row, all written together.

use sqlx::Row;

use super::audit::{AuditRow, insert};
use super::error::StoreResult;
use super::{Store, optional_state};
use crate::clock::Millis;
use crate::states::Policy;

/// What the console set for one tool; `None` fields keep the file's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOverride {
    pub tool: String,
    pub label: Option<String>,
    pub description: Option<String>,
    pub policy: Option<Policy>,
    pub operator: String,
    pub changed_at: Millis,
}

impl Store {
    /// The version of a site's tool overrides: 0 before any change.
    pub async fn tool_version(&self, site: &str) -> StoreResult<i64> {
        let row = sqlx::query("SELECT version FROM tool_versions WHERE site = $1")
            .bind(site)
            .fetch_optional(self.pool())
            .await?;
        Ok(match row {
            Some(r) => r.try_get("version")?,
            None => 0,
        })
    }

    /// The site's overrides with the version they belong to, read together.
    pub async fn tool_overrides(&self, site: &str) -> StoreResult<(i64, Vec<ToolOverride>)> {
        let mut tx = self.pool().begin().await?;
        let version: Option<i64> =
            sqlx::query_scalar("SELECT version FROM tool_versions WHERE site = $1")
                .bind(site)
                .fetch_optional(&mut *tx)
                .await?;
        let rows = sqlx::query(
            "SELECT tool, label, description, policy, operator, changed_at FROM tool_overrides WHERE site = $1",
        )
        .bind(site)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let overrides = rows
            .iter()
            .map(|r| -> Result<_, sqlx::Error> {
                Ok(ToolOverride {
                    tool: r.try_get("tool")?,
                    label: r.try_get("label")?,
                    description: r.try_get("description")?,
                    policy: optional_state(r, "policy", Policy::parse)?,
                    operator: r.try_get("operator")?,
                    changed_at: r.try_get("changed_at")?,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok((version.unwrap_or(0), overrides))
    }

    /// Stores a tool's new override (or removes it: `None` resets the tool to
    /// the file), moves the site's version and appends the audit row, atomically.
    pub async fn change_tool(
        &self,
        site: &str,
        tool: &str,
        change: Option<&ToolOverride>,
        audit: &AuditRow,
    ) -> StoreResult<()> {
        let mut tx = self.writer().begin().await?;
        match change {
            Some(o) => {
                sqlx::query(
                    "INSERT INTO tool_overrides (site, tool, label, description, policy, operator, changed_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (site, tool) DO UPDATE SET \
                     label = $3, description = $4, policy = $5, operator = $6, changed_at = $7",
                )
                .bind(site)
                .bind(tool)
                .bind(&o.label)
                .bind(&o.description)
                .bind(o.policy.map(Policy::as_str))
                .bind(&o.operator)
                .bind(o.changed_at)
                .execute(&mut *tx)
                .await?;
            }
            None => {
                sqlx::query("DELETE FROM tool_overrides WHERE site = $1 AND tool = $2")
                    .bind(site)
                    .bind(tool)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        sqlx::query(
            "INSERT INTO tool_versions (site, version) VALUES ($1, 1) \
             ON CONFLICT (site) DO UPDATE SET version = tool_versions.version + 1",
        )
        .bind(site)
        .execute(&mut *tx)
        .await?;
        insert(&mut *tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }
}
