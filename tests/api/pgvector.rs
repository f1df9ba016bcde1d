//! Passage vectors in pgvector's type where the PostgreSQL server has it (SPEC
//! §21): stored as that type and searched by meaning from it, a row that does
//! not hold a unit vector of the model's size made again, bytes stored before
//! the server had pgvector converted at the next start (two replicas starting
//! at once agree), and a role that may not create the extension keeping bytes.
//!
//! These run on the server named by `DESKBELL_TEST_PGVECTOR` (scripts/test
//! starts one: PostgreSQL 16 with pgvector 0.6.2 from PyPI's `pgserver`);
//! without it each says it was skipped.

use std::path::Path;
use std::sync::Arc;

use deskbell::clock::ManualClock;
use deskbell::store::{Durability, Store};
use deskbell::testkit::{FakeLlm, Webhook, fresh_postgres};
use sqlx::Row;

use crate::hybrid_store::{found, replica, write_docs};
use crate::support::TestApp;

fn server() -> Option<String> {
    let server = std::env::var("DESKBELL_TEST_PGVECTOR").ok();
    if server.is_none() {
        eprintln!("skipped: DESKBELL_TEST_PGVECTOR names no PostgreSQL server with pgvector");
    }
    server
}

/// An app with the embedding model on, answering from `docs`, on `url`.
async fn app_on(url: String, docs: &Path) -> TestApp {
    let docs = docs.display().to_string();
    TestApp::on(
        url,
        Some(tempfile::tempdir().unwrap()),
        FakeLlm::start().await.unwrap(),
        Webhook::start().await.unwrap(),
        Arc::new(ManualClock::starting_now()),
        None,
        move |c| {
            c.sites[0].knowledge = vec![deskbell::config::KnowledgeSource::Path(docs)];
            c.knowledge.embedding = deskbell::config::Embedding::On;
            c.knowledge.embedding_model =
                Some(crate::hybrid::test_embedder().display().to_string());
        },
    )
    .await
}

/// Whether the vectors' column is pgvector's type.
pub async fn typed(db: &sqlx::AnyPool) -> bool {
    let row = sqlx::query(
        "SELECT COUNT(*) AS n FROM information_schema.columns WHERE table_name = 'knowledge_vectors' \
         AND column_name = 'vector' AND udt_name = 'vector'",
    )
    .fetch_one(db)
    .await
    .unwrap();
    row.try_get::<i64, _>("n").unwrap() > 0
}

/// Every row's chunk and vector as pgvector prints it, in order.
async fn texts(db: &sqlx::AnyPool) -> Vec<(String, String)> {
    sqlx::query("SELECT chunk, CAST(vector AS TEXT) AS v FROM knowledge_vectors ORDER BY chunk")
        .fetch_all(db)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.try_get("chunk").unwrap(), r.try_get("v").unwrap()))
        .collect()
}

/// Swaps the vectors of the first two of `rows` (as `texts` gives them);
/// the rows as they are then.
async fn swap_first_two(db: &sqlx::AnyPool, rows: &[(String, String)]) -> Vec<(String, String)> {
    let mut swapped = rows.to_vec();
    let (a, b) = (swapped[0].1.clone(), swapped[1].1.clone());
    swapped[0].1 = b;
    swapped[1].1 = a;
    for (chunk, text) in &swapped[..2] {
        sqlx::query("UPDATE knowledge_vectors SET vector = CAST($1 AS vector) WHERE chunk = $2")
            .bind(text)
            .bind(chunk)
            .execute(db)
            .await
            .unwrap();
    }
    swapped
}

/// Every row's size and length, by pgvector's own functions.
async fn sizes_and_norms(db: &sqlx::AnyPool) -> Vec<(i64, f64)> {
    sqlx::query(
        "SELECT CAST(vector_dims(vector) AS BIGINT) AS d, CAST(vector_norm(vector) AS FLOAT8) AS n \
         FROM knowledge_vectors ORDER BY chunk",
    )
    .fetch_all(db)
    .await
    .unwrap()
    .iter()
    .map(|r| (r.try_get("d").unwrap(), r.try_get("n").unwrap()))
    .collect()
}

fn assert_unit_vectors(rows: &[(i64, f64)], count: usize) {
    assert_eq!(rows.len(), count, "{rows:?}");
    for (dims, norm) in rows {
        assert_eq!(*dims, 384, "{rows:?}");
        assert!((norm - 1.0).abs() < 1e-3, "{rows:?}");
    }
}

async fn exec(db: &sqlx::AnyPool, statement: &str) {
    sqlx::query(sqlx::AssertSqlSafe(statement.to_string()))
        .execute(db)
        .await
        .unwrap();
}

#[tokio::test]
async fn vectors_are_stored_in_pgvectors_type_and_a_bad_row_is_made_again() {
    let Some(server) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    write_docs(&docs);
    let t = app_on(fresh_postgres(&server, "pgv").await.unwrap(), &docs).await;
    let db = t.db().await;
    assert!(typed(&db).await, "the column is pgvector's");
    assert_unit_vectors(&sizes_and_norms(&db).await, 3);
    // pgvector's own operators work on what was stored: each passage is
    // nearest to itself.
    let nearest = sqlx::query(
        "SELECT COUNT(*) AS n FROM knowledge_vectors a WHERE a.chunk = \
         (SELECT b.chunk FROM knowledge_vectors b ORDER BY b.vector <=> a.vector LIMIT 1)",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(nearest.try_get::<i64, _>("n").unwrap(), 3);
    let returns = found(&t, "can I send it back?", "Returns").await;
    assert_eq!(returns["dense_rank"], 1, "{returns}");

    // A replica building its index takes the stored vectors rather than
    // embedding again: two rows' vectors swapped stay swapped.
    let before = texts(&db).await;
    let swapped = swap_first_two(&db, &before).await;
    replica(&t, &docs, &dir.path().join("reads")).await;
    assert_eq!(
        texts(&db).await,
        swapped,
        "the rows were read, not made again"
    );
    swap_first_two(&db, &swapped).await;

    // Rows of another size and not of unit length: a replica building its
    // index refuses them and stores them made again.
    exec(
        &db,
        "UPDATE knowledge_vectors SET vector = '[1,2,3]' WHERE chunk = (SELECT MIN(chunk) FROM knowledge_vectors)",
    )
    .await;
    exec(
        &db,
        "UPDATE knowledge_vectors SET vector = CAST(array_fill(0.5, ARRAY[384]) AS vector) \
         WHERE chunk = (SELECT MAX(chunk) FROM knowledge_vectors)",
    )
    .await;
    let second = replica(&t, &docs, &dir.path().join("second")).await;
    assert_unit_vectors(&sizes_and_norms(&db).await, 3);
    let returns = found(&second, "can I send it back?", "Returns").await;
    assert_eq!(returns["dense_rank"], 1, "{returns}");
}

#[tokio::test]
async fn bytes_stored_before_the_server_had_pgvector_are_converted_at_the_next_start() {
    let Some(server) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    write_docs(&docs);
    let url = fresh_postgres(&server, "pgv").await.unwrap();
    let t = app_on(url.clone(), &docs).await;
    let db = t.db().await;
    let before = texts(&db).await;
    assert_eq!(before.len(), 3);

    // The database as a server without pgvector left it: the same vectors as
    // little-endian f32 bytes, a row cut short among them, no extension.
    exec(&db, "ALTER TABLE knowledge_vectors ADD COLUMN old BYTEA").await;
    for (chunk, text) in &before {
        let floats: Vec<f32> = text
            .trim_matches(['[', ']'])
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect();
        let bytes: Vec<u8> = floats.iter().flat_map(|x| x.to_le_bytes()).collect();
        sqlx::query("UPDATE knowledge_vectors SET old = $1 WHERE chunk = $2")
            .bind(bytes)
            .bind(chunk)
            .execute(&db)
            .await
            .unwrap();
    }
    for statement in [
        "ALTER TABLE knowledge_vectors DROP COLUMN vector",
        "ALTER TABLE knowledge_vectors RENAME COLUMN old TO vector",
        "INSERT INTO knowledge_vectors (model, chunk, vector) \
         SELECT model, 'cut', '\\x010203'::bytea FROM knowledge_vectors LIMIT 1",
        "DROP EXTENSION vector",
    ] {
        exec(&db, statement).await;
    }
    assert!(!typed(&db).await);

    // A session holding the table (idle in a transaction that read it): a
    // start gives up converting after a few seconds and serves with bytes.
    let mut holder = db.begin().await.unwrap();
    sqlx::query("LOCK TABLE knowledge_vectors IN ACCESS SHARE MODE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let waited = std::time::Instant::now();
    Store::connect(&url, Durability::Full).await.unwrap();
    assert!(waited.elapsed() < std::time::Duration::from_secs(20));
    assert!(!typed(&db).await, "not converted while the table was held");
    holder.commit().await.unwrap();

    // Two replicas starting at once: one converts, the other finds it done.
    let (a, b) = tokio::join!(
        Store::connect(&url, Durability::Full),
        Store::connect(&url, Durability::Full)
    );
    a.unwrap();
    b.unwrap();
    assert!(typed(&db).await, "the column is pgvector's");
    assert_eq!(
        texts(&db).await,
        before,
        "every vector kept exactly; the cut row dropped"
    );
    let second = replica(&t, &docs, &dir.path().join("second")).await;
    let returns = found(&second, "can I send it back?", "Returns").await;
    assert_eq!(returns["dense_rank"], 1, "{returns}");
}

#[tokio::test]
async fn a_role_that_may_not_create_the_extension_keeps_bytes_until_it_is_created() {
    let Some(server) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    write_docs(&docs);
    // A database owned by a role that is not a superuser: pgvector 0.6 is not
    // a trusted extension, so that role may not create it.
    sqlx::any::install_default_drivers();
    let admin = sqlx::AnyPool::connect(&format!("{server}/postgres"))
        .await
        .unwrap();
    let role = deskbell::ids::new_id("role");
    exec(&admin, &format!("CREATE ROLE {role} LOGIN")).await;
    exec(&admin, &format!("CREATE DATABASE {role} OWNER {role}")).await;
    let base = server.trim_start_matches("postgres://");
    let host = base.split_once('@').map_or(base, |(_, host)| host);
    let url = format!("postgres://{role}@{host}/{role}");
    let t = app_on(url.clone(), &docs).await;
    let db = t.db().await;
    assert!(!typed(&db).await, "bytes, as without pgvector");
    let lengths: Vec<usize> = sqlx::query("SELECT vector FROM knowledge_vectors")
        .fetch_all(&db)
        .await
        .unwrap()
        .iter()
        .map(|r| r.try_get::<Vec<u8>, _>("vector").unwrap().len())
        .collect();
    assert_eq!(lengths, vec![384 * 4; 3]);
    let returns = found(&t, "can I send it back?", "Returns").await;
    assert_eq!(returns["dense_rank"], 1, "{returns}");

    // A superuser creates the extension: the next start converts the column.
    let owner_db = sqlx::AnyPool::connect(&format!("{server}/{role}"))
        .await
        .unwrap();
    exec(&owner_db, "CREATE EXTENSION vector").await;
    let second = replica(&t, &docs, &dir.path().join("second")).await;
    assert!(typed(&db).await, "converted at the start after");
    assert_unit_vectors(&sizes_and_norms(&db).await, 3);
    let returns = found(&second, "can I send it back?", "Returns").await;
    assert_eq!(returns["dense_rank"], 1, "{returns}");
}
