//! pgvector where the PostgreSQL server has it (SPEC §21). The passage vectors'
//! column takes pgvector's `vector` type when the extension is installed in the
//! database or this role may install it, so an operator's own SQL can read them
//! with its operators and indexes. The search itself stays in each replica's
//! memory, which already holds every passage (DECISIONS.md, "pgvector for
//! storage, the search in memory"). Without the extension (SQLite, a server
//! that lacks it, a role that may not create it) the column keeps
//! little-endian f32 bytes.
//!
//! A database made before the server had pgvector is converted at the next
//! start: one transaction, holding the table's lock, moves each row to the new
//! type and drops a row that does not decode (a cache entry: its passage is
//! embedded again at the next ingest).

use sqlx::Row;

use crate::store::{Backend, Store, sql};

/// Rows converted per statement.
const PER_STATEMENT: usize = 300;

/// How long a start waits for the table's lock to convert it.
const LOCK_WAIT: &str = "5s";

/// pgvector's largest vector (`VECTOR_MAX_DIM`); a longer row could not be cast.
const MAX_DIM: usize = 16_000;

/// Whether the vectors' column is pgvector's type, as the database says now.
pub(super) async fn in_use<'e, E>(executor: E) -> Result<bool, sqlx::Error>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let row = sqlx::query(
        "SELECT COUNT(*) AS n FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = 'knowledge_vectors' \
         AND column_name = 'vector' AND udt_name = 'vector'",
    )
    .fetch_one(executor)
    .await?;
    Ok(row.try_get::<i64, _>("n")? > 0)
}

/// Moves the vectors' column to pgvector's type when the server has the
/// extension; whether the column is pgvector's now. A role that may not create
/// the extension leaves the bytes as they are and says so once.
pub(in crate::store) async fn adopt(store: &Store) -> Result<bool, sqlx::Error> {
    if store.backend() != Backend::Postgres {
        return Ok(false);
    }
    let pool = store.writer();
    if in_use(pool).await? {
        return Ok(true);
    }
    if !extension(pool, "pg_extension", "extname").await? {
        if !extension(pool, "pg_available_extensions", "name").await? {
            return Ok(false);
        }
        let created = sqlx::query("CREATE EXTENSION IF NOT EXISTS vector")
            .execute(pool)
            .await;
        // Another replica may have created it at the same moment.
        if let Err(e) = created
            && !extension(pool, "pg_extension", "extname").await?
        {
            tracing::warn!(
                error = %e,
                "the PostgreSQL server has pgvector but this role may not create it \
                 (a superuser's CREATE EXTENSION vector in this database enables it); \
                 passage vectors stay stored as bytes"
            );
            return Ok(false);
        }
    }
    convert(pool).await?;
    Ok(true)
}

/// Whether catalog `table` names the extension `vector` in `column`.
async fn extension(pool: &sqlx::AnyPool, table: &str, column: &str) -> Result<bool, sqlx::Error> {
    let text = format!("SELECT COUNT(*) AS n FROM {table} WHERE {column} = 'vector'");
    let row = sqlx::query(sql(text)).fetch_one(pool).await?;
    Ok(row.try_get::<i64, _>("n")? > 0)
}

/// Converts the bytes column in one transaction under the table's lock, by
/// copying the rows into a new table of pgvector's type and putting it in the
/// old one's place (rewriting the rows in place would keep the dropped bytes in
/// every row). A second replica converting at the same moment waits, then
/// finds it done. A lock not had within `LOCK_WAIT` (a session idle in a
/// transaction that touched the table, say) gives up: the start goes on with
/// bytes and the next start tries again.
async fn convert(pool: &sqlx::AnyPool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query(sql(format!("SET LOCAL lock_timeout = '{LOCK_WAIT}'")))
        .execute(&mut *tx)
        .await?;
    sqlx::query("LOCK TABLE knowledge_vectors IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    if in_use(&mut *tx).await? {
        return tx.commit().await;
    }
    sqlx::query(
        "CREATE TABLE knowledge_vectors_next (model TEXT NOT NULL, chunk TEXT NOT NULL, \
         vector vector NOT NULL, PRIMARY KEY (model, chunk))",
    )
    .execute(&mut *tx)
    .await?;
    let (mut after, mut moved, mut dropped) = ((String::new(), String::new()), 0usize, 0usize);
    loop {
        let rows = sqlx::query(
            "SELECT model, chunk, vector FROM knowledge_vectors \
             WHERE (model, chunk) > ($1, $2) ORDER BY model, chunk LIMIT $3",
        )
        .bind(&after.0)
        .bind(&after.1)
        .bind(PER_STATEMENT as i64)
        .fetch_all(&mut *tx)
        .await?;
        let Some(last) = rows.last() else { break };
        after = (last.try_get("model")?, last.try_get("chunk")?);
        let mut good = Vec::with_capacity(rows.len());
        for row in &rows {
            let bytes: Vec<u8> = row.try_get("vector")?;
            match from_bytes(&bytes) {
                Some(vector) => good.push((
                    row.try_get::<String, _>("model")?,
                    row.try_get::<String, _>("chunk")?,
                    to_text(&vector),
                )),
                None => dropped += 1,
            }
        }
        moved += good.len();
        insert_next(&mut tx, &good).await?;
    }
    for statement in [
        "DROP TABLE knowledge_vectors",
        "ALTER TABLE knowledge_vectors_next RENAME TO knowledge_vectors",
        "ALTER TABLE knowledge_vectors RENAME CONSTRAINT knowledge_vectors_next_pkey TO knowledge_vectors_pkey",
    ] {
        sqlx::query(statement).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    tracing::info!(
        moved,
        dropped,
        "passage vectors are now stored in pgvector's type"
    );
    Ok(())
}

/// Adds converted rows (model, chunk, pgvector's text) to the new table.
async fn insert_next(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    rows: &[(String, String, String)],
) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let values: Vec<String> = (0..rows.len())
        .map(|i| {
            format!(
                "(${}, ${}, CAST(${} AS vector))",
                3 * i + 1,
                3 * i + 2,
                3 * i + 3
            )
        })
        .collect();
    let text = format!(
        "INSERT INTO knowledge_vectors_next (model, chunk, vector) VALUES {}",
        values.join(", ")
    );
    let mut query = sqlx::query(sql(text));
    for (model, chunk, vector) in rows {
        query = query.bind(model).bind(chunk).bind(vector);
    }
    query.execute(&mut **tx).await?;
    Ok(())
}

/// A vector as pgvector's text input: `[0.1,-0.2]`. Rust prints each f32 in its
/// shortest form that reads back to the same value, and pgvector reads and
/// prints floats the same way, so the round trip is exact for every value but
/// a subnormal one (below 1.2e-38, nothing a unit vector's component needs),
/// which is written as 0 so that pgvector's reader cannot refuse it as out of
/// range.
pub(super) fn to_text(vector: &[f32]) -> String {
    let mut out = String::with_capacity(vector.len() * 12 + 2);
    out.push('[');
    for (i, x) in vector.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let x = if x.is_subnormal() { 0.0 } else { *x };
        out.push_str(&x.to_string());
    }
    out.push(']');
    out
}

/// pgvector's text output back to floats; `None` for anything else.
pub(super) fn from_text(text: &str) -> Option<Vec<f32>> {
    let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?;
    inner
        .split(',')
        .map(|x| x.trim().parse::<f32>().ok().filter(|x| x.is_finite()))
        .collect()
}

/// Floats as the bytes the store's callers read (little-endian f32s, the
/// layout `knowledge::dense::rows` writes; the store cannot import it).
pub(super) fn to_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The column read as text, as the bytes the store's callers read: bytes print
/// as `\x` and hex (the `bytea_output` every connection sets), pgvector's type as
/// `[…]`. Anything else gives no bytes, which callers refuse.
pub(super) fn text_to_bytes(text: &str) -> Vec<u8> {
    match text.strip_prefix("\\x") {
        Some(hex) => hex::decode(hex).unwrap_or_default(),
        None => from_text(text).map_or_else(Vec::new, |v| to_bytes(&v)),
    }
}

/// Stored bytes as floats, whatever their count up to pgvector's largest, when
/// they are whole and finite: pgvector refuses non-finite values, and the
/// model's own checks (its length, unit norm) apply when the row is read for
/// an ingest.
pub(super) fn from_bytes(bytes: &[u8]) -> Option<Vec<f32>> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) || bytes.len() > MAX_DIM * 4 {
        return None;
    }
    let vector: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    vector.iter().all(|x| x.is_finite()).then_some(vector)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{from_bytes, from_text, text_to_bytes, to_text};

    proptest! {
        #[test]
        fn a_vector_reads_back_exactly_from_its_text(v in prop::collection::vec(any::<f32>().prop_filter("normal", |x| x.is_normal() || *x == 0.0), 1..64)) {
            prop_assert_eq!(from_text(&to_text(&v)), Some(v));
        }
    }

    #[test]
    fn text_that_is_not_a_vector_is_refused() {
        for text in [
            "", "[]", "[1,2", "1,2]", "[1,x]", "[1,,2]", "[NaN]", "[inf]",
        ] {
            assert_eq!(from_text(text), None, "{text}");
        }
        assert_eq!(from_text("[1, -2.5]"), Some(vec![1.0, -2.5]));
    }

    #[test]
    fn bytes_that_are_cut_or_not_finite_are_refused() {
        assert_eq!(from_bytes(&[]), None);
        assert_eq!(from_bytes(&[0, 0, 128]), None);
        assert_eq!(from_bytes(&f32::NAN.to_le_bytes()), None);
        assert_eq!(from_bytes(&1.5f32.to_le_bytes()), Some(vec![1.5]));
        assert_eq!(
            from_bytes(&vec![0; 16_001 * 4]),
            None,
            "longer than pgvector's"
        );
        assert!(from_bytes(&vec![0; 16_000 * 4]).is_some());
    }

    #[test]
    fn the_column_reads_as_bytes_whichever_type_holds_it() {
        let bytes: Vec<u8> = [0.5f32, -1.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(text_to_bytes(&format!("\\x{}", hex::encode(&bytes))), bytes);
        assert_eq!(text_to_bytes("[0.5,-1]"), bytes);
        for text in ["\\xzz", "0.5", ""] {
            assert_eq!(text_to_bytes(text), Vec::<u8>::new(), "{text}");
        }
    }
}
