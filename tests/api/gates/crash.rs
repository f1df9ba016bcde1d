//! A teammate's approval across a crash (SPEC §20, §6.5): the real `deskbell
//! serve` binary aborted between the approval and the run, or killed while the
//! approved call runs, then started again: the call runs once (or is
//! delivered again with the same `Idempotency-Key`), the continuation is saved
//! and the visitor's live channel carries it.

use serde_json::{Value, json};

use crate::crash::harness::{Server, Setup, hanging, on_postgres, setup_with};
use crate::crash::last_message;
use crate::desk::crash::ada_at;
use deskbell::testkit::Reply as Script;

/// The harness's site with its refund tool approved by agents or admins;
/// `server` lines go in the `[server]` table.
pub(super) async fn approvals_setup_with(server: &str) -> Setup {
    let s = setup_with(on_postgres(), server, "").await;
    let text = std::fs::read_to_string(&s.config).unwrap();
    let text = text.replacen(
        "label = \"Refund a payment\"\npolicy = \"confirm\"",
        "label = \"Refund a payment\"\npolicy = \"approve\"\napprovers = [\"agent\", \"admin\"]",
        1,
    );
    assert!(text.contains("policy = \"approve\""));
    std::fs::write(&s.config, text).unwrap();
    s
}

async fn approvals_setup() -> Setup {
    approvals_setup_with("").await
}

/// The refund waiting for a teammate: its conversation and queue item.
pub(super) async fn waiting_refund(
    s: &Setup,
    server: &Server,
    token: &str,
    session: &(String, String),
) -> (String, Value) {
    s.llm
        .push(Script::tool_calls(&[("refund", json!({"amount": 250}))]));
    let r = server.ask(token, json!({"message": "Refund me 250"})).await;
    assert_eq!(
        r.event("step")["status"],
        "awaiting_approval",
        "{:?}",
        r.names()
    );
    let items: Value = reqwest::Client::new()
        .get(format!("{}/v1/operator/approvals", server.base))
        .header("cookie", &session.0)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (r.conversation(), items["items"][0].clone())
}

/// Approves `item` in the background: the server may die before it answers.
pub(super) fn approve_in_background(base: &str, session: &(String, String), item: &Value) {
    let request = reqwest::Client::new()
        .post(format!(
            "{base}/v1/operator/approvals/{}",
            item["call"].as_str().unwrap()
        ))
        .header("cookie", &session.0)
        .header("x-deskbell-csrf", &session.1)
        .json(&json!({"decision": "approve", "signature": item["signature"]}));
    tokio::spawn(async move {
        let _ = request.send().await;
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_a_teammates_approval_and_the_run_still_runs_the_call_once() {
    let s = approvals_setup().await;
    let server = Server::start(&s.config, Some("after_approval")).await;
    let session = ada_at(&s.database_url, &server.base).await;
    let token = server.visitor().await;
    let (conversation, item) = waiting_refund(&s, &server, &token, &session).await;
    approve_in_background(&server.base, &session, &item);
    server.crashed().await;
    assert!(s.hook.calls().is_empty(), "the crash came before the run");

    s.llm.push(Script::text("Your refund is on its way [1]."));
    let server = Server::start(&s.config, None).await;
    // The live channel first: the history's polling counts against the
    // visitor's rate limit.
    let mut channel =
        crate::support::Channel::open(&server.base, &token, &conversation, None).await;
    assert_eq!(channel.status, 200, "the live channel opens");
    let history = server.settled_history(&token, &conversation, 3).await;
    let call = item["call"].as_str().unwrap();
    assert_eq!(s.audit(call).await, ["requested", "confirmed", "executed"]);
    assert_eq!(s.idempotency_keys("/refund"), [call]);
    let last = last_message(&history);
    assert_eq!(last["status"], "answered", "{history}");
    assert_eq!(last["text"], "Your refund is on its way [1].");
    // The recovered continuation is on the visitor's live channel too.
    let events = channel.take(2, std::time::Duration::from_secs(10)).await;
    assert_eq!(events[0].name, "card");
    assert_eq!(events[1].name, "answer");
    assert_eq!(events[1].data["id"], last["id"]);
    assert_eq!(s.reserved().await, 0);
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_call_killed_while_it_runs_is_delivered_again_with_the_same_key() {
    let s = approvals_setup().await;
    let server = Server::start(&s.config, None).await;
    let session = ada_at(&s.database_url, &server.base).await;
    let token = server.visitor().await;
    let (conversation, item) = waiting_refund(&s, &server, &token, &session).await;
    s.hook.push(hanging());
    approve_in_background(&server.base, &session, &item);
    s.wait_for_delivery("/refund", 1).await;
    server.kill();

    s.llm.push(Script::text("Refunded [1]."));
    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 3).await;
    let call = item["call"].as_str().unwrap();
    assert_eq!(
        s.idempotency_keys("/refund"),
        [call, call],
        "delivered again with the same key"
    );
    assert_eq!(s.audit(call).await, ["requested", "confirmed", "executed"]);
    let last = last_message(&history);
    assert_eq!(last["text"], "Refunded [1].", "{history}");
    server.kill();
}
