//! The console's words for a site's widget (SPEC §22): per string and
//! language (`*` for every language), replacing the row that was there.

use sqlx::Row;

use super::Store;
use super::error::StoreResult;
use crate::clock::Millis;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringRow {
    pub key: String,
    /// A language code, or `*` for every language.
    pub language: String,
    pub text: String,
    pub operator: String,
    pub changed_at: Millis,
}

#[derive(Clone, Copy)]
pub struct WidgetStrings<'s>(&'s Store);

impl Store {
    pub fn widget_strings(&self) -> WidgetStrings<'_> {
        WidgetStrings(self)
    }
}

impl WidgetStrings<'_> {
    pub async fn of_site(self, site: &str) -> StoreResult<Vec<StringRow>> {
        let rows = sqlx::query(
            "SELECT key, language, text, operator, changed_at FROM widget_strings \
             WHERE site = $1 ORDER BY key, language",
        )
        .bind(site)
        .fetch_all(self.0.pool())
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            out.push(StringRow {
                key: r.try_get("key")?,
                language: r.try_get("language")?,
                text: r.try_get("text")?,
                operator: r.try_get("operator")?,
                changed_at: r.try_get("changed_at")?,
            });
        }
        Ok(out)
    }

    pub async fn set(self, site: &str, row: &StringRow) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO widget_strings (site, key, language, text, operator, changed_at) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (site, key, language) DO UPDATE SET text = $4, operator = $5, changed_at = $6",
        )
        .bind(site)
        .bind(&row.key)
        .bind(&row.language)
        .bind(&row.text)
        .bind(&row.operator)
        .bind(row.changed_at)
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    /// Removes the console's words for `key` in every language: the file's
    /// (or the catalog's) show again.
    pub async fn reset(self, site: &str, key: &str) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM widget_strings WHERE site = $1 AND key = $2")
            .bind(site)
            .bind(key)
            .execute(self.0.writer())
            .await?;
        Ok(done.rows_affected())
    }
}
