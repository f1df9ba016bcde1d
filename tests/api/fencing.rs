//! Fenced leases (ARCHITECTURE.md, "A lease epoch fences its holder"): a process
//! that was paused past its lease — SIGSTOP here, a long database outage or a VM
//! pause in life — finds on waking that another process took its work over. It
//! must not deliver a call again, record a second outcome, or tell its visitor
//! an answer the database does not hold: its stream ends `failed`, and history,
//! audit and deliveries agree with what the other process did.
//!
//! Each test runs on the suite's database: two `deskbell serve` processes on one
//! SQLite file (the second is not alone, so it takes over only lapsed leases) or
//! on one PostgreSQL database, with `lease_s = 3`.

use std::time::Duration;

use deskbell::testkit::{HookReply, Piece, Reply as Script};
use serde_json::{Value, json};

use crate::crash::harness::{Server, on_postgres, setup};
use crate::support::Reply;

/// Sends a signal (`libc::SIGSTOP`, `libc::SIGCONT`) to a server process —
/// directly, not through a `kill` child: a child exiting while a member of
/// its process group is stopped can orphan the group, and the kernel then
/// continues the stopped process at once.
fn signal(server: &Server, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(server.child.id()).unwrap();
    // SAFETY: `kill` only sends a signal to the server's process.
    let sent = unsafe { libc::kill(pid, sig) };
    assert_eq!(sent, 0, "signal {sig}");
}

/// Whether the process is stopped (state `T` in /proc).
fn stopped(server: &Server) -> bool {
    let stat =
        std::fs::read_to_string(format!("/proc/{}/stat", server.child.id())).unwrap_or_default();
    // The state follows the command name in parentheses.
    stat.rsplit(')')
        .next()
        .is_some_and(|rest| rest.trim_start().starts_with('T'))
}

/// Raises a card for cancelling order 42 on `server`; returns the conversation
/// and the card.
pub(crate) async fn card(
    server: &Server,
    s: &crate::crash::harness::Setup,
    token: &str,
) -> (String, Value) {
    s.llm.push(Script::tool_calls(&[(
        "cancel_order",
        json!({"order_id": 42}),
    )]));
    let raised = server
        .ask(token, json!({"message": "Cancel order 42"}))
        .await;
    (raised.conversation(), raised.event("confirm").clone())
}

/// A new visitor's card for cancelling order 42 on `server`, whose tool takes
/// a second to answer the first delivery, with the continuation scripted:
/// (visitor token, conversation, card, call id).
pub(crate) async fn slow_card(
    server: &Server,
    s: &crate::crash::harness::Setup,
) -> (String, String, Value, String) {
    let token = server.visitor().await;
    let (conversation, card) = card(server, s, &token).await;
    let call = card["call"].as_str().unwrap().to_string();
    s.hook.push(HookReply {
        status: 200,
        body: "{\"cancelled\":true}".into(),
        delay: Duration::from_secs(1),
    });
    s.llm.push(Script::text("Order 42 is cancelled [1]."));
    (token, conversation, card, call)
}

pub(crate) fn confirm_body(conversation: &str, card: &Value) -> Value {
    json!({"conversation": conversation, "call": card["call"], "decision": "confirm", "signature": card["signature"]})
}

/// What the resumed process told its visitor: a stream that ends `failed` with
/// the `taken_over` error, never `answered`.
fn assert_told_taken_over(told: &Reply) {
    let done = told.events.last().expect("the stream ends with an event");
    assert_eq!(done.0, "done", "{:?}", told.names());
    assert_eq!(done.1["status"], "failed", "{:?}", told.events);
    assert_eq!(
        told.event("error")["code"],
        "taken_over",
        "{:?}",
        told.events
    );
}

/// Paused while its tool runs: the other process delivers the call again (same
/// key) and finishes the turn; the resumed one records nothing and tells its
/// visitor the answer was taken over.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_paused_while_its_tool_runs_is_fenced_off_when_it_resumes() {
    let s = setup(on_postgres()).await;
    let a = Server::start(&s.config, None).await;
    // A's delivery is answered while A is paused; B's at once.
    let (token, conversation, card, call) = slow_card(&a, &s).await;
    s.llm.push(Script::text("Order 42 is cancelled [1]."));
    let told = a.ask_streamed(&token, confirm_body(&conversation, &card));
    s.wait_for_delivery("/cancel", 1).await;
    signal(&a, libc::SIGSTOP);

    let b = Server::start(&s.config, None).await;
    s.wait_for_delivery("/cancel", 2).await;
    let history = b.settled_history(&token, &conversation, 3).await;
    signal(&a, libc::SIGCONT);
    let told = told.await.unwrap();

    assert_told_taken_over(&told);
    assert!(
        told.all("step")
            .iter()
            .all(|step| step["status"] == "running"),
        "the resumed process claims no outcome: {:?}",
        told.events
    );
    // Longer than a lease: the resumed process has had time to act, and must not.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        s.idempotency_keys("/cancel"),
        [call.as_str(), call.as_str()]
    );
    assert_eq!(s.audit(&call).await, ["requested", "confirmed", "executed"]);
    let last = history["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["status"], "answered", "{history}");
    assert_eq!(
        a.history(&token, &conversation).await["messages"],
        history["messages"],
        "both processes show the one outcome"
    );
    assert_eq!(s.reserved().await, 0, "every reservation is released");
}

/// Paused right before it delivers a confirmed call: the other process delivers
/// it once; the resumed one, no longer holding the work, never sends it.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_paused_before_its_delivery_never_delivers_after_it_resumes() {
    let s = setup(on_postgres()).await;
    let a = Server::start_env(&s.config, None, &[("DESKBELL_PAUSE_AT", "before_delivery")]).await;
    let token = a.visitor().await;
    let (conversation, card) = card(&a, &s, &token).await;
    let call = card["call"].as_str().unwrap().to_string();
    s.llm.push(Script::text("Order 42 is cancelled [1]."));
    s.llm.push(Script::text("Order 42 is cancelled [1]."));
    let told = a.ask_streamed(&token, confirm_body(&conversation, &card));
    wait_until_stopped(&a).await;

    let b = Server::start(&s.config, None).await;
    s.wait_for_delivery("/cancel", 1).await;
    let history = b.settled_history(&token, &conversation, 3).await;
    signal(&a, libc::SIGCONT);
    let told = told.await.unwrap();

    assert_told_taken_over(&told);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        s.idempotency_keys("/cancel"),
        [call.as_str()],
        "delivered once, by the process that took it over"
    );
    assert_eq!(s.audit(&call).await, ["requested", "confirmed", "executed"]);
    let last = history["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["status"], "answered", "{history}");
    assert_eq!(s.reserved().await, 0);
}

/// Paused between saving an answer's transcript and storing the auto call it
/// is about to run: the other process fails the answer (it has no call to
/// finish). The resumed process must not store the call: a running call under
/// a fence that is in no lease would be claimed and delivered by anyone, for
/// an answer already taken over. Nobody delivers it.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_paused_before_storing_an_auto_call_leaves_none_to_deliver() {
    let s = setup(on_postgres()).await;
    let a = Server::start_env(
        &s.config,
        None,
        &[("DESKBELL_PAUSE_AT", "before_call_insert")],
    )
    .await;
    let token = a.visitor().await;
    s.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 42}),
    )]));
    let told = a.ask_streamed(&token, json!({"message": "Where is order 42?"}));
    wait_until_stopped(&a).await;

    let b = Server::start(&s.config, None).await;
    let db = s.db().await;
    let conversation = wait_for_failed_answer(&db).await;
    signal(&a, libc::SIGCONT);
    let told = told.await.unwrap();

    assert_told_taken_over(&told);
    // Past a lease and its renewals: every process has had time to claim it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(s.hook.calls().is_empty(), "the call was never delivered");
    use sqlx::Row;
    let calls: i64 = sqlx::query("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM calls")
        .fetch_one(&db)
        .await
        .unwrap()
        .get("n");
    assert_eq!(calls, 0, "no call was stored for the taken-over answer");
    let history = b.history(&token, &conversation).await;
    let last = history["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["status"], "failed", "{history}");
    assert_eq!(s.reserved().await, 0);
}

/// Waits until the process has stopped itself at its pause point.
async fn wait_until_stopped(server: &Server) {
    for _ in 0..400 {
        if stopped(server) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the process did not pause");
}

/// Paused mid-answer: the other process marks the answer failed; the resumed
/// one streams nothing more and ends its stream failed, as history says.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_paused_mid_answer_ends_its_stream_as_history_shows_it() {
    let s = setup(on_postgres()).await;
    let a = Server::start(&s.config, None).await;
    let token = a.visitor().await;
    s.llm.push(Script::Stream(vec![
        Piece::Text("Let me see. ".into()),
        Piece::Pause(Duration::from_millis(1500)),
        Piece::Text("It shipped yesterday.".into()),
    ]));
    let told = a.ask_streamed(&token, json!({"message": "Where is my order?"}));
    for _ in 0..400 {
        if !s.llm.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&a, libc::SIGSTOP);

    let b = Server::start(&s.config, None).await;
    let db = s.db().await;
    let conversation = wait_for_failed_answer(&db).await;
    signal(&a, libc::SIGCONT);
    let told = told.await.unwrap();

    assert_told_taken_over(&told);
    assert!(
        !told.text().contains("shipped"),
        "nothing streamed after the answer was taken over: {:?}",
        told.text()
    );
    let history = b.history(&token, &conversation).await;
    let last = history["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["status"], "failed", "{history}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        b.history(&token, &conversation).await,
        history,
        "the resumed process changed nothing"
    );
    assert_eq!(s.reserved().await, 0);
}

/// Waits until an assistant answer is marked failed; returns its conversation.
async fn wait_for_failed_answer(db: &sqlx::AnyPool) -> String {
    use sqlx::Row;
    for _ in 0..600 {
        let row = sqlx::query("SELECT conversation FROM messages WHERE status = 'failed'")
            .fetch_optional(db)
            .await
            .unwrap();
        if let Some(row) = row {
            return row.get("conversation");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the paused process's answer was never taken over");
}
