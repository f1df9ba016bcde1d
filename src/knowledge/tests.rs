//! Opening a site's knowledge (`Knowledge::open`, the benchmarks' and
//! `deskbell ingest`'s way in).

use super::*;
use crate::config::{Config, Env, KnowledgeSource};

/// An index left by a version with another schema (here, before the `flat`
/// field) is built again on opening, not refused: `SiteIndex::open` reads the
/// fields of this version's schema.
#[tokio::test]
async fn an_index_of_another_schema_is_built_again_on_opening() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("returns.md"),
        "# Returns\n\nReturn anything within thirty days.",
    )
    .unwrap();
    let data = dir.path().join("data");
    let text = format!(
        "[server]\ndata_dir = \"{}\"\n[[site]]\nid = \"acme\"\n[knowledge]\nembedding = \"off\"\n",
        data.display()
    );
    let mut config = Config::from_toml(&text, "test", &Env::empty()).unwrap();
    config.sites[0].knowledge = vec![KnowledgeSource::Path(docs.display().to_string())];

    // The schema before the `flat` field, with a manifest, as that version left it.
    let old_dir = index::folder(&data, "acme");
    std::fs::create_dir_all(&old_dir).unwrap();
    let mut old = tantivy::schema::Schema::builder();
    old.add_text_field("path", tantivy::schema::STRING | tantivy::schema::STORED);
    old.add_text_field("title", tantivy::schema::TEXT | tantivy::schema::STORED);
    old.add_text_field("url", tantivy::schema::STORED);
    old.add_text_field("body", tantivy::schema::TEXT | tantivy::schema::STORED);
    old.add_bytes_field("vector", tantivy::schema::FAST);
    tantivy::Index::create_in_dir(&old_dir, old.build()).unwrap();
    std::fs::write(old_dir.join(index::MANIFEST), "{}").unwrap();

    let knowledge = Knowledge::open(&config).await.unwrap();
    let found = knowledge.search("acme", "thirty days").await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].text, "Return anything within thirty days.");
}
