//! Passage vectors by embedding model and text hash (SPEC §21). A row is a cache
//! entry, never the only copy of anything: a row that does not decode is
//! replaced by a fresh embedding, and two replicas embedding the same passage at
//! once both write the same vector.

use std::collections::HashMap;

use sqlx::Row;

use super::Store;
use super::error::StoreResult;

/// Rows read or written in one statement.
const PER_STATEMENT: usize = 500;

#[derive(Clone, Copy)]
pub struct Vectors<'s>(&'s Store);

impl Store {
    pub fn vectors(&self) -> Vectors<'_> {
        Vectors(self)
    }
}

impl Vectors<'_> {
    /// The stored bytes of each of `chunks` that has a row.
    pub async fn get(
        self,
        model: &str,
        chunks: &[String],
    ) -> StoreResult<HashMap<String, Vec<u8>>> {
        let mut found = HashMap::new();
        for part in chunks.chunks(PER_STATEMENT) {
            let marks: Vec<String> = (0..part.len()).map(|i| format!("${}", i + 2)).collect();
            let sql = format!(
                "SELECT chunk, vector FROM knowledge_vectors WHERE model = $1 AND chunk IN ({})",
                marks.join(", ")
            );
            let mut query = sqlx::query(super::sql(sql)).bind(model);
            for chunk in part {
                query = query.bind(chunk);
            }
            for row in query.fetch_all(self.0.pool()).await? {
                found.insert(row.try_get("chunk")?, row.try_get("vector")?);
            }
        }
        Ok(found)
    }

    /// Writes each vector, replacing a row that was there (one that did not
    /// decode, or one another replica wrote a moment ago with the same bytes).
    pub async fn put(self, model: &str, rows: &[(String, Vec<u8>)]) -> StoreResult<()> {
        for part in rows.chunks(PER_STATEMENT) {
            let mut tx = self.0.writer().begin().await?;
            for (chunk, vector) in part {
                sqlx::query(
                    "INSERT INTO knowledge_vectors (model, chunk, vector) VALUES ($1, $2, $3) \
                     ON CONFLICT (model, chunk) DO UPDATE SET vector = $3",
                )
                .bind(model)
                .bind(chunk)
                .bind(vector)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        }
        Ok(())
    }
}
