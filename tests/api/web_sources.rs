//! The knowledge fetcher's bounds (SPEC §10): internal addresses only when the
//! operator allows them, every redirect hop re-checked, bodies capped as they
//! stream, nested sitemaps counted, and folder loops reported.

use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use deskbell::config::{Config, Env, KnowledgeSource};

/// Ingests one site whose knowledge is `sources` (TOML array items).
async fn ingest(sources: &str) -> deskbell::knowledge::Report {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_toml(
        &format!(
            "[server]\ndata_dir = \"{}\"\n[[site]]\nid = \"web\"\nknowledge = [{sources}]\n",
            dir.path().display()
        ),
        "web.toml",
        &Env::empty(),
    )
    .unwrap();
    deskbell::knowledge::ingest_site(dir.path(), &config.sites[0], None)
        .await
        .unwrap()
}

fn page(body: &str) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html")],
        format!("<html><head><title>T</title></head><body><p>{body}</p></body></html>"),
    )
        .into_response()
}

fn reasons(report: &deskbell::knowledge::Report) -> String {
    format!("{:?}", report.skipped)
}

async fn site() -> String {
    let app = axum::Router::new().fallback(|uri: Uri| async move {
        let port = uri.port_u16().unwrap_or(0);
        match uri.path() {
            "/page" => page("An ordinary page."),
            "/to-metadata" => (
                StatusCode::FOUND,
                [(header::LOCATION, "http://169.254.169.254/latest/meta-data")],
            )
                .into_response(),
            "/to-other-host" => (
                StatusCode::FOUND,
                [(header::LOCATION, format!("http://localhost:{port}/page"))],
            )
                .into_response(),
            // No Content-Length: a body that streams on and on.
            "/endless" => {
                let chunk = bytes::Bytes::from(vec![b'a'; 64 * 1024]);
                let chunks = futures_util::stream::iter(
                    (0..200).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
                );
                axum::body::Body::from_stream(chunks).into_response()
            }
            "/index.xml" => {
                let maps: String = (0..600)
                    .map(|i| format!("<sitemap><loc>/maps/{i}.xml</loc></sitemap>"))
                    .collect();
                format!(r#"<?xml version="1.0"?><sitemapindex>{maps}</sitemapindex>"#)
                    .into_response()
            }
            p if p.starts_with("/maps/") => {
                r#"<?xml version="1.0"?><urlset><url><loc>/page</loc></url></urlset>"#
                    .into_response()
            }
            _ => StatusCode::NOT_FOUND.into_response(),
        }
    });
    deskbell::testkit::serve_on_loopback(app).await.unwrap()
}

#[tokio::test]
async fn an_internal_address_is_fetched_only_when_the_source_allows_it() {
    let base = site().await;
    let refused = ingest(&format!("\"{base}/page\"")).await;
    assert_eq!(refused.added, 0);
    assert!(
        reasons(&refused).contains("private"),
        "{}",
        reasons(&refused)
    );
    let allowed = ingest(&format!(
        "{{ path = \"{base}/page\", allow_private = true }}"
    ))
    .await;
    assert_eq!(allowed.added, 1, "{}", reasons(&allowed));
}

#[tokio::test]
async fn every_redirect_hop_is_checked() {
    let base = site().await;
    for path in ["/to-metadata", "/to-other-host"] {
        let report = ingest(&format!(
            "{{ path = \"{base}{path}\", allow_private = true }}"
        ))
        .await;
        assert_eq!(report.added, 0, "{path}");
        assert!(
            reasons(&report).contains("redirect"),
            "{path}: {}",
            reasons(&report)
        );
    }
}

#[tokio::test]
async fn a_body_without_a_length_is_capped_as_it_streams() {
    let base = site().await;
    let report = ingest(&format!(
        "{{ path = \"{base}/endless\", allow_private = true }}"
    ))
    .await;
    assert_eq!(report.added, 0);
    assert!(
        reasons(&report).contains("larger than"),
        "{}",
        reasons(&report)
    );
}

#[tokio::test]
async fn nested_sitemaps_count_against_the_page_cap() {
    let base = site().await;
    let report = ingest(&format!(
        "{{ path = \"{base}/index.xml\", allow_private = true }}"
    ))
    .await;
    assert!(
        reasons(&report).contains("over the limit of 500 pages"),
        "600 nested sitemaps cannot be read past the cap"
    );
}

#[tokio::test]
async fn a_folder_reached_again_through_a_link_is_reported_not_read_twice() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("a.md"), "# A\nAbout a.").unwrap();
    std::os::unix::fs::symlink(&docs, docs.join("loop")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut config = Config::from_toml(
        &format!(
            "[server]\ndata_dir = \"{}\"\n[[site]]\nid = \"web\"\n",
            data.path().display()
        ),
        "web.toml",
        &Env::empty(),
    )
    .unwrap();
    config.sites[0].knowledge = vec![KnowledgeSource::Path(docs.display().to_string())];
    let report = deskbell::knowledge::ingest_site(data.path(), &config.sites[0], None)
        .await
        .unwrap();
    assert_eq!(report.added, 1, "{report:?}");
    assert!(reasons(&report).contains("already read"), "{report:?}");
}
