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
            allow_private: false,
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
        let out = crate::support::succeeded(
            crate::support::deskbell_command()
                .args(["ingest", "--config"])
                .arg(&config)
                .output()
                .unwrap(),
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let first = ingest();
    assert!(
        first.starts_with("acme: 4 added, 0 updated, 0 unchanged, 0 removed"),
        "{first}"
    );
    assert!(
        first.contains("logo.png: not a Markdown, text, HTML or PDF file"),
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

/// A one-page PDF with `text` in Helvetica, with a correct cross-reference table.
fn minimal_pdf(text: &str) -> Vec<u8> {
    let content = format!("BT /F1 18 Tf 72 700 Td ({text}) Tj ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_string(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>".to_string(),
        format!("<< /Length {} >>\nstream\n{content}\nendstream", content.len()),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
    ];
    let mut pdf = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
    }
    let xref = pdf.len();
    pdf.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for offset in offsets {
        pdf.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    pdf.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    pdf
}

#[tokio::test]
async fn pdfs_are_read_and_broken_ones_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("kettle-care.pdf"),
        minimal_pdf("Descale the kettle every month with citric acid."),
    )
    .unwrap();
    std::fs::write(
        docs.join("broken.pdf"),
        b"%PDF-1.4\nthis is not really a pdf",
    )
    .unwrap();
    let data = dir.path().join("data");
    let t = TestApp::with(|c| {
        c.server.data_dir = data.clone();
        c.sites[0].knowledge = vec![KnowledgeSource::Path(docs.display().to_string())];
    })
    .await;
    let site = t.app.config.sites[0].clone();
    let report = deskbell::knowledge::ingest_site(&data, &site, None)
        .await
        .unwrap();
    assert_eq!(report.unchanged, 1, "{report:?}");
    assert_eq!(report.skipped.len(), 1);
    assert!(
        report.skipped[0].path.ends_with("broken.pdf")
            && report.skipped[0].reason == "not a readable PDF"
    );
    let token = t.visitor().await;
    t.question(&token, None, "How do I descale the kettle?")
        .await;
    let prompt = system_prompt(&t.llm.requests()[0]);
    assert!(
        prompt.contains("[1] kettle care\nDescale the kettle every month"),
        "{prompt}"
    );
}

#[tokio::test]
async fn a_site_is_read_through_its_sitemap_politely() {
    use std::sync::{Arc, Mutex};
    let requested = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = requested.clone();
    let site = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let log = log.clone();
        async move {
            let path = uri.path().to_string();
            log.lock().unwrap().push(path.clone());
            let page = |title: &str, body: &str| format!("<html><head><title>{title}</title></head><body><h1>{title}</h1><p>{body}</p></body></html>");
            match path.as_str() {
                "/robots.txt" => (axum::http::StatusCode::OK, "User-agent: *\nDisallow: /private\n".to_string()),
                "/sitemap.xml" => (axum::http::StatusCode::OK, r#"<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><sitemap><loc>/sitemap-pages.xml</loc></sitemap></sitemapindex>"#.to_string()),
                "/sitemap-pages.xml" => (axum::http::StatusCode::OK, r#"<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>/help/shipping</loc></url><url><loc>/help/returns</loc></url><url><loc>/private/secret</loc></url><url><loc>/missing</loc></url><url><loc>https://elsewhere.example/page</loc></url></urlset>"#.to_string()),
                "/help/shipping" => (axum::http::StatusCode::OK, page("Shipping", "Parcels arrive in 3 to 5 working days.")),
                "/help/returns" => (axum::http::StatusCode::OK, page("Returns", "Returns are free for 30 days.")),
                "/private/secret" => (axum::http::StatusCode::OK, page("Secret", "Do not index me.")),
                _ => (axum::http::StatusCode::NOT_FOUND, "not here".to_string()),
            }
        }
    });
    let base = deskbell::testkit::serve_on_loopback(site).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = deskbell::config::Config::from_toml(
        &format!("[server]\ndata_dir = \"{}\"\n[[site]]\nid = \"web\"\nknowledge = [{{ path = \"{base}/sitemap.xml\", allow_private = true }}]\n", dir.path().display()),
        "web.toml",
        &deskbell::config::Env::empty(),
    )
    .unwrap();
    let report = deskbell::knowledge::ingest_site(dir.path(), &config.sites[0], None)
        .await
        .unwrap();
    assert_eq!(report.added, 2, "{report:?}");
    let reasons: Vec<String> = report
        .skipped
        .iter()
        .map(|s| format!("{} {}", s.path.replace(&base, ""), s.reason))
        .collect();
    assert!(
        reasons.contains(&"/private/secret disallowed by robots.txt".to_string()),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&"/missing HTTP 404".to_string()),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&"https://elsewhere.example/page on another host".to_string()),
        "{reasons:?}"
    );
    assert!(
        !requested
            .lock()
            .unwrap()
            .contains(&"/private/secret".to_string()),
        "a disallowed page is never fetched"
    );
    let knowledge = deskbell::knowledge::Knowledge::open(&config).await.unwrap();
    let found = knowledge
        .search("web", "how long do parcels take")
        .await
        .unwrap();
    assert_eq!(found[0].title, "Shipping");
    assert_eq!(
        found[0].url.as_deref(),
        Some(format!("{base}/help/shipping").as_str())
    );
}
