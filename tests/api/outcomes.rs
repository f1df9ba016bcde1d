//! Outcomes are always recorded (ARCHITECTURE.md, "Every call gets an
//! outcome"): a write of owned work that the database cannot take now — its
//! write lock held by another process, a commit whose acknowledgement was lost
//! — is tried again until it lands, and nothing is told before it has.

use std::time::Duration;

use deskbell::testkit::Reply as Script;

use crate::crash::harness::{Server, on_postgres, setup};
use crate::fencing::{confirm_body, slow_card};
use crate::support::TestApp;

/// A connection of the test's own that holds the database's write lock: on
/// SQLite `BEGIN EXCLUSIVE` (no other connection may write), on PostgreSQL
/// the tables a call's outcome and an answer's end write, locked against
/// every writer (readers go on).
async fn hold_write_lock(database_url: &str) -> sqlx::AnyConnection {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(database_url).await.unwrap();
    let statements: &[&str] = match on_postgres() {
        true => &[
            "BEGIN",
            "LOCK TABLE calls, messages, budgets, audit, leases IN EXCLUSIVE MODE",
        ],
        false => &["BEGIN EXCLUSIVE"],
    };
    for statement in statements {
        sqlx::raw_sql(sqlx::AssertSqlSafe(*statement))
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn
}

/// The lock is held for 15 s while a confirmed call's tool answers: its outcome
/// is recorded once the lock is gone, the turn is answered and its reservation
/// released, and a restart does not deliver the call again.
#[tokio::test(flavor = "multi_thread")]
async fn an_outcome_blocked_by_a_held_write_lock_is_recorded_once_the_lock_is_released() {
    let s = setup(on_postgres()).await;
    let server = Server::start(&s.config, None).await;
    let (token, conversation, card, call) = slow_card(&server, &s).await;
    let told = server.ask_streamed(&token, confirm_body(&conversation, &card));
    s.wait_for_delivery("/cancel", 1).await;
    let mut lock = hold_write_lock(&s.database_url).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    sqlx::raw_sql("COMMIT").execute(&mut lock).await.unwrap();

    let told = told.await.unwrap();
    let done = told.events.last().unwrap();
    assert_eq!(done.0, "done", "{:?}", told.names());
    assert_eq!(done.1["status"], "answered", "{:?}", told.events);
    assert_eq!(told.all("step").last().unwrap()["status"], "succeeded");
    assert_eq!(told.text(), "Order 42 is cancelled [1].");
    assert_eq!(s.audit(&call).await, ["requested", "confirmed", "executed"]);
    assert_eq!(s.reserved().await, 0, "the reservation is released");
    let history = server.history(&token, &conversation).await;
    let last = history["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["status"], "answered", "{history}");
    server.kill();

    // A restart finds nothing left running: the call is not delivered again.
    let again = Server::start(&s.config, None).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        s.idempotency_keys("/cancel"),
        [call.as_str()],
        "delivered once"
    );
    assert_eq!(s.audit(&call).await, ["requested", "confirmed", "executed"]);
    again.kill();
}

/// A group commit that went through but was reported failed (the connection
/// lost while the commit was acknowledged) is run again job by job: the start
/// already written is found and the turn goes on, the end already saved counts
/// as saved. The visitor gets one answer; history has it once; nothing stays
/// reserved.
#[tokio::test]
async fn a_turn_whose_commits_were_reported_failed_but_went_through_is_answered_once() {
    let t = TestApp::start().await;
    t.llm.push(Script::text("Hello there."));
    let token = t.visitor().await;
    // The turn's start, then its end: each in a batch of its own.
    t.app.store.turns().report_commits_failed(2);
    let r = t.question(&token, None, "Hi").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.text(), "Hello there.");
    assert_eq!(r.all("done").last().unwrap()["status"], "answered");
    let conversation = r.conversation();
    let history = t.history(&token, &conversation).await;
    let messages = history.json["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{:?}", history.json);
    assert_eq!(messages[1]["status"], "answered");
    use sqlx::Row;
    let reserved: i64 =
        sqlx::query("SELECT CAST(COALESCE(SUM(reserved), 0) AS BIGINT) AS r FROM budgets")
            .fetch_one(&t.db().await)
            .await
            .unwrap()
            .get("r");
    assert_eq!(reserved, 0);
}

/// A history read of a conversation with nothing due writes nothing, so it is
/// answered at once while the database's write lock is held elsewhere. (It used
/// to take the writer on every read, to expire cards that were due.)
#[tokio::test(flavor = "multi_thread")]
async fn a_history_read_needs_no_writer_when_nothing_is_due() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.llm.push(Script::text("Hello."));
    let conversation = t.question(&token, None, "Hi").await.conversation();
    let _lock = hold_write_lock(&t.database_url).await;
    let read = tokio::time::timeout(Duration::from_secs(3), t.history(&token, &conversation))
        .await
        .expect("the history is read while the writer is busy");
    assert_eq!(read.status, 200, "{:?}", read.json);
    assert_eq!(read.json["messages"].as_array().unwrap().len(), 2);
}
