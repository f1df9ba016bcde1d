//! Crash tests (SPEC §6.5): the real `deskbell serve` binary as a child process,
//! killed with SIGKILL (or aborted at a chosen crash point) while a call runs or an
//! answer streams, then started again. Every call ends with exactly one outcome,
//! every delivery carries the same `Idempotency-Key`, history shows every
//! acknowledged message (an interrupted answer as `failed`), and budget
//! reservations are released.

use std::time::Duration;

use deskbell::testkit::{Piece, Reply as Script};
use serde_json::json;

pub(crate) mod harness;
use harness::{Server, hanging, on_postgres, setup};

async fn confirmed_call_killed_while_its_tool_runs(postgres: bool) {
    let s = setup(postgres).await;
    let server = Server::start(&s.config, None).await;
    let token = server.visitor().await;
    s.hook.push(hanging());
    let (conversation, card) = server.confirm_in_background(&s, &token).await;
    s.wait_for_delivery("/cancel", 1).await;
    server.kill();

    s.llm.push(Script::text("Order 42 is cancelled [1]."));
    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 3).await;
    let call = card["call"].as_str().unwrap();
    assert_eq!(s.audit(call).await, ["requested", "confirmed", "executed"]);
    let keys = s.idempotency_keys("/cancel");
    assert_eq!(keys, [call, call], "delivered again with the same key");
    let last = last_message(&history);
    assert_eq!(last["status"], "answered", "{history}");
    assert_eq!(last["text"], "Order 42 is cancelled [1].");
    assert_eq!(last["steps"][0]["status"], "succeeded");
    assert_eq!(s.reserved().await, 0, "every reservation is released");
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_confirmed_call_killed_while_its_tool_runs_is_delivered_again_and_answered() {
    confirmed_call_killed_while_its_tool_runs(on_postgres()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_auto_call_killed_while_it_runs_is_delivered_again_and_the_turn_finished() {
    let s = setup(on_postgres()).await;
    let server = Server::start(&s.config, None).await;
    let token = server.visitor().await;
    s.lookup_left_running(&server, &token).await;
    let conversation: String = {
        use sqlx::Row;
        let row = sqlx::query("SELECT id FROM conversations")
            .fetch_one(&s.db().await)
            .await
            .unwrap();
        row.get("id")
    };
    server.kill();

    s.llm.push(Script::text("It shipped yesterday."));
    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 2).await;
    let call = s.call_id("lookup_order").await;
    assert_eq!(s.audit(&call).await, ["requested", "executed"]);
    assert_eq!(s.idempotency_keys("/lookup"), [call.clone(), call.clone()]);
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{history}");
    assert_eq!(messages[0]["text"], "Where is order 42?");
    assert_eq!(messages[1]["status"], "answered");
    assert_eq!(messages[1]["text"], "Let me look. It shipped yesterday.");
    assert_eq!(messages[1]["steps"][0]["status"], "succeeded");
    // The resumed model round saw the delivered result after the original call.
    let last = s.llm.requests().last().unwrap().clone();
    let roles: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(s.reserved().await, 0);
    server.kill();
}

async fn answer_killed_mid_stream(postgres: bool) {
    let s = setup(postgres).await;
    let server = Server::start(&s.config, None).await;
    let token = server.visitor().await;
    s.llm.push(Script::Stream(vec![
        Piece::Text("The first part. ".into()),
        Piece::Pause(Duration::from_millis(2200)),
        Piece::Text("The second part.".into()),
        Piece::Pause(Duration::from_secs(120)),
    ]));
    server.ask_in_background(&token, json!({"message": "Tell me a long story"}));
    // The second delta arrives after the checkpoint interval and is saved.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let conversation: String = {
        use sqlx::Row;
        let row = sqlx::query("SELECT id FROM conversations")
            .fetch_one(&s.db().await)
            .await
            .unwrap();
        row.get("id")
    };
    assert!(s.reserved().await > 0, "the turn holds a reservation");
    server.kill();

    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 2).await;
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{history}");
    assert_eq!(messages[0]["text"], "Tell me a long story");
    assert_eq!(messages[1]["status"], "failed");
    // The text saved at the last checkpoint (every two seconds while streaming).
    let text = messages[1]["text"].as_str().unwrap();
    assert!(text.starts_with("The first part. The"), "{text}");
    assert_eq!(s.reserved().await, 0, "the reservation is released");
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_killed_mid_stream_shows_as_failed_with_its_text() {
    answer_killed_mid_stream(on_postgres()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_the_decision_and_the_run_still_runs_the_call_once() {
    let s = setup(on_postgres()).await;
    let server = Server::start(&s.config, Some("after_decide")).await;
    let token = server.visitor().await;
    let (conversation, card) = server.confirm_in_background(&s, &token).await;
    server.crashed().await;
    assert!(s.hook.calls().is_empty(), "the crash came before the run");

    s.llm.push(Script::text("Done [1]."));
    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 3).await;
    let call = card["call"].as_str().unwrap();
    assert_eq!(s.audit(call).await, ["requested", "confirmed", "executed"]);
    assert_eq!(s.idempotency_keys("/cancel"), [call]);
    let last = last_message(&history);
    assert_eq!(last["status"], "answered", "{history}");
    assert_eq!(s.reserved().await, 0);
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_whose_three_deliveries_were_interrupted_fails_as_interrupted() {
    let s = setup(on_postgres()).await;
    let server = Server::start(&s.config, Some("before_delivery")).await;
    let token = server.visitor().await;
    let (conversation, card) = server.confirm_in_background(&s, &token).await;
    server.crashed().await;
    // Each start delivers again and dies at the same point, twice more.
    for _ in 0..2 {
        Server::start_crashing(&s.config, "before_delivery").await;
    }
    s.llm.push(Script::text("Sorry, that did not go through."));
    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 3).await;
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        s.audit(call).await,
        ["requested", "confirmed", "failed:interrupted"]
    );
    assert!(s.hook.calls().is_empty(), "no delivery reached the tool");
    let last = last_message(&history);
    assert_eq!(last["status"], "answered", "{history}");
    assert_eq!(last["steps"][0]["status"], "failed");
    assert_eq!(s.reserved().await, 0);
    server.kill();
}

/// On PostgreSQL a start does not take other leases at once (they may be live
/// replicas): the dead process's work is claimed once its lease lapses. (The
/// whole file runs on PostgreSQL too in the suite's PostgreSQL pass.)
#[tokio::test(flavor = "multi_thread")]
async fn on_postgresql_a_killed_process_is_recovered_once_its_lease_lapses() {
    confirmed_call_killed_while_its_tool_runs(true).await;
    answer_killed_mid_stream(true).await;
}

/// The last message of a history.
pub(crate) fn last_message(history: &serde_json::Value) -> serde_json::Value {
    history["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone()
}

/// Two processes starting together after a crash race to claim the dead one's
/// work: one wins, and the call is delivered again once and recorded once.
#[tokio::test(flavor = "multi_thread")]
async fn two_processes_starting_after_a_crash_finish_its_call_once() {
    let s = setup(on_postgres()).await;
    let server = Server::start(&s.config, None).await;
    let token = server.visitor().await;
    s.hook.push(hanging());
    let (conversation, card) = server.confirm_in_background(&s, &token).await;
    s.wait_for_delivery("/cancel", 1).await;
    server.kill();

    s.llm.push(Script::text("Cancelled [1]."));
    let (a, b) = tokio::join!(
        Server::start(&s.config, None),
        Server::start(&s.config, None)
    );
    let history = a.settled_history(&token, &conversation, 3).await;
    // Longer than a lease and its renewals: the loser has had every chance to
    // claim the work as well.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let call = card["call"].as_str().unwrap();
    assert_eq!(s.audit(call).await, ["requested", "confirmed", "executed"]);
    assert_eq!(
        s.idempotency_keys("/cancel"),
        [call, call],
        "delivered again once"
    );
    assert_eq!(last_message(&history)["status"], "answered", "{history}");
    assert_eq!(
        b.history(&token, &conversation).await["messages"],
        history["messages"],
        "both processes show the one outcome"
    );
    assert_eq!(s.reserved().await, 0);
    a.kill();
    b.kill();
}

/// MCP has no idempotency key, so a call an MCP server may already have carried
/// out is failed as interrupted after a crash rather than sent again (DECISIONS).
#[tokio::test(flavor = "multi_thread")]
async fn a_confirmed_mcp_call_cut_by_a_crash_is_failed_and_not_sent_again() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let notes = tempfile::tempdir().unwrap();
    let log = notes.path().join("notes.log");
    let server_block = format!(
        "[[site.mcp]]\nname = \"notes\"\ncommand = [\"node\", \"{}\", \"{}\"]\n",
        root.join("tests/mcp/changing-server.mjs").display(),
        log.display()
    );
    let s = harness::setup_with(on_postgres(), "", &server_block).await;
    let server = Server::start(&s.config, Some("before_delivery")).await;
    let token = server.visitor().await;
    let (conversation, card) = server
        .confirm_call_in_background(&s, &token, "send_note", json!({"text": "once"}))
        .await;
    server.crashed().await;

    s.llm.push(Script::text("Sorry, that did not go through."));
    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 3).await;
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        s.audit(call).await,
        ["requested", "confirmed", "failed:interrupted"]
    );
    assert!(!log.exists(), "the call was not sent again");
    let last = last_message(&history);
    assert_eq!(last["status"], "answered", "{history}");
    assert_eq!(last["steps"][0]["status"], "failed");
    assert_eq!(s.reserved().await, 0);
    server.kill();
}

/// A process killed in the middle of a group commit. Before the commit nothing of
/// the batch is saved; after it, the saved start is recovered on restart (the
/// answer failed, its reservation given back). Either way the visitor was never
/// told the turn had started, and the next question is answered.
async fn a_batch_cut_by_a_crash(point: &str) {
    use sqlx::Row;
    let s = setup(on_postgres()).await;
    let server = Server::start(&s.config, Some(point)).await;
    let token = server.visitor().await;
    server.ask_in_background(&token, json!({"message": "Hello?"}));
    server.crashed().await;

    let server = Server::start(&s.config, None).await;
    let db = s.db().await;
    let count = |table: &'static str| {
        let db = db.clone();
        async move {
            let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT CAST(COUNT(*) AS BIGINT) AS n FROM {table}"
            )))
            .fetch_one(&db)
            .await
            .unwrap();
            row.get::<i64, _>("n")
        }
    };
    match point {
        "group_written" => {
            assert_eq!(
                count("conversations").await,
                0,
                "nothing of the batch is saved"
            );
            assert_eq!(count("messages").await, 0);
        }
        _ => {
            assert_eq!(
                count("conversations").await,
                1,
                "the committed start is kept"
            );
            let conversation: String = sqlx::query("SELECT id FROM conversations")
                .fetch_one(&db)
                .await
                .unwrap()
                .get("id");
            let history = server.settled_history(&token, &conversation, 2).await;
            assert_eq!(history["messages"][0]["text"], "Hello?");
            assert_eq!(history["messages"][1]["status"], "failed", "{history}");
        }
    }
    assert_eq!(s.reserved().await, 0, "every reservation is given back");
    s.llm.push(Script::text("Hello again."));
    // A visitor of its own: polling the history above spent the first one's
    // per-minute allowance while PostgreSQL waited for the lease to lapse.
    let other = server.visitor().await;
    let reply = server.ask(&other, json!({"message": "Still there?"})).await;
    assert_eq!(reply.status, 200, "{:?}", reply.json);
    assert_eq!(reply.text(), "Hello again.");
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_commit_cut_before_its_commit_saves_nothing_of_its_batch() {
    a_batch_cut_by_a_crash("group_written").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_commit_cut_after_its_commit_is_recovered_on_restart() {
    a_batch_cut_by_a_crash("group_committed").await;
}
