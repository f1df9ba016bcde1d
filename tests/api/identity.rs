//! Identity tokens (SPEC §4): an HS256 JWT signed with the site's identity secret
//! binds a visitor to its `sub` like a `user_hash` does, but expires.

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};

use crate::support::{IDENTITY_SECRET, ORIGIN, TestApp, user_hash};

fn token_with(secret: &str, claims: Value) -> String {
    let key = EncodingKey::from_secret(secret.as_bytes()).unwrap();
    encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap()
}

fn now_s(t: &TestApp) -> i64 {
    deskbell::clock::Clock::now_ms(&*t.clock) / 1000
}

async fn mint(t: &TestApp, body: Value) -> crate::support::Reply {
    t.post("/v1/visitors", None, ORIGIN, body).await
}

#[tokio::test]
async fn an_identity_token_binds_its_user_as_the_hash_does() {
    let t = TestApp::start().await;
    // An audience, as many JWT libraries add by default, is no reason to refuse.
    let token = token_with(
        IDENTITY_SECRET,
        json!({"sub": "user-9", "exp": now_s(&t) + 3600, "name": "Ann", "aud": "acme"}),
    );
    let by_token = mint(&t, json!({"site": "acme", "identity_token": token})).await;
    assert_eq!(by_token.status, 200, "{:?}", by_token.json);
    let by_hash = mint(
        &t,
        json!({"site": "acme", "user_id": "user-9", "user_hash": user_hash("user-9")}),
    )
    .await;
    assert_eq!(by_token.json["visitor"], by_hash.json["visitor"]);
}

#[tokio::test]
async fn expired_premature_long_lived_forged_and_unsigned_tokens_are_refused() {
    let t = TestApp::start().await;
    let now = now_s(&t);
    let unsigned = {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.",
            b64.encode(r#"{"alg":"none","typ":"JWT"}"#),
            b64.encode(json!({"sub": "user-9", "exp": now + 3600}).to_string())
        )
    };
    let cases = [
        (
            "expired",
            token_with(IDENTITY_SECRET, json!({"sub": "u", "exp": now - 120})),
        ),
        (
            "not yet valid",
            token_with(
                IDENTITY_SECRET,
                json!({"sub": "u", "exp": now + 3600, "nbf": now + 600}),
            ),
        ),
        (
            "more than a day ahead",
            token_with(IDENTITY_SECRET, json!({"sub": "u", "exp": now + 48 * 3600})),
        ),
        (
            "another key",
            token_with("not-the-site-secret", json!({"sub": "u", "exp": now + 60})),
        ),
        (
            "no expiry",
            token_with(IDENTITY_SECRET, json!({"sub": "u"})),
        ),
        ("alg none", unsigned),
        ("HS384 with the right key", {
            let key = EncodingKey::from_secret(IDENTITY_SECRET.as_bytes()).unwrap();
            encode(
                &Header::new(Algorithm::HS384),
                &json!({"sub": "u", "exp": now + 60}),
                &key,
            )
            .unwrap()
        }),
        ("not a token", "hello".to_string()),
    ];
    for (why, token) in cases {
        let r = mint(&t, json!({"site": "acme", "identity_token": token})).await;
        assert_eq!((r.status, r.code()), (403, "identity_invalid"), "{why}");
    }
}

#[tokio::test]
async fn a_site_that_takes_identity_tokens_only_refuses_the_hash() {
    let t = TestApp::with(|c| c.sites[0].identity = deskbell::config::IdentityForms::Jwt).await;
    let r = mint(
        &t,
        json!({"site": "acme", "user_id": "user-9", "user_hash": user_hash("user-9")}),
    )
    .await;
    assert_eq!((r.status, r.code()), (403, "identity_invalid"));
    let token = token_with(
        IDENTITY_SECRET,
        json!({"sub": "user-9", "exp": now_s(&t) + 60}),
    );
    let r = mint(&t, json!({"site": "acme", "identity_token": token})).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
}
