//! Knowledge: ingestion, search and cited answers.

use deskbell::config::KnowledgeSource;
use deskbell::testkit::Reply as Script;
use serde_json::json;

use crate::support::TestApp;

/// A folder of mixed documents, and one file that must be skipped.
fn write_docs(dir: &std::path::Path) {
    std::fs::write(dir.join("shipping.md"), "# Shipping\n\nStandard shipping takes 3 to 5 working days and costs 4.90 EUR.\n\n## Express\n\nExpress shipping takes 1 to 2 working days.").unwrap();
    std::fs::write(
        dir.join("returns.md"),
        "# Returns\n\nYou can return any item within 30 days of delivery for a full refund.",
    )
    .unwrap();
    std::fs::write(
        dir.join("care.txt"),
        "Descale the kettle once a month with citric acid.",
    )
    .unwrap();
    std::fs::write(
        dir.join("warranty.html"),
        "<html><head><title>Warranty</title><script>var secret = 1;</script></head><body><nav>Home | Shop</nav><h1>Warranty</h1><p>Every product carries a two&nbsp;year warranty.</p></body></html>",
    )
    .unwrap();
    std::fs::write(dir.join("logo.png"), [0x89, 0x50, 0x4e, 0x47]).unwrap();
}

async fn app_with_docs() -> (TestApp, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    write_docs(&docs);
    let data = dir.path().join("data");
    let t = TestApp::with(|c| {
        c.server.data_dir = data.clone();
        c.sites[0].knowledge = vec![KnowledgeSource::Folder {
            path: docs.display().to_string(),
            base_url: Some("https://acme.example/help".into()),
        }];
    })
    .await;
    (t, dir)
}

fn system_prompt(request: &serde_json::Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_question_is_answered_from_the_documents_with_citations() {
    let (t, _dir) = app_with_docs().await;
    let token = t.visitor().await;
    t.llm.push(Script::text(
        "Standard shipping takes 3 to 5 working days [1].",
    ));
    let r = t
        .question(&token, None, "How long does shipping take?")
        .await;
    let prompt = system_prompt(&t.llm.requests()[0]);
    assert!(
        prompt.contains("[1] Shipping\nStandard shipping takes 3 to 5 working days"),
        "{prompt}"
    );
    assert!(prompt.contains("cite each fact"), "{prompt}");
    let items = r.event("citations")["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 1, "only the cited source");
    assert_eq!(items[0]["n"], 1);
    assert_eq!(items[0]["title"], "Shipping");
    assert_eq!(items[0]["url"], "https://acme.example/help/shipping");
    assert!(
        items[0]["snippet"]
            .as_str()
            .unwrap()
            .contains("3 to 5 working days")
    );
    let names = r.names();
    assert_eq!(&names[names.len() - 2..], ["citations", "done"]);
    let h = t.history(&token, &r.conversation()).await;
    assert_eq!(h.json["messages"][1]["citations"], json!(items));
}

#[tokio::test]
async fn html_pages_are_read_as_text_with_their_title() {
    let (t, _dir) = app_with_docs().await;
    let token = t.visitor().await;
    t.llm.push(Script::text("Two years [1]."));
    let r = t
        .question(&token, None, "What warranty do products have?")
        .await;
    let prompt = system_prompt(&t.llm.requests()[0]);
    assert!(
        prompt.contains("[1] Warranty\nEvery product carries a two year warranty."),
        "{prompt}"
    );
    assert!(
        !prompt.contains("secret") && !prompt.contains("Home | Shop"),
        "scripts and navigation are dropped"
    );
    assert_eq!(
        r.event("citations")["items"][0]["url"],
        "https://acme.example/help/warranty"
    );
}

#[tokio::test]
async fn a_typo_still_finds_the_passage() {
    let (t, _dir) = app_with_docs().await;
    let token = t.visitor().await;
    t.question(&token, None, "retrun policy?").await;
    let prompt = system_prompt(&t.llm.requests()[0]);
    assert!(prompt.contains("[1] Returns"), "{prompt}");
}

#[tokio::test]
async fn an_answer_that_cites_nothing_gets_no_citations() {
    let (t, _dir) = app_with_docs().await;
    let token = t.visitor().await;
    t.llm.push(Script::text("Hello! How can I help?"));
    let r = t.question(&token, None, "shipping hello").await;
    assert!(!r.names().contains(&"citations"));
    let h = t.history(&token, &r.conversation()).await;
    assert_eq!(h.json["messages"][1]["citations"], json!([]));
}

#[tokio::test]
async fn when_nothing_relevant_is_found_the_model_is_told_not_to_invent() {
    let (t, _dir) = app_with_docs().await;
    let token = t.visitor().await;
    t.question(&token, None, "zyzzyva quux").await;
    let prompt = system_prompt(&t.llm.requests()[0]);
    assert!(
        prompt.contains("No relevant passages were found"),
        "{prompt}"
    );
    assert!(prompt.contains("do not invent"));
}

#[tokio::test]
async fn the_resumed_turn_runs_no_retrieval_and_cites_tool_results_only() {
    let (t, _dir) = app_with_docs().await;
    let token = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "cancel_order",
        json!({"order_id": 42}),
    )]));
    let r = t
        .question(&token, None, "Cancel my order 42, shipping is too slow")
        .await;
    assert!(system_prompt(&t.llm.requests()[0]).contains("[1] Shipping"));
    t.llm.push(Script::text("Cancelled [1]."));
    let done = t
        .answer(&token, &r.conversation(), r.event("confirm"), "confirm")
        .await;
    let continuation = system_prompt(&t.llm.requests()[1]);
    assert!(
        !continuation.contains("Sources from the site's documents"),
        "{continuation}"
    );
    assert!(!continuation.contains("No relevant passages"));
    let items = &done.event("citations")["items"];
    assert_eq!(items.as_array().unwrap().len(), 1);
    assert_eq!(
        items[0]["title"], "Cancel an order",
        "the tool's result, not a document"
    );
    assert_eq!(items[0]["url"], serde_json::Value::Null);
}

#[test]
fn ingest_reports_skips_and_is_incremental() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    write_docs(&docs);
    std::fs::write(docs.join("huge.md"), vec![b'a'; 6 * 1024 * 1024]).unwrap();
    let config = dir.path().join("deskbell.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ndata_dir = \"{}\"\n[[site]]\nid = \"acme\"\nknowledge = [\"{}\", \"{}\"]\n",
            dir.path().join("data").display(),
            docs.display(),
            dir.path().join("missing").display()
        ),
    )
    .unwrap();
    let ingest = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_deskbell"))
            .args(["ingest", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let first = ingest();
    assert!(
        first.starts_with("acme: 4 added, 0 updated, 0 unchanged, 0 removed"),
        "{first}"
    );
    assert!(
        first.contains("logo.png: not a Markdown, text or HTML file"),
        "{first}"
    );
    assert!(first.contains("huge.md: larger than 5 MiB"), "{first}");
    assert!(first.contains("missing: no such file or folder"), "{first}");
    let second = ingest();
    assert!(
        second.starts_with("acme: 0 added, 0 updated, 4 unchanged, 0 removed (0 chunks written)"),
        "{second}"
    );
    std::fs::write(
        docs.join("returns.md"),
        "# Returns\n\nReturns are free within 60 days.",
    )
    .unwrap();
    std::fs::remove_file(docs.join("care.txt")).unwrap();
    let third = ingest();
    assert!(
        third.starts_with("acme: 0 added, 1 updated, 2 unchanged, 1 removed"),
        "{third}"
    );
}
