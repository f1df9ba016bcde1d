//! A question asks the model before its own budget read returns, when this
//! replica last saw plenty of the budget left (`ask/turn/head.rs`); its
//! reservation and that read still decide whether anything of it is shown. On
//! PostgreSQL a test holds both back with a lock on the budgets table, so what
//! happens while they wait is seen for certain.

use std::time::Duration;

use deskbell::states::OperatorRole;
use deskbell::testkit::Reply as Script;
use serde_json::json;
use sqlx::{Any, Transaction};

use crate::postgres::start_on_postgres_with;
use crate::support::TestApp;

/// A transaction that keeps every read and write of the budgets table waiting
/// until it ends.
async fn hold_budgets(t: &TestApp) -> Transaction<'static, Any> {
    let pool = sqlx::AnyPool::connect(&t.database_url).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE budgets IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

/// An app whose site may spend 1,000 tokens a day and 50 a turn.
async fn with_a_small_budget() -> TestApp {
    start_on_postgres_with(|c| {
        c.sites[0].limits.daily_token_budget = 1_000;
        c.sites[0].limits.max_tokens_per_turn = 50;
    })
    .await
}

/// The budgets table held, and the day's budget spent in that transaction as
/// another replica would spend it: seen by this replica once it commits.
async fn spent_by_another_replica(t: &TestApp) -> Transaction<'static, Any> {
    let mut held = hold_budgets(t).await;
    sqlx::query("UPDATE budgets SET spent = 1000")
        .execute(&mut *held)
        .await
        .unwrap();
    held
}

/// Waits until the model has seen more than `seen` requests.
async fn model_asked(t: &TestApp, seen: usize) {
    let asked = async {
        while t.llm.requests().len() <= seen {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), asked)
        .await
        .expect("the model was not asked while the budget read waited");
}

#[tokio::test]
async fn a_question_asks_the_model_while_its_budget_read_waits() {
    let t = start_on_postgres_with(|_| {}).await;
    let token = t.visitor().await;
    // The replica's first question reads the budget before asking the model.
    assert_eq!(t.question(&token, None, "Hi").await.status, 200);
    let seen = t.llm.requests().len();
    let held = hold_budgets(&t).await;
    t.llm.push(Script::text("Asked early."));
    let (reply, ()) = tokio::join!(t.question(&token, None, "Hi again"), async {
        model_asked(&t, seen).await;
        held.rollback().await.unwrap();
    });
    assert_eq!(reply.status, 200, "{}", reply.json);
    assert_eq!(reply.text(), "Asked early.");
    assert_eq!(t.llm.requests().len(), seen + 1, "the model was asked once");
}

#[tokio::test]
async fn a_question_asked_early_is_refused_when_its_reservation_finds_the_budget_spent() {
    let t = with_a_small_budget().await;
    let token = t.visitor().await;
    let first = t.question(&token, None, "Hi").await;
    assert_eq!(first.status, 200);
    let seen = t.llm.requests().len();
    let held = spent_by_another_replica(&t).await;
    t.llm.push(Script::text("Never shown."));
    let (refused, ()) = tokio::join!(t.question(&token, None, "Hi again"), async {
        model_asked(&t, seen).await;
        held.commit().await.unwrap();
    });
    assert_eq!(
        (refused.status, refused.code()),
        (429, "daily_budget_exhausted")
    );
    // Now that the replica knows, a question is not sent to the model (which
    // may bill it).
    let again = t.question(&token, None, "And again").await;
    assert_eq!(again.code(), "daily_budget_exhausted");
    assert_eq!(t.llm.requests().len(), seen + 1);
}

/// A question asked early in a conversation with a pending card, refused by its
/// reservation, wrote nothing: the card is still pending, not superseded.
#[tokio::test]
async fn a_refused_early_question_leaves_the_conversations_card_pending() {
    let t = with_a_small_budget().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    let before = t.history(&token, &conversation).await.json;
    let seen = t.llm.requests().len();
    let held = spent_by_another_replica(&t).await;
    let (refused, ()) = tokio::join!(
        t.question(&token, Some(&conversation), "Actually, never mind"),
        async {
            model_asked(&t, seen).await;
            held.commit().await.unwrap();
        }
    );
    assert_eq!(refused.code(), "daily_budget_exhausted");
    let after = t.history(&token, &conversation).await.json;
    assert_eq!(after, before, "the refused question changed the history");
    assert_eq!(after["messages"][1]["steps"][0]["status"], "pending");
    assert_eq!(
        t.audit_events(card["call"].as_str().unwrap()).await,
        ["requested"]
    );
}

fn offers_lookup(request: &serde_json::Value) -> bool {
    request["tools"].to_string().contains("lookup_order")
}

/// A second replica that has read the budget and the tools, then one tool
/// switched off through the first; with a visitor of the second and the number
/// of model requests so far.
async fn a_replica_behind_a_tool_change(t: &TestApp) -> (TestApp, String, usize) {
    let other = t.replica(|_| {}).await;
    let token = other.visitor().await;
    assert_eq!(other.question(&token, None, "Hi").await.status, 200);
    let seen = other.llm.requests().len();
    let admin = t.console(OperatorRole::Admin).await;
    let r = admin
        .patch_tool("acme", "lookup_order", json!({"policy": "off"}))
        .await;
    assert_eq!(r.status, 200);
    (other, token, seen)
}

/// On either database: whether or not the request sent early reached the model
/// before the read returned, the answer streamed comes from a request with the
/// tools as changed on another replica.
#[tokio::test]
async fn a_request_sent_early_with_tools_changed_since_is_sent_again_with_the_new_ones() {
    let t = TestApp::start().await;
    let (other, token, seen) = a_replica_behind_a_tool_change(&t).await;
    let r = other.question(&token, None, "Where is order 7?").await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.event("done")["status"], "answered");
    let requests = other.llm.requests();
    let offered = |i: usize| offers_lookup(&requests[i]);
    assert!(
        !offered(requests.len() - 1),
        "the answer's request offers the new tools"
    );
    match requests.len() - seen {
        1 => {}
        2 => assert!(
            offered(seen),
            "the request sent early offered the old tools"
        ),
        n => panic!("{n} requests for one question"),
    }
    assert!(other.hook.calls().is_empty());
}

/// The same on PostgreSQL, seen for certain: the request sent early offered the
/// old tools, and the answer comes from the one asked again with the new.
#[tokio::test]
async fn a_request_sent_early_with_old_tools_is_dropped_for_one_with_the_new() {
    let t = start_on_postgres_with(|_| {}).await;
    let (other, token, seen) = a_replica_behind_a_tool_change(&t).await;
    let held = hold_budgets(&other).await;
    other.llm.push(Script::text("Dropped."));
    other.llm.push(Script::text("With the new tools."));
    let (reply, ()) = tokio::join!(other.question(&token, None, "Where is order 7?"), async {
        model_asked(&other, seen).await;
        held.rollback().await.unwrap();
    });
    assert_eq!(reply.status, 200, "{}", reply.json);
    assert_eq!(reply.text(), "With the new tools.");
    let requests = other.llm.requests();
    assert_eq!(requests.len(), seen + 2);
    let offered = |i: usize| requests[i]["tools"].to_string().contains("lookup_order");
    assert!(
        offered(seen),
        "the request sent early offered the old tools"
    );
    assert!(
        !offered(seen + 1),
        "the answer's request offers the new tools"
    );
}

/// A question whose start was written early but whose tool read failed is not
/// answered with the tools last read here (they may predate an operator's
/// change): it fails, and its written start is settled — the answer marked
/// failed, the reservation given back.
#[tokio::test]
async fn a_failed_tool_read_after_an_early_start_fails_the_question_and_settles_it() {
    let t = start_on_postgres_with(|_| {}).await;
    let token = t.visitor().await;
    let first = t.question(&token, None, "Hi").await;
    assert_eq!(first.status, 200);
    let conversation = first.conversation();
    let db = sqlx::AnyPool::connect(&t.database_url).await.unwrap();
    sqlx::query("ALTER TABLE tool_versions RENAME TO tool_versions_gone")
        .execute(&db)
        .await
        .unwrap();
    // Nothing is scripted for this question: its early request may or may not
    // reach the model before the failed read drops it, and a scripted reply it
    // did not take would answer the next question instead.
    let failed = t.question(&token, Some(&conversation), "Hi again").await;
    assert_eq!(failed.status, 500, "{}", failed.json);
    sqlx::query("ALTER TABLE tool_versions_gone RENAME TO tool_versions")
        .execute(&db)
        .await
        .unwrap();
    let history = t.history(&token, &conversation).await.json;
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{history}");
    assert_eq!(messages[3]["status"], "failed");
    let reserved: i64 = sqlx::query_scalar("SELECT reserved FROM budgets")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(reserved, 0, "the early start's reservation was given back");
    t.llm.push(Script::text("Back."));
    let again = t.question(&token, Some(&conversation), "And again").await;
    assert_eq!(again.text(), "Back.");
}

/// On the read-first path (this replica's first question), a start refused by
/// its own reservation — the budget spent between the read and the write — is
/// told at once, not after the model's first piece (here the model never
/// answers, and is waited for up to a minute).
#[tokio::test]
async fn a_start_refused_after_the_read_does_not_wait_for_the_model() {
    let t = start_on_postgres_with(|c| {
        c.sites[0].limits.daily_token_budget = 1_000;
        c.sites[0].limits.max_tokens_per_turn = 50;
        // A model silent this long would otherwise be waited for.
        c.llm.idle_timeout_s = 60.0;
    })
    .await;
    let token = t.visitor().await;
    let db = sqlx::AnyPool::connect(&t.database_url).await.unwrap();
    let mut held = db.begin().await.unwrap();
    // Reads pass; the start's reservation waits for this transaction.
    sqlx::query("LOCK TABLE budgets IN SHARE MODE")
        .execute(&mut *held)
        .await
        .unwrap();
    let day = deskbell::budget::utc_day(deskbell::clock::Clock::now_ms(&*t.clock));
    sqlx::query("INSERT INTO budgets (site, day, spent, reserved) VALUES ('acme', $1, 1000, 0)")
        .bind(&day)
        .execute(&mut *held)
        .await
        .unwrap();
    t.llm.push(Script::Stall);
    let question = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(t.question(&token, None, "Hi"), async {
            model_asked(&t, 0).await;
            held.commit().await.unwrap();
        })
    });
    let (refused, ()) = question
        .await
        .expect("the refusal waited for the model's first piece");
    assert_eq!(
        (refused.status, refused.code()),
        (429, "daily_budget_exhausted")
    );
}
