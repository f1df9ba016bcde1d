//! Passage vectors by embedding model and text hash (SPEC §21). A row is a cache
//! entry, never the only copy of anything: a row that does not decode is
//! replaced by a fresh embedding, and two replicas embedding the same passage at
//! once both write the same vector. The rows are little-endian f32 bytes, or
//! pgvector's type where the PostgreSQL server has it (`pgvector.rs`); callers
//! see bytes either way.

mod pgvector;

use std::collections::HashMap;

use sqlx::Row;

use super::error::StoreResult;
use super::marks::Marks;
use super::{Backend, Store};

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
        // On PostgreSQL the column is read as text whichever type it has (bytes
        // print as `\x…`, pgvector's type as `[…]`), so a read never depends on
        // a conversion another replica may be making at that moment. Every
        // connection prints bytes as hex (`Store::connect_with`), so a
        // database set to the escape format reads the same.
        let postgres = self.0.backend() == Backend::Postgres;
        let marks = Marks::from(self.0.backend());
        let column = if postgres {
            "CAST(vector AS TEXT) AS vector"
        } else {
            "vector"
        };
        for part in chunks.chunks(PER_STATEMENT) {
            // The chunks first, then the model (`marks.rs`).
            let sql = format!(
                "SELECT chunk, {column} FROM knowledge_vectors WHERE model = {} AND chunk IN ({})",
                Marks::after(part.len(), 1),
                marks.list(part.len()),
            );
            let mut query = sqlx::query(super::sql(sql));
            for chunk in part {
                query = query.bind(chunk);
            }
            let query = query.bind(model);
            for row in query.fetch_all(self.0.pool()).await? {
                let bytes = if postgres {
                    // Text that reads as neither gives no bytes, which the
                    // caller refuses and embeds again.
                    pgvector::text_to_bytes(&row.try_get::<String, _>("vector")?)
                } else {
                    row.try_get("vector")?
                };
                found.insert(row.try_get("chunk")?, bytes);
            }
        }
        Ok(found)
    }

    /// Writes each vector, replacing a row that was there (one that did not
    /// decode, or one another replica wrote a moment ago with the same bytes).
    pub async fn put(self, model: &str, rows: &[(String, Vec<u8>)]) -> StoreResult<()> {
        for part in rows.chunks(PER_STATEMENT) {
            let mut tx = self.0.writer().begin().await?;
            // The table's lock for writing waits for a conversion under way
            // (which holds it exclusively), so the type read next is the one
            // these rows are written as.
            let typed = self.0.backend() == Backend::Postgres && {
                sqlx::query("LOCK TABLE knowledge_vectors IN ROW EXCLUSIVE MODE")
                    .execute(&mut *tx)
                    .await?;
                pgvector::in_use(&mut *tx).await?
            };
            for (chunk, vector) in part {
                let query = if typed {
                    // Bytes that are not whole f32s are not written; the
                    // passage is embedded again at the next ingest.
                    let Some(text) = pgvector::from_bytes(vector).map(|v| pgvector::to_text(&v))
                    else {
                        continue;
                    };
                    sqlx::query(
                        "INSERT INTO knowledge_vectors (model, chunk, vector) \
                         VALUES ($1, $2, CAST($3 AS vector)) \
                         ON CONFLICT (model, chunk) DO UPDATE SET vector = EXCLUDED.vector",
                    )
                    .bind(model)
                    .bind(chunk)
                    .bind(text)
                } else {
                    sqlx::query(
                        "INSERT INTO knowledge_vectors (model, chunk, vector) VALUES ($1, $2, $3) \
                         ON CONFLICT (model, chunk) DO UPDATE SET vector = $3",
                    )
                    .bind(model)
                    .bind(chunk)
                    .bind(vector.as_slice())
                };
                query.execute(&mut *tx).await?;
            }
            tx.commit().await?;
        }
        Ok(())
    }
}

/// Moves the vectors to pgvector's type where the server has it (at start).
pub(super) async fn adopt_pgvector(store: &Store) -> StoreResult<bool> {
    Ok(pgvector::adopt(store).await?)
}
