//! The console's changes to a site's tools (SPEC §15): stored overrides that win
//! over the file's values until reset, a per-site version that moves with each
//! change, and the `tool_changed` audit row, all written together.

use sqlx::Row;

use super::audit::{AuditRow, insert};
use super::calls::CallRow;
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
    /// `Some("")`: no rule, whatever the file says.
    pub confirm_when: Option<String>,
    pub operator: String,
    pub changed_at: Millis,
}

/// The console's changes to a site's tools, and their version (SPEC §15).
#[derive(Clone, Copy)]
pub struct ToolOverrides<'s>(&'s Store);

impl Store {
    pub fn tools(&self) -> ToolOverrides<'_> {
        ToolOverrides(self)
    }
}

impl ToolOverrides<'_> {
    /// The version of a site's tool overrides: 0 before any change.
    pub async fn version(self, site: &str) -> StoreResult<i64> {
        let row = sqlx::query("SELECT version FROM tool_versions WHERE site = $1")
            .bind(site)
            .fetch_optional(self.0.pool())
            .await?;
        Ok(match row {
            Some(r) => r.try_get("version")?,
            None => 0,
        })
    }

    /// The site's overrides with the version they belong to, read together.
    pub async fn overrides(self, site: &str) -> StoreResult<(i64, Vec<ToolOverride>)> {
        let mut tx = self.0.pool().begin().await?;
        let version: Option<i64> =
            sqlx::query_scalar("SELECT version FROM tool_versions WHERE site = $1")
                .bind(site)
                .fetch_optional(&mut *tx)
                .await?;
        let rows = sqlx::query(
            "SELECT tool, label, description, policy, confirm_when, operator, changed_at FROM tool_overrides WHERE site = $1",
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
                    confirm_when: r.try_get("confirm_when")?,
                    operator: r.try_get("operator")?,
                    changed_at: r.try_get("changed_at")?,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok((version.unwrap_or(0), overrides))
    }

    /// Applies a console change to a tool, atomically: the fields given replace
    /// the stored ones (merged here, so two changes at once both count), `reset`
    /// removes the override, the site's version moves, every pending card of the
    /// tool is closed as stale, and the `tool_changed` row is written with the
    /// policy that now holds (`file_policy` when nothing overrides it). Returns the
    /// cards closed.
    pub async fn change(
        self,
        change: &ToolEdit<'_>,
        mut audit: AuditRow,
    ) -> StoreResult<Vec<CallRow>> {
        let mut tx = self.0.writer().begin().await?;
        if change.reset {
            sqlx::query("DELETE FROM tool_overrides WHERE site = $1 AND tool = $2")
                .bind(change.site)
                .bind(change.tool)
                .execute(&mut *tx)
                .await?;
        } else {
            sqlx::query(
                "INSERT INTO tool_overrides (site, tool, label, description, policy, operator, changed_at, confirm_when) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (site, tool) DO UPDATE SET \
                 label = COALESCE($3, tool_overrides.label), description = COALESCE($4, tool_overrides.description), \
                 policy = COALESCE($5, tool_overrides.policy), operator = $6, changed_at = $7, \
                 confirm_when = COALESCE($8, tool_overrides.confirm_when)",
            )
            .bind(change.site)
            .bind(change.tool)
            .bind(change.label)
            .bind(change.description)
            .bind(change.policy.map(Policy::as_str))
            .bind(change.operator)
            .bind(change.at)
            .bind(change.confirm_when)
            .execute(&mut *tx)
            .await?;
        }
        let policy = sqlx::query("SELECT policy FROM tool_overrides WHERE site = $1 AND tool = $2")
            .bind(change.site)
            .bind(change.tool)
            .fetch_optional(&mut *tx)
            .await?;
        audit.policy = match policy {
            Some(row) => {
                optional_state(&row, "policy", Policy::parse)?.unwrap_or(change.file_policy)
            }
            None => change.file_policy,
        };
        sqlx::query(
            "INSERT INTO tool_versions (site, version) VALUES ($1, 1) \
             ON CONFLICT (site) DO UPDATE SET version = tool_versions.version + 1",
        )
        .bind(change.site)
        .execute(&mut *tx)
        .await?;
        insert(&mut *tx, &audit).await?;
        let stale = super::cards::stale_in(&mut tx, change.site, change.tool, change.at).await?;
        tx.commit().await?;
        Ok(stale)
    }
}

/// One console change of a tool (`None` fields keep what is stored).
#[derive(Debug, Clone, Copy)]
pub struct ToolEdit<'a> {
    pub site: &'a str,
    pub tool: &'a str,
    pub label: Option<&'a str>,
    pub description: Option<&'a str>,
    pub policy: Option<Policy>,
    /// A new `confirm_when`; `Some("")` turns the rule off.
    pub confirm_when: Option<&'a str>,
    pub reset: bool,
    pub operator: &'a str,
    pub at: Millis,
    /// The file's policy, which holds when no override sets one.
    pub file_policy: Policy,
}
