//! Hybrid retrieval (SPEC §21): BM25 and the embedded embedding model, fused by
//! rank, through the real app on SQLite and PostgreSQL, with the real model
//! (`scripts/fetch-test-embedder`).

use std::path::PathBuf;

use deskbell::config::{Embedding, KnowledgeSource};
use deskbell::states::OperatorRole;
use serde_json::Value;

use crate::support::TestApp;

/// The embedding model's folder (`DESKBELL_TEST_EMBEDDER`, else the script's).
pub fn test_embedder() -> PathBuf {
    let path = std::env::var_os("DESKBELL_TEST_EMBEDDER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/deskbell/test-models/all-MiniLM-L6-v2")
        });
    assert!(
        path.join("model.safetensors").exists(),
        "the test embedding model {} is missing: run scripts/fetch-test-embedder",
        path.display()
    );
    path
}

/// A shop's pages: none of them says "send back".
fn write_docs(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    let pages = [
        (
            "returns.md",
            "# Returns\n\nYou may return any item within 30 days of delivery for a full refund. Print the prepaid label from your account.",
        ),
        (
            "shipping.md",
            "# Shipping\n\nStandard shipping takes 3 to 5 working days and costs 4.90 EUR. Express shipping takes one day.",
        ),
        (
            "warranty.md",
            "# Warranty\n\nEvery product carries a two year warranty against manufacturing defects.",
        ),
        (
            "payment.md",
            "# Payment\n\nWe accept credit cards, PayPal and bank transfer. Invoices are sent by email.",
        ),
        (
            "greek.md",
            "# Οδηγίες\n\nΤο ηλεκτρικό μπρίκι καθαρίζεται με ξύδι κάθε μήνα. Κωδικός ζιρκόνιο.",
        ),
    ];
    for (name, text) in pages {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// An app answering from `docs`, with the embedding model on or off.
pub async fn app(docs: &std::path::Path, embedding: bool) -> TestApp {
    let docs = docs.display().to_string();
    TestApp::with(move |c| {
        c.sites[0].knowledge = vec![KnowledgeSource::Path(docs)];
        if embedding {
            c.knowledge.embedding = Embedding::On;
            c.knowledge.embedding_model = Some(test_embedder().display().to_string());
        }
    })
    .await
}

async fn search(t: &TestApp, q: &str) -> Vec<Value> {
    let admin = t.console(OperatorRole::Admin).await;
    let path = format!(
        "/v1/operator/knowledge/acme/search?q={}",
        url::form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>()
    );
    let r = admin.get(&path).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["passages"].as_array().unwrap().clone()
}

fn titles(passages: &[Value]) -> Vec<String> {
    passages
        .iter()
        .map(|p| p["title"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn a_question_in_other_words_finds_its_page_by_meaning() {
    let dir = tempfile::tempdir().unwrap();
    write_docs(dir.path());
    let question = "can I send it back?";

    let bm25 = app(dir.path(), false).await;
    let found = search(&bm25, question).await;
    assert!(
        !titles(&found)[0].starts_with("Returns"),
        "BM25 alone matches no word of the question in the returns page, only typos of other pages' words: {found:?}"
    );

    let hybrid = app(dir.path(), true).await;
    let found = search(&hybrid, question).await;
    assert!(
        titles(&found)[0].starts_with("Returns"),
        "the returns page comes first by meaning: {found:?}"
    );
    assert_eq!(found[0]["dense_rank"], 1, "{}", found[0]);
    assert!(
        found[0]["found_by"]
            .as_array()
            .unwrap()
            .contains(&"dense".into())
    );

    // A question that shares words with a page is found by both searches.
    let found = search(&hybrid, "how long does express shipping take").await;
    assert!(titles(&found)[0].starts_with("Shipping"), "{found:?}");
    assert_eq!(found[0]["found_by"], serde_json::json!(["bm25", "dense"]));
}

#[tokio::test]
async fn a_page_in_a_language_the_model_does_not_know_is_still_found_by_its_words() {
    let dir = tempfile::tempdir().unwrap();
    write_docs(dir.path());
    let t = app(dir.path(), true).await;
    let found = search(&t, "ζιρκόνιο").await;
    assert!(titles(&found)[0].starts_with("Οδηγίες"), "{found:?}");
    assert!(found[0]["bm25_rank"] == 1, "{}", found[0]);
    // Non-English questions and a question of no words at all are answered
    // without an error.
    let found = search(&t, "Kann ich es zurückschicken?").await;
    assert!(!found.is_empty());
    assert!(search(&t, "?!…").await.is_empty());
    let long = "where is my parcel ".repeat(200);
    assert!(!search(&t, &long).await.is_empty());
}

#[tokio::test]
async fn a_turn_cites_the_passage_found_by_meaning() {
    let dir = tempfile::tempdir().unwrap();
    write_docs(dir.path());
    let t = app(dir.path(), true).await;
    let token = t.visitor().await;
    t.llm
        .push(deskbell::testkit::Reply::text("Yes, within 30 days [1]."));
    let r = t.question(&token, None, "can I send it back?").await;
    let citation = r.event("citations")["items"][0].clone();
    assert!(
        citation["title"].as_str().unwrap().starts_with("Returns"),
        "{citation}"
    );
    assert!(
        citation["found_by"]
            .as_array()
            .unwrap()
            .contains(&"dense".into()),
        "{citation}"
    );
    // History keeps which search found it.
    let h = t.history(&token, &r.conversation()).await;
    assert_eq!(h.json["messages"][1]["citations"][0], citation);
    let prompt = t.llm.requests()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains("30 days"), "{prompt}");
}
