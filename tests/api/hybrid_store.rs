//! Passage vectors in the database (SPEC §21): shared by replicas, re-made when
//! a row does not decode, written by two replicas at once without harm; and a
//! model that cannot be had leaves BM25 serving.

use deskbell::config::{Embedding, KnowledgeSource};
use deskbell::states::OperatorRole;
use sqlx::Row;

use crate::hybrid::{app, test_embedder};
use crate::support::TestApp;

pub fn write_docs(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("returns.md"),
        "# Returns\n\nYou may return any item within 30 days of delivery for a full refund.",
    )
    .unwrap();
    std::fs::write(
        dir.join("shipping.md"),
        "# Shipping\n\nStandard shipping takes 3 to 5 working days.",
    )
    .unwrap();
    std::fs::write(
        dir.join("payment.md"),
        "# Payment\n\nWe accept credit cards, PayPal and bank transfer.",
    )
    .unwrap();
}

/// A site of the test pages in a fresh folder, served with vectors: the
/// folder (kept for the test's length), its pages' folder and the app.
async fn site_with_vectors() -> (tempfile::TempDir, std::path::PathBuf, TestApp) {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    write_docs(&docs);
    let t = app(&docs, true).await;
    (dir, docs, t)
}

/// Whether the test's database keeps vectors in pgvector's type (a
/// PostgreSQL server with the extension, `pgvector.rs`).
async fn typed(t: &TestApp) -> bool {
    t.database_url.starts_with("postgres") && crate::pgvector::typed(&t.db().await).await
}

/// Every stored vector's length in bytes (as f32s, whichever type holds it).
async fn stored(t: &TestApp) -> Vec<usize> {
    let typed = typed(t).await;
    let sql = if typed {
        "SELECT CAST(vector_dims(vector) AS BIGINT) AS d FROM knowledge_vectors ORDER BY chunk"
    } else {
        "SELECT vector FROM knowledge_vectors ORDER BY chunk"
    };
    let rows = sqlx::query(sql).fetch_all(&t.db().await).await.unwrap();
    rows.iter()
        .map(|r| match typed {
            true => r.try_get::<i64, _>("d").unwrap() as usize * 4,
            false => r.try_get::<Vec<u8>, _>("vector").unwrap().len(),
        })
        .collect()
}

/// Every row's stored bytes, in the order of their chunks.
async fn raw(db: &sqlx::AnyPool) -> Vec<Vec<u8>> {
    let rows = sqlx::query("SELECT vector FROM knowledge_vectors ORDER BY chunk")
        .fetch_all(db)
        .await
        .unwrap();
    rows.iter().map(|r| r.try_get("vector").unwrap()).collect()
}

async fn set_raw(db: &sqlx::AnyPool, chunks: &[String], values: &[Vec<u8>]) {
    for (chunk, bytes) in chunks.iter().zip(values) {
        sqlx::query("UPDATE knowledge_vectors SET vector = $1 WHERE chunk = $2")
            .bind(bytes.as_slice())
            .bind(chunk)
            .execute(db)
            .await
            .unwrap();
    }
}

/// A replica on `t`'s database with its own index folder and the model on.
pub async fn replica(t: &TestApp, docs: &std::path::Path, data: &std::path::Path) -> TestApp {
    let (docs, data) = (docs.display().to_string(), data.to_path_buf());
    t.replica(move |c| {
        c.server.data_dir = data;
        c.sites[0].knowledge = vec![KnowledgeSource::Path(docs)];
        c.knowledge.embedding = Embedding::On;
        c.knowledge.embedding_model = Some(test_embedder().display().to_string());
    })
    .await
}

/// The passages found for `q` through the console's retrieval preview.
async fn passages(t: &TestApp, q: &str) -> Vec<serde_json::Value> {
    let admin = t.console(OperatorRole::Admin).await;
    let q = url::form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>();
    let r = admin
        .get(&format!("/v1/operator/knowledge/acme/search?q={q}"))
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["passages"].as_array().cloned().unwrap_or_default()
}

/// The passage titled `title` among those found for `q`.
pub async fn found(t: &TestApp, q: &str, title: &str) -> serde_json::Value {
    let all = passages(t, q).await;
    all.iter()
        .find(|p| p["title"] == title)
        .cloned()
        .unwrap_or_else(|| panic!("{title} not found: {all:?}"))
}

async fn first_title(t: &TestApp, q: &str) -> String {
    let all = passages(t, q).await;
    all.first()
        .and_then(|p| p["title"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn vectors_are_stored_once_and_a_corrupted_row_is_embedded_again() {
    let (dir, docs, t) = site_with_vectors().await;
    assert_eq!(stored(&t).await, vec![384 * 4; 3], "one vector per passage");

    // Rows cut short, of another size, and of garbage: a replica building its
    // index refuses them, embeds those passages again and stores good rows.
    let db = t.db().await;
    let rows = sqlx::query("SELECT chunk FROM knowledge_vectors ORDER BY chunk")
        .fetch_all(&db)
        .await
        .unwrap();
    let chunks: Vec<String> = rows.iter().map(|r| r.try_get("chunk").unwrap()).collect();
    if !typed(&t).await {
        // A replica building its index takes the stored vectors rather than
        // embedding again: two rows' bytes swapped stay swapped. (pgvector.rs
        // checks the same for pgvector's type.)
        let before = raw(&db).await;
        let swapped = vec![before[1].clone(), before[0].clone(), before[2].clone()];
        set_raw(&db, &chunks, &swapped).await;
        replica(&t, &docs, &dir.path().join("reads")).await;
        assert_eq!(
            raw(&db).await,
            swapped,
            "the rows were read, not made again"
        );
        set_raw(&db, &chunks, &before).await;
    }
    if typed(&t).await {
        // pgvector's type holds only finite floats: the bad rows are of other
        // sizes and not of unit length.
        let bad = [
            "[1,2,3]",
            &format!("[{}]", ["0"; 512].join(",")),
            &format!("[{}]", ["0.5"; 384].join(",")),
        ];
        for (chunk, text) in chunks.iter().zip(bad) {
            sqlx::query(
                "UPDATE knowledge_vectors SET vector = CAST($1 AS vector) WHERE chunk = $2",
            )
            .bind(text)
            .bind(chunk)
            .execute(&db)
            .await
            .unwrap();
        }
    } else {
        let bad: [Vec<u8>; 3] = [vec![1, 2, 3], vec![0; 512 * 4], vec![0xff; 384 * 4]];
        for (chunk, bytes) in chunks.iter().zip(bad) {
            sqlx::query("UPDATE knowledge_vectors SET vector = $1 WHERE chunk = $2")
                .bind(bytes)
                .bind(chunk)
                .execute(&db)
                .await
                .unwrap();
        }
    }
    let second = replica(&t, &docs, &dir.path().join("second")).await;
    assert_eq!(
        stored(&t).await,
        vec![384 * 4; 3],
        "every row was made again"
    );
    // The second replica searches by meaning with the vectors made again.
    let returns = found(&second, "can I send it back?", "Returns").await;
    assert_eq!(returns["dense_rank"], 1, "{returns}");
}

#[tokio::test]
async fn a_second_replica_uses_the_stored_vectors_and_two_ingesting_at_once_agree() {
    let (dir, docs, t) = site_with_vectors().await;
    let a = replica(&t, &docs, &dir.path().join("a")).await;
    let b = replica(&t, &docs, &dir.path().join("b")).await;
    // A new page, ingested by both replicas at once.
    std::fs::write(
        docs.join("gifts.md"),
        "# Gift cards\n\nGift cards never expire and can be used online.",
    )
    .unwrap();
    let ra = a.console(OperatorRole::Admin).await;
    let rb = b.console(OperatorRole::Admin).await;
    let (x, y) = tokio::join!(
        ra.send(
            reqwest::Method::POST,
            "/v1/operator/knowledge/acme/ingest",
            serde_json::json!({})
        ),
        rb.send(
            reqwest::Method::POST,
            "/v1/operator/knowledge/acme/ingest",
            serde_json::json!({})
        )
    );
    assert_eq!(
        (x.status, y.status),
        (200, 200),
        "{:?} {:?}",
        x.json,
        y.json
    );
    assert_eq!(
        stored(&t).await,
        vec![384 * 4; 4],
        "one row per passage, whoever wrote it"
    );
    for replica in [&a, &b] {
        let gifts = found(replica, "do gift cards expire", "Gift cards").await;
        assert_eq!(
            (gifts["dense_rank"].clone(), gifts["bm25_rank"].clone()),
            (1.into(), 1.into()),
            "{gifts}"
        );
    }
}

#[tokio::test]
async fn a_model_that_cannot_be_loaded_leaves_bm25_serving() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    write_docs(&docs);
    // A model folder whose weights are not what they should be.
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(test_embedder().join(f), broken.join(f)).unwrap();
    }
    std::fs::write(broken.join("model.safetensors"), b"not a model").unwrap();
    let docs_text = docs.display().to_string();
    let t = TestApp::with(move |c| {
        c.sites[0].knowledge = vec![KnowledgeSource::Path(docs_text)];
        c.knowledge.embedding = Embedding::On;
        c.knowledge.embedding_model = Some(broken.display().to_string());
    })
    .await;
    assert!(
        first_title(&t, "how long does shipping take")
            .await
            .starts_with("Shipping")
    );
    assert!(stored(&t).await.is_empty(), "nothing embedded");
}

#[tokio::test]
async fn a_downloaded_model_that_fails_its_checksum_is_refused_with_a_clear_message() {
    let (endpoint, _gets) = crate::local_demo::fake_hub(b"not the model".to_vec()).await;
    let cache = tempfile::tempdir().unwrap();
    let error = deskbell::knowledge::embed::fetch_default(cache.path(), Some(&endpoint))
        .await
        .unwrap_err();
    let error = format!("{error:#}");
    assert!(error.contains("not the pinned"), "{error}");
    assert!(error.contains("DESKBELL_EMBEDDING_MODEL"), "{error}");
    assert!(error.contains("embedding = \"off\""), "{error}");
}

#[tokio::test]
async fn an_ingest_whose_vector_cache_cannot_be_read_still_searches_by_meaning() {
    let (dir, docs, t) = site_with_vectors().await;
    // The cache's table gone (a database fault, a conversion that left it
    // unreadable): a replica building its index embeds the passages itself.
    sqlx::query("DROP TABLE knowledge_vectors")
        .execute(&t.db().await)
        .await
        .unwrap();
    let second = replica(&t, &docs, &dir.path().join("second")).await;
    let returns = found(&second, "can I send it back?", "Returns").await;
    assert_eq!(returns["dense_rank"], 1, "{returns}");
}

#[tokio::test]
async fn a_database_that_prints_bytes_escaped_still_reads_its_stored_vectors() {
    let (dir, docs, t) = site_with_vectors().await;
    if !t.database_url.starts_with("postgres") || typed(&t).await {
        // Only PostgreSQL's bytes have an output format; pgvector's type
        // prints the same whatever `bytea_output` says.
        eprintln!("skipped: the vectors are not PostgreSQL bytes here");
        return;
    }
    // A database whose administrator prints bytes in the old escape format:
    // every connection opened from now on reads them so unless it says hex.
    let db = t.db().await;
    let name: String = sqlx::query("SELECT CAST(current_database() AS TEXT) AS name")
        .fetch_one(&db)
        .await
        .unwrap()
        .try_get("name")
        .unwrap();
    // The name is the database's own, read above.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{name}\" SET bytea_output = 'escape'"
    )))
    .execute(&db)
    .await
    .unwrap();
    let rows = sqlx::query("SELECT chunk FROM knowledge_vectors ORDER BY chunk")
        .fetch_all(&db)
        .await
        .unwrap();
    let chunks: Vec<String> = rows.iter().map(|r| r.try_get("chunk").unwrap()).collect();
    let before = raw(&db).await;
    let swapped = vec![before[1].clone(), before[0].clone(), before[2].clone()];
    set_raw(&db, &chunks, &swapped).await;
    // A replica building its index takes the stored vectors rather than
    // embedding again: had it misread them, it would have written them anew.
    replica(&t, &docs, &dir.path().join("escaped")).await;
    assert!(
        raw(&db).await == swapped,
        "the rows were made again, not read"
    );
}
