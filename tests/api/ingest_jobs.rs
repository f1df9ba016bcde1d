//! A re-ingest from the console is a job, not a request (issue "ownership"):
//! it runs on the server whatever happens to the connection that started it,
//! and its progress is read back while it runs.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::http::{StatusCode, Uri, header};
use axum::response::IntoResponse;
use deskbell::config::KnowledgeSource;
use deskbell::states::OperatorRole;
use serde_json::Value;

use crate::support::TestApp;

/// A web site of `pages` pages listed in one sitemap. Once `slow` is set, each
/// page takes `delay` to answer and reads differently (so an ingest updates
/// every page).
async fn site(pages: usize, delay: Duration, slow: Arc<AtomicBool>) -> String {
    let app = axum::Router::new().fallback(move |uri: Uri| {
        let slow = slow.load(Ordering::Acquire);
        async move {
            let path = uri.path().to_string();
            if path == "/sitemap.xml" {
                let urls: String = (0..pages)
                    .map(|i| format!("<url><loc>/page/{i}</loc></url>"))
                    .collect();
                return format!(r#"<?xml version="1.0"?><urlset>{urls}</urlset>"#).into_response();
            }
            let Some(n) = path.strip_prefix("/page/") else {
                return StatusCode::NOT_FOUND.into_response();
            };
            if slow {
                tokio::time::sleep(delay).await;
            }
            let edition = if slow { "second" } else { "first" };
            (
                [(header::CONTENT_TYPE, "text/html")],
                format!(
                    "<html><head><title>Page {n}</title></head><body><p>Page {n} of the {edition} edition \
                     tells of the blue widget number {n}.</p></body></html>"
                ),
            )
                .into_response()
        }
    });
    deskbell::testkit::serve_on_loopback(app).await.unwrap()
}

/// 120 pages of 3 s each, four at a time: a crawl of some 90 s. Started from
/// the console with `Prefer: respond-async`, it answers 202 at once, its
/// progress grows while it runs, and it finishes with every page updated.
#[tokio::test]
async fn a_ninety_second_crawl_from_the_console_finishes_as_a_job_with_its_progress_seen() {
    let slow = Arc::new(AtomicBool::new(false));
    let base = site(120, Duration::from_secs(3), slow.clone()).await;
    let t = TestApp::with(|c| {
        c.sites[0].knowledge = vec![KnowledgeSource::Folder {
            path: format!("{base}/sitemap.xml"),
            base_url: None,
            allow_private: true,
        }];
    })
    .await;
    slow.store(true, Ordering::Release);
    let admin = t.console(OperatorRole::Admin).await;
    let started = admin
        .http
        .post(format!("{}/v1/operator/knowledge/acme/ingest", admin.base))
        .header("cookie", &admin.cookie)
        .header("x-deskbell-csrf", &admin.csrf)
        .header("prefer", "respond-async")
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    let location = started.headers()["location"].to_str().unwrap().to_string();
    let job: Value = started.json().await.unwrap();
    assert_eq!(job["state"], "running");
    assert!(
        location.ends_with(job["job"].as_str().unwrap()),
        "{location}"
    );

    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(240);
    let last = loop {
        let j = admin.get(&location).await;
        assert_eq!(j.status, 200, "{:?}", j.json);
        if j.json["state"] != "running" {
            break j.json;
        }
        seen.push(j.json["read"].as_i64().unwrap());
        assert!(Instant::now() < deadline, "the job never ended");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert_eq!(last["state"], "finished", "{last}");
    assert_eq!(last["report"]["updated"], 120, "{last}");
    assert_eq!(
        (last["read"].as_i64(), last["found"].as_i64()),
        (Some(120), Some(120))
    );
    assert!(seen.len() >= 60, "it ran for over a minute: {seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "progress only grows: {seen:?}"
    );
    let distinct: HashSet<i64> = seen.iter().copied().collect();
    assert!(
        distinct.len() >= 10,
        "progress was seen as it went: {seen:?}"
    );
    let found = admin
        .get("/v1/operator/knowledge/acme/search?q=second+edition+blue+widget")
        .await;
    assert!(
        found.json["passages"]
            .as_array()
            .is_some_and(|p| !p.is_empty()),
        "{:?}",
        found.json
    );
    let listed = admin.get("/v1/operator/knowledge").await;
    assert_eq!(listed.json["items"][0]["last_report"]["updated"], 120);
}

/// Without `Prefer: respond-async` the call waits and returns the report, as
/// before (SPEC §15); an unknown job is a 404.
#[tokio::test]
async fn a_plain_ingest_call_returns_its_report_and_an_unknown_job_is_not_found() {
    let t = TestApp::start().await;
    let admin = t.console(OperatorRole::Admin).await;
    let r = admin
        .send(
            reqwest::Method::POST,
            "/v1/operator/knowledge/acme/ingest",
            serde_json::json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert!(r.json["chunks"].is_number(), "{:?}", r.json);
    let r = admin
        .get("/v1/operator/knowledge/acme/ingest/ingest_0123")
        .await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
    let r = admin
        .get("/v1/operator/knowledge/nosuch/ingest/ingest_0123")
        .await;
    assert_eq!((r.status, r.code()), (404, "not_found"));
    // A job is read only within its own site, and only by operators.
    let started = admin
        .http
        .post(format!("{}/v1/operator/knowledge/acme/ingest", admin.base))
        .header("cookie", &admin.cookie)
        .header("x-deskbell-csrf", &admin.csrf)
        .header("prefer", "respond-async")
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    let job: Value = started.json().await.unwrap();
    let job = job["job"].as_str().unwrap();
    let r = admin
        .get(&format!("/v1/operator/knowledge/other/ingest/{job}"))
        .await;
    assert_eq!(r.status, 404, "{:?}", r.json);
    let r = reqwest::get(format!(
        "{}/v1/operator/knowledge/acme/ingest/{job}",
        t.base
    ))
    .await
    .unwrap();
    assert_eq!(r.status(), 401);
}
