use sqlx::Row;

use super::Store;
use super::error::StoreResult;
use crate::clock::Millis;
use crate::ids::new_id;

/// Visitors and the user ids they are signed in as (SPEC §4).
#[derive(Clone, Copy)]
pub struct Visitors<'s>(&'s Store);

impl Store {
    pub fn visitors(&self) -> Visitors<'_> {
        Visitors(self)
    }
}

impl Visitors<'_> {
    /// A new anonymous visitor of a site.
    pub async fn create(self, site: &str, now: Millis) -> StoreResult<String> {
        let id = new_id("v");
        sqlx::query(
            "INSERT INTO visitors (id, site, user_id, created_at) VALUES ($1, $2, NULL, $3)",
        )
        .bind(&id)
        .bind(site)
        .bind(now)
        .execute(self.0.writer())
        .await?;
        Ok(id)
    }

    /// The visitor bound to a verified user of a site, created on first use. Two
    /// devices racing here get the same visitor: the primary key decides.
    pub async fn for_user(self, site: &str, user_id: &str, now: Millis) -> StoreResult<String> {
        let candidate = new_id("v");
        let mut tx = self.0.writer().begin().await?;
        let inserted = sqlx::query("INSERT INTO identities (site, user_id, visitor) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING")
            .bind(site)
            .bind(user_id)
            .bind(&candidate)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if inserted == 1 {
            sqlx::query(
                "INSERT INTO visitors (id, site, user_id, created_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(&candidate)
            .bind(site)
            .bind(user_id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        let row = sqlx::query("SELECT visitor FROM identities WHERE site = $1 AND user_id = $2")
            .bind(site)
            .bind(user_id)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(row.try_get("visitor")?)
    }

    /// The verified user id a visitor is bound to, if any.
    pub async fn user(self, visitor: &str) -> StoreResult<Option<String>> {
        let row = sqlx::query("SELECT user_id FROM visitors WHERE id = $1")
            .bind(visitor)
            .fetch_optional(self.0.pool())
            .await?;
        Ok(match row {
            Some(row) => row.try_get("user_id")?,
            None => None,
        })
    }
}
