//! The operator API's doors (SPEC §15): sign-in, sessions, CSRF, roles, tokens,
//! and the separation of operator and visitor credentials.

use std::time::Instant;

use deskbell::states::OperatorRole;
use reqwest::Method;
use serde_json::json;

use crate::support::{ORIGIN, PASSWORD, TestApp, session_cookie};

const HOUR_MS: i64 = 3600 * 1000;

#[tokio::test]
async fn an_operator_signs_in_and_out_and_the_session_is_revoked_on_the_server() {
    let t = TestApp::start().await;
    t.add_operator("Ada@Example.test", OperatorRole::Admin)
        .await;
    let r = t.sign_in(" ada@example.TEST ", PASSWORD).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(
        r.json["operator"],
        json!({"email": "ada@example.test", "role": "admin"})
    );
    let set = r.headers["set-cookie"].to_str().unwrap().to_string();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/v1/operator"] {
        assert!(set.contains(part), "{set}");
    }
    assert!(
        !set.contains("Secure"),
        "a loopback server's cookie works over plain HTTP: {set}"
    );
    let console = crate::support::Console {
        base: t.base.clone(),
        http: t.http.clone(),
        cookie: session_cookie(&r),
        csrf: r.json["csrf"].as_str().unwrap().to_string(),
    };
    let me = console.get("/v1/operator/session").await;
    assert_eq!(me.status, 200);
    assert_eq!(me.json["csrf"], r.json["csrf"]);

    let without_csrf = console
        .call(Method::DELETE, "/v1/operator/session", None, false)
        .await;
    assert_eq!(
        (without_csrf.status, without_csrf.code()),
        (403, "csrf_invalid")
    );
    let out = console
        .call(Method::DELETE, "/v1/operator/session", None, true)
        .await;
    assert_eq!(out.status, 204);
    assert!(
        out.headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    // The cookie itself still exists in a copy; the server no longer honours it.
    let after = console.get("/v1/operator/conversations").await;
    assert_eq!(
        (after.status, after.code()),
        (401, "operator_unauthenticated")
    );
}

#[tokio::test]
async fn a_secure_cookie_is_set_when_the_server_is_not_on_loopback() {
    let t = TestApp::with(|c| c.server.bind = "0.0.0.0:8080".into()).await;
    t.add_operator("ada@example.test", OperatorRole::Admin)
        .await;
    let r = t.sign_in("ada@example.test", PASSWORD).await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("; Secure")
    );
}

/// Behind a TLS proxy on loopback (`public_url` is https), browsers reach the
/// console over HTTPS: the cookie is `Secure` although the server is bound to
/// loopback. (`public_url` used to be checked and then ignored.)
#[tokio::test]
async fn a_secure_cookie_is_set_behind_a_tls_proxy_on_loopback() {
    let t = TestApp::with(|c| c.server.public_url = Some("https://help.acme.example".into())).await;
    t.add_operator("ada@example.test", OperatorRole::Admin)
        .await;
    let r = t.sign_in("ada@example.test", PASSWORD).await;
    assert_eq!(r.status, 200);
    let cookie = r.headers["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");
}

#[tokio::test]
async fn a_wrong_password_and_an_unknown_email_get_the_same_answer_in_comparable_time() {
    let t = TestApp::start().await;
    t.add_operator("ada@example.test", OperatorRole::Admin)
        .await;
    // The decoy hash is made on first use; that is not what is compared.
    let _ = t.sign_in("warm@example.test", "whatever-password").await;
    let mut wrong = Vec::new();
    let mut unknown = Vec::new();
    for i in 0..2 {
        let started = Instant::now();
        let a = t
            .sign_in("ada@example.test", &format!("wrong-password-{i}"))
            .await;
        wrong.push(started.elapsed());
        let started = Instant::now();
        let b = t
            .sign_in(&format!("nobody{i}@example.test"), "wrong-password")
            .await;
        unknown.push(started.elapsed());
        assert_eq!((a.status, a.code()), (401, "login_failed"));
        assert_eq!(a.json, b.json, "the same body for both");
    }
    // Both run one Argon2 verification; an unknown email is not answered at once.
    let (w, u) = (wrong.iter().min().unwrap(), unknown.iter().min().unwrap());
    assert!(
        u.as_secs_f64() >= w.as_secs_f64() * 0.4,
        "unknown {u:?} vs wrong {w:?}"
    );
}

#[tokio::test]
async fn five_failures_lock_an_email_out_for_fifteen_minutes() {
    let t = TestApp::start().await;
    t.add_operator("ada@example.test", OperatorRole::Admin)
        .await;
    for _ in 0..5 {
        let r = t.sign_in("ada@example.test", "not-the-password").await;
        assert_eq!(r.code(), "login_failed");
    }
    let locked = t.sign_in("ada@example.test", PASSWORD).await;
    assert_eq!((locked.status, locked.code()), (429, "rate_limited"));
    let wait: u64 = locked.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=900).contains(&wait), "{wait}");
    t.clock.advance_ms(15 * 60 * 1000 + 1000);
    assert_eq!(t.sign_in("ada@example.test", PASSWORD).await.status, 200);
}

#[tokio::test]
async fn sign_ins_sent_at_once_cannot_slip_past_the_limit() {
    let t = TestApp::start().await;
    t.add_operator("ada@example.test", OperatorRole::Admin)
        .await;
    let guesses: Vec<String> = (0..20).map(|i| format!("guess-number-{i}")).collect();
    let tries = guesses.iter().map(|g| t.sign_in("ada@example.test", g));
    let replies = futures_util::future::join_all(tries).await;
    let checked = replies
        .iter()
        .filter(|r| r.code() == "login_failed")
        .count();
    let refused = replies
        .iter()
        .filter(|r| r.code() == "rate_limited")
        .count();
    assert_eq!(checked + refused, 20);
    assert!(checked <= 5, "{checked} passwords were checked");
}

#[tokio::test]
async fn five_failures_from_one_address_lock_it_out_whatever_the_email() {
    let t = TestApp::start().await;
    t.add_operator("ada@example.test", OperatorRole::Admin)
        .await;
    for i in 0..5 {
        let r = t
            .sign_in(&format!("guess{i}@example.test"), "a-guessed-password")
            .await;
        assert_eq!(r.code(), "login_failed");
    }
    let r = t.sign_in("ada@example.test", PASSWORD).await;
    assert_eq!((r.status, r.code()), (429, "rate_limited"));
}

#[tokio::test]
async fn a_session_idle_for_twelve_hours_expires_and_one_in_use_does_not() {
    let t = TestApp::start().await;
    let console = t.console(OperatorRole::Agent).await;
    t.clock.advance_ms(11 * HOUR_MS);
    assert_eq!(console.get("/v1/operator/conversations").await.status, 200);
    t.clock.advance_ms(11 * HOUR_MS);
    assert_eq!(
        console.get("/v1/operator/conversations").await.status,
        200,
        "used 11 h ago"
    );
    t.clock.advance_ms(12 * HOUR_MS);
    let r = console.get("/v1/operator/conversations").await;
    assert_eq!((r.status, r.code()), (401, "operator_unauthenticated"));
}

#[tokio::test]
async fn operator_routes_refuse_visitor_tokens_and_visitor_routes_refuse_operator_credentials() {
    let t = TestApp::start().await;
    let visitor = t.visitor().await;
    let r = t
        .with_token(Method::GET, "/v1/operator/conversations", &visitor, None)
        .await;
    assert_eq!((r.status, r.code()), (401, "operator_unauthenticated"));
    let nothing = t
        .http
        .get(format!("{}/v1/operator/audit", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(nothing.status(), 401);

    let console = t.console(OperatorRole::Admin).await;
    let (_, token) =
        deskbell::operator::accounts::new_token(&t.app.store, "script", OperatorRole::Admin, 0)
            .await
            .unwrap();
    let (conversation, _) = t.raise_card(&visitor).await;
    let with_cookie = t
        .http
        .get(format!("{}/v1/conversations/{conversation}", t.base))
        .header("origin", ORIGIN)
        .header("cookie", &console.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(with_cookie.status(), 401);
    let ask = t
        .post("/v1/ask", Some(&token), ORIGIN, json!({"message": "hi"}))
        .await;
    assert_eq!((ask.status, ask.code()), (401, "invalid_visitor_token"));
}

#[tokio::test]
async fn an_agent_reads_everything_and_changes_nothing() {
    let t = TestApp::start().await;
    let agent = t.console(OperatorRole::Agent).await;
    for path in [
        "/v1/operator/conversations",
        "/v1/operator/audit",
        "/v1/operator/tools",
        "/v1/operator/usage",
        "/v1/operator/knowledge",
        "/v1/operator/sites",
    ] {
        assert_eq!(agent.get(path).await.status, 200, "{path}");
    }
    let r = agent
        .patch_tool("acme", "lookup_order", json!({"policy": "confirm"}))
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    assert_eq!(agent.tool("acme", "lookup_order").await["policy"], "auto");
    let r = agent
        .send(
            Method::POST,
            "/v1/operator/knowledge/acme/ingest",
            json!({}),
        )
        .await;
    assert_eq!(r.code(), "forbidden");
    assert_eq!(agent.get("/v1/operator/tokens").await.code(), "forbidden");
    assert!(t.audit().await.is_empty(), "nothing was audited as changed");
}

#[tokio::test]
async fn an_api_token_works_without_a_cookie_or_csrf_and_stops_when_revoked() {
    let t = TestApp::start().await;
    let admin = t.console(OperatorRole::Admin).await;
    let (row, token) = deskbell::operator::accounts::new_token(
        &t.app.store,
        "deploy script",
        OperatorRole::Admin,
        0,
    )
    .await
    .unwrap();
    assert!(token.starts_with("dbo_"));
    let r = t
        .with_token(
            Method::PATCH,
            "/v1/operator/tools/acme/refund",
            &token,
            Some(json!({"label": "Refund a payment in full"})),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["changed_by"], "token:deploy script");
    let listed = admin.get("/v1/operator/tokens").await;
    assert_eq!(listed.json["items"][0]["name"], "deploy script");
    assert!(
        listed.json.to_string().find(&token).is_none(),
        "the token's text is never shown again"
    );
    let revoked = admin
        .send(
            Method::DELETE,
            &format!("/v1/operator/tokens/{}", row.id),
            json!({}),
        )
        .await;
    assert_eq!(revoked.status, 204);
    let r = t
        .with_token(Method::GET, "/v1/operator/tools", &token, None)
        .await;
    assert_eq!((r.status, r.code()), (401, "operator_unauthenticated"));
    let again = admin
        .send(
            Method::DELETE,
            &format!("/v1/operator/tokens/{}", row.id),
            json!({}),
        )
        .await;
    assert_eq!(again.status, 404);
}

#[tokio::test]
async fn bad_sign_in_bodies_are_invalid_requests() {
    let t = TestApp::start().await;
    let r = t
        .post_raw("/v1/operator/session", None, None, "{\"email\": 1}".into())
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let r = t
        .post_raw(
            "/v1/operator/session",
            None,
            None,
            json!({"email": "a@b.c", "password": "x", "remember": true}).to_string(),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let r = t.sign_in("", "x").await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let wrong_method = crate::support::read(
        t.http
            .put(format!("{}/v1/operator/session", t.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (wrong_method.status, wrong_method.code()),
        (405, "method_not_allowed")
    );
}

#[test]
fn operator_add_reads_the_password_from_standard_input_and_token_prints_one_that_works() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("ops.db").display());
    let mut child = crate::support::deskbell_command()
        .args(["operator", "add", "Eve@Example.test", "--role", "agent"])
        .env("DESKBELL_DATABASE_URL", &url)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"a long enough password\n")
        .unwrap();
    let out = crate::support::succeeded(child.wait_with_output().unwrap());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("eve@example.test (agent)"), "{stdout}");
    assert!(
        !stdout.contains("password:"),
        "a given password is not printed"
    );

    let again = crate::support::deskbell_command()
        .args(["operator", "add", "eve@example.test"])
        .env("DESKBELL_DATABASE_URL", &url)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!again.status.success(), "an existing email is refused");

    let generated = crate::support::deskbell_command()
        .args(["operator", "add", "sam@example.test"])
        .env("DESKBELL_DATABASE_URL", &url)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&generated.stdout);
    assert!(
        generated.status.success() && stdout.contains("password: "),
        "{stdout}"
    );

    let token = crate::support::deskbell_command()
        .args(["operator", "token", "--name", "ci"])
        .env("DESKBELL_DATABASE_URL", &url)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&token.stdout);
    assert!(
        token.status.success() && stdout.contains(": dbo_"),
        "{stdout}"
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = deskbell::store::Store::connect(&url, Default::default())
            .await
            .unwrap();
        let eve = store
            .operators()
            .get("eve@example.test")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(eve.role, OperatorRole::Agent);
        assert!(eve.password_hash.starts_with("$argon2id$"));
        assert!(deskbell::operator::accounts::verify_password(
            "a long enough password",
            &eve.password_hash
        ));
        let text = stdout
            .split_whitespace()
            .find(|w| w.starts_with("dbo_"))
            .unwrap();
        let hash = deskbell::operator::accounts::token_hash(text);
        assert!(
            store
                .operators()
                .token_by_hash(&hash)
                .await
                .unwrap()
                .is_some(),
            "the printed token is the stored one"
        );
    });
}

/// Sign-in attempts with made-up emails leave no rows behind once their
/// failures are past the window: each attempt writes a key row to count under,
/// and those of keys with no failures left are forgotten (at most once a
/// minute). They used to stay until somebody signed in successfully.
#[tokio::test]
async fn sign_in_attempts_with_made_up_emails_are_forgotten_after_the_window() {
    let t = TestApp::start().await;
    for i in 0..50 {
        let r = t
            .sign_in(&format!("nobody-{i}@example.test"), "wrong")
            .await;
        assert!(matches!(r.status, 401 | 429), "{:?}", r.json);
    }
    let kept = || async {
        use sqlx::Row;
        sqlx::query("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM operator_login_keys")
            .fetch_one(&t.db().await)
            .await
            .unwrap()
            .get::<i64, _>("n")
    };
    assert!(kept().await >= 50);
    t.clock.advance_ms(16 * 60_000);
    let r = t.sign_in("one-more@example.test", "wrong").await;
    assert_eq!(r.code(), "login_failed");
    assert_eq!(
        kept().await,
        2,
        "only the last attempt's email and address are kept"
    );
}
