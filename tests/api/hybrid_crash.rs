//! An ingest killed part way (SPEC §21): the real binary aborts at a chosen point
//! after embedding a new document and before the index's commit; the index left
//! behind is the previous generation, whole, vectors and all, and the next ingest
//! completes it.

use std::path::Path;

use deskbell::config::{Config, Env};
use deskbell::knowledge::{Knowledge, Passage};

use crate::hybrid::test_embedder;
use crate::support::{SECRET, deskbell_command, succeeded};

fn config_text(dir: &Path) -> String {
    format!(
        "[server]\ndata_dir = \"{data}\"\ndatabase_url = \"sqlite://{db}\"\n\
         [knowledge]\nembedding_model = \"{model}\"\n\
         [[site]]\nid = \"acme\"\norigins = [\"https://acme.example\"]\nknowledge = [\"{docs}\"]\n",
        data = dir.join("data").display(),
        db = dir.join("deskbell.db").display(),
        model = test_embedder().display(),
        docs = dir.join("docs").display(),
    )
}

fn ingest(config: &Path, crash_at: Option<&str>) -> std::process::Output {
    let mut command = deskbell_command();
    command
        .args(["ingest", "--config"])
        .arg(config)
        .env("BETTER_AUTH_SECRET", SECRET)
        .env("DESKBELL_EMBEDDING", "on");
    if let Some(point) = crash_at {
        command.env("DESKBELL_CRASH_AT", point);
    }
    command.output().unwrap()
}

/// Runs an ingest that aborts at the crash point `point`, and checks it did.
fn aborted_at(config: &Path, point: &str) {
    let killed = ingest(config, Some(point));
    let stderr = String::from_utf8_lossy(&killed.stderr);
    assert!(!killed.status.success(), "the ingest was aborted");
    assert!(stderr.contains(&format!("crash point {point}")), "{stderr}");
}

/// The passages found for `q` in the index on disk.
async fn passages(dir: &Path, q: &str) -> Vec<Passage> {
    let env = Env::empty().with("BETTER_AUTH_SECRET", SECRET);
    let config = Config::from_toml(&config_text(dir), "crash.toml", &env).unwrap();
    let knowledge = Knowledge::open(&config).await.unwrap();
    knowledge.search("acme", q).await.unwrap()
}

/// The titles of the passages found for `q` in the index on disk, and whether
/// each was found by meaning.
async fn search(dir: &Path, q: &str) -> Vec<(String, bool)> {
    passages(dir, q)
        .await
        .into_iter()
        .map(|p| (p.title, p.found.dense.is_some()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ingest_killed_before_its_commit_leaves_the_previous_index_whole() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("returns.md"),
        "# Returns\n\nYou may return any item within 30 days for a full refund.",
    )
    .unwrap();
    let config = dir.path().join("crash.toml");
    std::fs::write(&config, config_text(dir.path())).unwrap();
    succeeded(ingest(&config, None));

    std::fs::write(
        docs.join("gifts.md"),
        "# Gift cards\n\nGift cards never expire and can be used online.",
    )
    .unwrap();
    aborted_at(&config, "ingest_before_commit");
    // The previous generation: the returns page, found by meaning too; nothing of
    // the new page.
    let found = search(dir.path(), "can I send it back?").await;
    assert_eq!(found[0], ("Returns".to_string(), true), "{found:?}");
    assert!(found.iter().all(|(t, _)| t != "Gift cards"), "{found:?}");

    succeeded(ingest(&config, None));
    let found = search(dir.path(), "do gift cards expire").await;
    assert_eq!(found[0], ("Gift cards".to_string(), true), "{found:?}");
}

/// Killed after the commit, while the merge it started (two of three documents
/// changed, so their segment is past a fifth dead) may be running: the index
/// holds the new text once and the old text nowhere, and the next ingest,
/// which finds the manifest of before, leaves each document once.
#[tokio::test(flavor = "multi_thread")]
async fn an_ingest_killed_while_its_merge_runs_leaves_each_passage_once() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let write = |name: &str, title: &str, days: u32| {
        let text = format!("# {title}\n\nYou may send {title} back within {days} days.");
        std::fs::write(docs.join(name), text).unwrap();
    };
    write("kettles.md", "kettles", 30);
    write("toasters.md", "toasters", 30);
    write("blenders.md", "blenders", 30);
    let config = dir.path().join("crash.toml");
    std::fs::write(&config, config_text(dir.path())).unwrap();
    succeeded(ingest(&config, None));

    write("kettles.md", "kettles", 60);
    write("toasters.md", "toasters", 60);
    aborted_at(&config, "ingest_merging");
    for round in ["after the crash", "after the next ingest"] {
        let found = passages(dir.path(), "send back within days").await;
        let mut texts: Vec<&str> = found.iter().map(|p| p.text.as_str()).collect();
        texts.sort();
        let want = [
            "You may send blenders back within 30 days.",
            "You may send kettles back within 60 days.",
            "You may send toasters back within 60 days.",
        ];
        assert_eq!(texts, want, "{round}");
        succeeded(ingest(&config, None));
    }
}
