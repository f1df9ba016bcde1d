//! Each site's knowledge documents and their version (SPEC §16): written by an
//! ingest on any replica, read by every replica to bring its own index up to date.

use std::collections::HashMap;

use sqlx::Row;

use super::Store;
use super::error::StoreResult;
use crate::knowledge::Document;

/// The knowledge documents a site answers from, and their version.
#[derive(Clone, Copy)]
pub struct Documents<'s>(&'s Store);

impl Store {
    pub fn knowledge(&self) -> Documents<'_> {
        Documents(self)
    }
}

impl Documents<'_> {
    pub async fn version(self, site: &str) -> StoreResult<i64> {
        let version: Option<i64> =
            sqlx::query_scalar("SELECT version FROM knowledge_versions WHERE site = $1")
                .bind(site)
                .fetch_optional(self.0.pool())
                .await?;
        Ok(version.unwrap_or(0))
    }

    /// Replaces a site's documents with `documents`, writing only what changed,
    /// and moves its version when anything did. Returns the version now.
    pub async fn save(self, site: &str, documents: &[Document]) -> StoreResult<i64> {
        let mut tx = self.0.writer().begin().await?;
        // A write first, so the transaction holds the write lock before it
        // reads: on SQLite a transaction that reads first and writes after
        // another process (a second replica, a `deskbell ingest`) committed
        // fails with "database is locked" (SQLITE_BUSY_SNAPSHOT) instead of
        // waiting. (A version row of 0 reads as "no knowledge yet", as none.)
        sqlx::query(
            "INSERT INTO knowledge_versions (site, version) VALUES ($1, 0) ON CONFLICT (site) DO NOTHING",
        )
        .bind(site)
        .execute(&mut *tx)
        .await?;
        let rows = sqlx::query("SELECT path, hash FROM knowledge_documents WHERE site = $1")
            .bind(site)
            .fetch_all(&mut *tx)
            .await?;
        let mut stored: HashMap<String, String> = rows
            .iter()
            .map(|r| Ok((r.try_get("path")?, r.try_get("hash")?)))
            .collect::<Result<_, sqlx::Error>>()?;
        let mut changed = false;
        for d in documents {
            if stored.remove(&d.path).is_some_and(|hash| hash == d.hash) {
                continue;
            }
            changed = true;
            sqlx::query(
                "INSERT INTO knowledge_documents (site, path, title, url, text, hash) VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (site, path) DO UPDATE SET title = $3, url = $4, text = $5, hash = $6",
            )
            .bind(site)
            .bind(&d.path)
            .bind(&d.title)
            .bind(&d.url)
            .bind(&d.text)
            .bind(&d.hash)
            .execute(&mut *tx)
            .await?;
        }
        // What is left was not read this time: it is gone from the sources.
        for path in stored.keys() {
            changed = true;
            sqlx::query("DELETE FROM knowledge_documents WHERE site = $1 AND path = $2")
                .bind(site)
                .bind(path)
                .execute(&mut *tx)
                .await?;
        }
        if changed {
            sqlx::query(
                "INSERT INTO knowledge_versions (site, version) VALUES ($1, 1) \
                 ON CONFLICT (site) DO UPDATE SET version = knowledge_versions.version + 1",
            )
            .bind(site)
            .execute(&mut *tx)
            .await?;
        }
        let version: Option<i64> =
            sqlx::query_scalar("SELECT version FROM knowledge_versions WHERE site = $1")
                .bind(site)
                .fetch_optional(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(version.unwrap_or(0))
    }

    /// A site's documents with the version they belong to.
    pub async fn documents(self, site: &str) -> StoreResult<(i64, Vec<Document>)> {
        let mut tx = self.0.pool().begin().await?;
        let version: Option<i64> =
            sqlx::query_scalar("SELECT version FROM knowledge_versions WHERE site = $1")
                .bind(site)
                .fetch_optional(&mut *tx)
                .await?;
        let rows = sqlx::query(
            "SELECT path, title, url, text, hash FROM knowledge_documents WHERE site = $1 ORDER BY path",
        )
        .bind(site)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let documents = rows
            .iter()
            .map(|r| {
                Ok(Document {
                    path: r.try_get("path")?,
                    title: r.try_get("title")?,
                    url: r.try_get("url")?,
                    text: r.try_get("text")?,
                    hash: r.try_get("hash")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?;
        Ok((version.unwrap_or(0), documents))
    }
}
