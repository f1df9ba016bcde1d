//! The operator console's reads at scale (SPEC §15): a database seeded with many
//! conversations and audit rows, then the list and filter calls of the operator
//! API timed over HTTP against the real server.

use std::time::{Duration, Instant};

use deskbell::states::OperatorRole;
use serde_json::{Value, json};

use crate::figures::fakes;
use crate::server;
use crate::stats::{Samples, ms, report};

const PASSWORD: &str = "bench-operator-password";

pub async fn figures(quick: bool) -> anyhow::Result<()> {
    let (conversations, audit_rows, samples) = match quick {
        true => (2_000, 20_000, 20),
        false => (100_000, 1_000_000, 200),
    };
    let dir = tempfile::tempdir()?;
    let seeding = Instant::now();
    seed(&dir.path().join("bench.db"), conversations, audit_rows).await?;
    let seeded_in = seeding.elapsed();
    let (llm, hook) = fakes().await?;
    let s = server::start_in(dir.path(), None, &llm, &hook).await?;
    let http = reqwest::Client::new();
    let login = http
        .post(format!("{}/v1/operator/session", s.base))
        .json(&json!({"email": "bench@example.test", "password": PASSWORD}))
        .send()
        .await?;
    anyhow::ensure!(
        login.status().is_success(),
        "sign-in failed: {}",
        login.status()
    );
    let cookie = login
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .unwrap_or_default()
        .to_string();
    let get = |path: String| {
        let (http, cookie, base) = (http.clone(), cookie.clone(), s.base.clone());
        async move {
            let started = Instant::now();
            let r = http
                .get(format!("{base}{path}"))
                .header("cookie", cookie)
                .send()
                .await?;
            anyhow::ensure!(r.status().is_success(), "{path}: {}", r.status());
            let body: Value = r.json().await?;
            Ok::<_, anyhow::Error>((started.elapsed(), body))
        }
    };
    // A cursor deep into the list: the page after the first thousand rows.
    let (_, deep) = get("/v1/operator/conversations?limit=100".into()).await?;
    let mut cursor = deep["next_cursor"].as_str().unwrap_or_default().to_string();
    for _ in 0..9 {
        let (_, page) = get(format!(
            "/v1/operator/conversations?limit=100&cursor={cursor}"
        ))
        .await?;
        cursor = page["next_cursor"].as_str().unwrap_or_default().to_string();
    }
    let (_, audit) = get("/v1/operator/audit?limit=100".into()).await?;
    let call = audit["items"][50]["call"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let queries = [
        (
            "conversations, newest 50",
            "/v1/operator/conversations".to_string(),
        ),
        (
            "conversations of a site",
            "/v1/operator/conversations?site=bench".into(),
        ),
        (
            "conversations, 11th page of 100",
            format!("/v1/operator/conversations?limit=100&cursor={cursor}"),
        ),
        (
            "conversations with a pending card",
            "/v1/operator/conversations?pending=true".into(),
        ),
        (
            "conversations whose answer failed",
            "/v1/operator/conversations?status=failed".into(),
        ),
        (
            "conversations answered",
            "/v1/operator/conversations?status=answered".into(),
        ),
        (
            "conversations, text search (common word)",
            "/v1/operator/conversations?q=order".into(),
        ),
        (
            "conversations, text search (word in no message: one 5,000-conversation window)",
            "/v1/operator/conversations?q=kettle".into(),
        ),
        (
            "conversations, search by visitor id",
            format!("/v1/operator/conversations?q=v_{:032x}", 7),
        ),
        ("audit, newest 50", "/v1/operator/audit".into()),
        (
            "audit, event = confirmed",
            "/v1/operator/audit?event=confirmed".into(),
        ),
        (
            "audit, tool = refund",
            "/v1/operator/audit?tool=refund".into(),
        ),
        ("audit, one call", format!("/v1/operator/audit?call={call}")),
        (
            "audit, site and after a time",
            "/v1/operator/audit?site=bench&after=2026-01-01T00:00:00Z".into(),
        ),
    ];
    for (name, path) in queries {
        let mut times = Samples::default();
        for _ in 0..samples {
            let (took, _) = get(path.clone()).await?;
            times.push(took);
        }
        report(
            &format!("console: {name} ({conversations} conversations, {audit_rows} audit rows)"),
            &format!("p50 {}, p99 {}", ms(times.p50()), ms(times.p99())),
            "p99 ≤ 50 ms",
        );
    }
    report(
        "console: seeding the database (SQL, one transaction)",
        &format!("{:.1} s", seeded_in.as_secs_f64()),
        "—",
    );
    drop(s);
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

/// Fills a fresh SQLite database through the real migrations: conversations two
/// per visitor, a question and an answer each (one in fifty failed, one in a
/// thousand awaiting a card), and audit rows spread over the conversations.
async fn seed(db: &std::path::Path, conversations: i64, audit_rows: i64) -> anyhow::Result<()> {
    let url = format!("sqlite://{}", db.display());
    let store = deskbell::store::Store::connect(&url, Default::default()).await?;
    deskbell::operator::accounts::add_operator(
        &store,
        "bench@example.test",
        OperatorRole::Admin,
        PASSWORD,
        0,
    )
    .await?;
    drop(store);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect(&format!("{url}?mode=rwc"))
        .await?;
    let now = chrono_now();
    let numbers = |n: i64| {
        format!(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {}) ",
            n - 1
        )
    };
    let statements = [
        format!(
            "{}INSERT INTO visitors (id, site, user_id, created_at) SELECT printf('v_%032x', i), 'bench', NULL, {now} - ({conversations} - i) * 1000 FROM n",
            numbers(conversations / 2 + 1)
        ),
        format!(
            "{}INSERT INTO conversations (id, site, visitor, created_at) SELECT printf('c_%032x', i), 'bench', printf('v_%032x', i / 2), {now} - ({conversations} - i) * 1000 FROM n",
            numbers(conversations)
        ),
        format!(
            "{}INSERT INTO messages (id, conversation, turn, role, text, status, created_at) \
             SELECT printf('m_%032x', 2 * i), printf('c_%032x', i), printf('t_%032x', i), 'visitor', \
             'Where is my order ' || i || '?', 'sent', {now} - ({conversations} - i) * 1000 FROM n",
            numbers(conversations)
        ),
        format!(
            "{}INSERT INTO messages (id, conversation, turn, role, text, status, input_tokens, output_tokens, created_at) \
             SELECT printf('m_%032x', 2 * i + 1), printf('c_%032x', i), printf('t_%032x', i), 'assistant', \
             'Order ' || i || ' ships tomorrow.', CASE WHEN i % 1000 = 0 THEN 'awaiting_confirmation' WHEN i % 50 = 0 THEN 'failed' ELSE 'answered' END, \
             900, 40, {now} - ({conversations} - i) * 1000 + 1 FROM n",
            numbers(conversations)
        ),
        format!(
            "{}INSERT INTO calls (id, model_call_id, conversation, message, turn, site, visitor, tool, label, policy, kind, arguments, status, expires_at, created_at) \
             SELECT printf('call_%032x', i), 'x', printf('c_%032x', i), printf('m_%032x', 2 * i + 1), printf('t_%032x', i), 'bench', printf('v_%032x', i / 2), \
             'cancel_order', 'Cancel an order', 'confirm', 'confirmation', '{{\"order_id\":' || i || '}}', 'pending', {now} + 3600000, {now} - ({conversations} - i) * 1000 \
             FROM n WHERE i % 1000 = 0",
            numbers(conversations)
        ),
        format!(
            "{}INSERT INTO audit (id, at, event, reason, call, site, conversation, visitor, tool, policy, arguments) \
             SELECT printf('a_%032x', i), {now} - ({audit_rows} - i) * 100, \
             CASE i % 5 WHEN 0 THEN 'requested' WHEN 1 THEN 'confirmed' WHEN 2 THEN 'executed' WHEN 3 THEN 'requested' ELSE 'executed' END, \
             NULL, printf('call_%032x', i / 5), 'bench', printf('c_%032x', (i / 10) % {conversations}), printf('v_%032x', (i / 20) % {conversations}), \
             CASE (i / 5) % 3 WHEN 0 THEN 'cancel_order' WHEN 1 THEN 'lookup_order' ELSE 'refund' END, 'confirm', '{{\"order_id\":42}}' FROM n",
            numbers(audit_rows)
        ),
    ];
    let mut tx = pool.begin().await?;
    for statement in statements {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    sqlx::query("ANALYZE").execute(&pool).await?;
    pool.close().await;
    Ok(())
}

fn chrono_now() -> i64 {
    use deskbell::clock::Clock;
    deskbell::clock::SystemClock.now_ms()
}
