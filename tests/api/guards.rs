use serde_json::json;

use crate::support::{ORIGIN, TestApp};

fn forge(token: &str) -> String {
    let mut parts: Vec<String> = token.split('.').map(String::from).collect();
    let tag = parts[2].clone();
    let flipped = if tag.starts_with('A') {
        tag.replacen('A', "B", 1)
    } else {
        format!("A{}", &tag[1..])
    };
    parts[2] = flipped;
    parts.join(".")
}

#[tokio::test]
async fn a_missing_or_unlisted_origin_is_refused_before_anything_else() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let body = json!({"message": "hi"}).to_string();
    for origin in [
        None,
        Some("https://evil.example"),
        Some("http://shop.example"),
        Some("https://shop.example:444"),
    ] {
        let r = t
            .post_raw("/v1/ask", Some(&token), origin, body.clone())
            .await;
        assert_eq!(
            (r.status, r.code()),
            (403, "origin_not_allowed"),
            "{origin:?}"
        );
    }
    // Even a malformed body or a missing token is refused for its origin first.
    let r = t
        .post_raw("/v1/ask", None, Some("https://evil.example"), "{".into())
        .await;
    assert_eq!(r.code(), "origin_not_allowed");
    assert!(t.llm.requests().is_empty());
}

#[tokio::test]
async fn missing_malformed_forged_and_foreign_tokens_get_401() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let other_site = t.visitor_for("other").await;
    let foreign_deployment = {
        let keys = deskbell::secret::Keys::derive(&deskbell::secret::Secret::new(
            "some-other-deployments-secret-0123456789",
        ));
        let claims = deskbell::visitor::token::Claims {
            site: "acme".into(),
            visitor: "v_x".into(),
            user_id: None,
            issued_at: 0,
        };
        deskbell::visitor::token::issue(&keys.visitor_tokens, &claims)
    };
    let body = json!({"message": "hi"}).to_string();
    let missing = t
        .post_raw("/v1/ask", None, Some(ORIGIN), body.clone())
        .await;
    assert_eq!(
        (missing.status, missing.code()),
        (401, "invalid_visitor_token")
    );
    for bad in [
        "garbage",
        "dbv1.e30.",
        "dbv1..",
        &forge(&token),
        &other_site,
        &foreign_deployment,
    ] {
        let r = t
            .post_raw("/v1/ask", Some(bad), Some(ORIGIN), body.clone())
            .await;
        assert_eq!(
            (r.status, r.code()),
            (401, "invalid_visitor_token"),
            "{bad}"
        );
        let h = t.history(bad, "c_00000000000000000000000000000000").await;
        assert_eq!(h.status, 401, "{bad}");
    }
}

#[tokio::test]
async fn cors_preflights_are_answered_for_listed_origins_only() {
    let t = TestApp::start().await;
    let preflight = |origin: &'static str| {
        t.http
            .request(reqwest::Method::OPTIONS, format!("{}/v1/ask", t.base))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .send()
    };
    let ok = preflight(ORIGIN).await.unwrap();
    assert_eq!(ok.headers()["access-control-allow-origin"], ORIGIN);
    let allowed_headers = ok.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(allowed_headers.contains("authorization") && allowed_headers.contains("content-type"));
    let evil = preflight("https://evil.example").await.unwrap();
    assert!(evil.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn a_site_that_requires_verified_identity_refuses_anonymous_visitors() {
    let t = TestApp::with(|c| c.sites[0].require_verified_identity = true).await;
    let anonymous = t.visitor().await;
    let r = t.question(&anonymous, None, "hi").await;
    assert_eq!((r.status, r.code()), (403, "identity_invalid"));
    let v = t.verified_visitor("user-7").await;
    let verified = v.json["token"].as_str().unwrap();
    assert_eq!(t.question(verified, None, "hi").await.status, 200);
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t = TestApp::with(|c| c.server.header_read_timeout_s = 0.3).await;
    let addr = t.base.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"POST /v1/ask HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        slow.read_to_end(&mut buf),
    )
    .await;
    assert!(read.is_ok(), "the server closed the connection");
    // Healthy clients are unaffected.
    assert_eq!(
        t.http
            .get(format!("{}/healthz", t.base))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}
