use serde_json::json;

use crate::support::{ORIGIN, TestApp, user_hash};

#[tokio::test]
async fn an_anonymous_visitor_gets_a_signed_token() {
    let t = TestApp::start().await;
    let r = t
        .post("/v1/visitors", None, ORIGIN, json!({"site": "acme"}))
        .await;
    assert_eq!(r.status, 200);
    assert!(r.json["visitor"].as_str().unwrap().starts_with("v_"));
    assert!(r.json["token"].as_str().unwrap().starts_with("dbv1."));
    let again = t
        .post("/v1/visitors", None, ORIGIN, json!({"site": "acme"}))
        .await;
    assert_ne!(
        r.json["visitor"], again.json["visitor"],
        "anonymous visitors are distinct"
    );
}

#[tokio::test]
async fn the_same_verified_user_gets_the_same_visitor_and_conversations_on_any_device() {
    let t = TestApp::start().await;
    let body =
        json!({"site": "acme", "user_id": "alice@acme", "user_hash": user_hash("alice@acme")});
    let phone = t.post("/v1/visitors", None, ORIGIN, body.clone()).await;
    let laptop = t.post("/v1/visitors", None, ORIGIN, body).await;
    assert_eq!(phone.status, 200);
    assert_eq!(phone.json["visitor"], laptop.json["visitor"]);
    let conversation = t
        .question(phone.json["token"].as_str().unwrap(), None, "From my phone")
        .await
        .conversation();
    let h = t
        .history(laptop.json["token"].as_str().unwrap(), &conversation)
        .await;
    assert_eq!(h.status, 200);
}

#[tokio::test]
async fn a_wrong_user_hash_is_refused() {
    let t = TestApp::start().await;
    for hash in [
        user_hash("bob"),
        "zz".into(),
        String::new(),
        user_hash("alice").to_uppercase().replace('A', "B"),
    ] {
        let r = t
            .post(
                "/v1/visitors",
                None,
                ORIGIN,
                json!({"site": "acme", "user_id": "alice", "user_hash": hash}),
            )
            .await;
        assert_eq!((r.status, r.code()), (403, "identity_invalid"));
    }
    // A site without an identity secret verifies nobody.
    let r = t
        .post(
            "/v1/visitors",
            None,
            "https://other.example",
            json!({"site": "other", "user_id": "a", "user_hash": user_hash("a")}),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, "identity_invalid"));
}

#[tokio::test]
async fn visitor_requests_are_checked() {
    let t = TestApp::start().await;
    let r = t
        .post(
            "/v1/visitors",
            None,
            "https://evil.example",
            json!({"site": "acme"}),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, "origin_not_allowed"));
    let r = t
        .post("/v1/visitors", None, ORIGIN, json!({"site": "nope"}))
        .await;
    assert_eq!((r.status, r.code()), (404, "site_not_found"));
    let r = t
        .post(
            "/v1/visitors",
            None,
            ORIGIN,
            json!({"site": "acme", "user_id": "alice"}),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let r = t
        .post(
            "/v1/visitors",
            None,
            ORIGIN,
            json!({"site": "acme", "surprise": 1}),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let r = t
        .post_raw("/v1/visitors", None, Some(ORIGIN), "nope".into())
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
}
