//! A teammate's approval (SPEC §20): `approve` and `confirm+approve` calls
//! wait in the console's approvals queue; an operator of an approver role
//! approves or declines with the signature the queue gave; the call runs once,
//! and the outcome and the continuation reach the visitor live and in history.

use std::time::Duration;

use deskbell::config::Policy;
use deskbell::states::OperatorRole;
use deskbell::testkit::{HookReply, Reply as Script};
use reqwest::Method;
use serde_json::{Value, json};

use super::tool;
use crate::support::{Console, TestApp, for_racing};

/// The refund tool with `policy`, approved by admins.
async fn refunds(policy: Policy) -> TestApp {
    TestApp::with(move |c| {
        for_racing(c);
        tool(c, "refund").policy = policy;
    })
    .await
}

/// Asks for a refund of 250; returns the conversation and the reply.
async fn ask_refund(t: &TestApp, token: &str) -> (String, crate::support::Reply) {
    t.llm
        .push(Script::tool_calls(&[("refund", json!({"amount": 250}))]));
    let r = t.question(token, None, "Refund me 250").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    (r.conversation(), r)
}

async fn waiting(console: &Console) -> Vec<Value> {
    let r = console.get("/v1/operator/approvals").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["items"].as_array().unwrap().clone()
}

async fn decide(console: &Console, item: &Value, decision: &str) -> crate::support::Reply {
    console
        .send(
            Method::POST,
            &format!("/v1/operator/approvals/{}", item["call"].as_str().unwrap()),
            json!({"decision": decision, "signature": item["signature"], "note": "checked the order"}),
        )
        .await
}

#[tokio::test]
async fn an_approve_call_waits_for_a_teammate_and_runs_once_when_an_admin_approves() {
    let t = refunds(Policy::Approve).await;
    let token = t.visitor().await;
    let (conversation, r) = ask_refund(&t, &token).await;
    assert!(
        !r.names().contains(&"confirm"),
        "the visitor sees no card: {:?}",
        r.names()
    );
    let step = r.event("step");
    assert_eq!(step["status"], "awaiting_approval");
    assert_eq!(r.event("done")["status"], "awaiting_confirmation");
    assert!(t.hook.calls().is_empty());
    let h = t.history(&token, &conversation).await;
    let shown = &h.json["messages"][1]["steps"][0];
    assert_eq!(shown["status"], "awaiting_approval");
    assert!(
        shown.get("signature").is_none(),
        "the visitor never holds the approval's signature"
    );

    let mut channel = t.channel(&token, &conversation, None).await;
    let admin = t.console(OperatorRole::Admin).await;
    let items = waiting(&admin).await;
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0]["arguments"],
        json!([{"name": "Amount", "value": "250"}])
    );
    assert_eq!(items[0]["can_approve"], true);
    t.hook.push(HookReply::ok(r#"{"refunded": 250}"#));
    t.llm
        .push(Script::text("Your refund of 250 is on its way [1]."));
    let decided = decide(&admin, &items[0], "approve").await;
    assert_eq!(decided.status, 200, "{:?}", decided.json);
    assert_eq!(decided.json["status"], "confirmed");

    // The outcome and the continuation arrive on the visitor's live channel.
    let events = channel.take(2, Duration::from_secs(10)).await;
    assert_eq!(events[0].name, "card");
    assert_eq!(
        events[0].data,
        json!({"call": items[0]["call"], "status": "confirmed"})
    );
    assert_eq!(events[1].name, "answer");
    assert_eq!(
        events[1].data["text"],
        "Your refund of 250 is on its way [1]."
    );
    assert_eq!(events[1].data["steps"][0]["status"], "succeeded");
    assert_eq!(t.hook.calls().len(), 1);
    assert_eq!(t.hook.calls()[0].body["arguments"], json!({"amount": 250}));
    assert_eq!(
        t.hook.calls()[0].headers["idempotency-key"],
        items[0]["call"].as_str().unwrap()
    );

    let call = items[0]["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        ["requested", "confirmed", "executed"]
    );
    let rows = t.app.store.audit().for_call(call).await.unwrap();
    assert!(
        rows[1].operator.as_deref().unwrap().starts_with("admin-"),
        "{:?}",
        rows[1]
    );
    assert!(waiting(&admin).await.is_empty());
    let h = t.history(&token, &conversation).await;
    assert_eq!(
        h.json["messages"][2]["text"],
        "Your refund of 250 is on its way [1]."
    );

    // The same approval again is refused as a replay; nothing runs twice.
    let again = decide(&admin, &items[0], "approve").await;
    assert_eq!(again.status, 409);
    assert_eq!(again.json["error"]["code"], "call_not_pending");
    assert_eq!(t.hook.calls().len(), 1);
}

#[tokio::test]
async fn confirm_and_approve_needs_the_visitor_first_then_a_teammate_who_may_decline() {
    let t = refunds(Policy::ConfirmApprove).await;
    let token = t.visitor().await;
    let (conversation, r) = ask_refund(&t, &token).await;
    let card = r.event("confirm").clone();
    let admin = t.console(OperatorRole::Admin).await;
    assert!(
        waiting(&admin).await.is_empty(),
        "not before the visitor confirms"
    );
    let confirmed = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!(confirmed.status, 200, "{:?}", confirmed.json);
    assert_eq!(confirmed.names(), ["decision", "done"]);
    assert_eq!(confirmed.event("decision")["status"], "awaiting_approval");
    assert!(t.hook.calls().is_empty());
    let items = waiting(&admin).await;
    assert_eq!(items.len(), 1);
    assert_ne!(
        items[0]["signature"], card["signature"],
        "an approval is signed apart"
    );
    // The visitor's card signature does not pass for the approval.
    let mut forged = items[0].clone();
    forged["signature"] = card["signature"].clone();
    let r = decide(&admin, &forged, "approve").await;
    assert_eq!(r.json["error"]["code"], "signature_invalid");

    t.llm
        .push(Script::text("A teammate could not approve that refund."));
    let declined = decide(&admin, &items[0], "decline").await;
    assert_eq!(declined.json["status"], "cancelled", "{:?}", declined.json);
    t.settle().await;
    assert!(t.hook.calls().is_empty(), "a declined call never runs");
    let call = items[0]["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        [
            "requested",
            "confirmed",
            "refused:forged",
            "cancelled:declined"
        ]
    );
    let told = t.llm.requests().last().unwrap().to_string();
    assert!(told.contains("A teammate declined this call"), "{told}");
    assert!(told.contains("checked the order"), "{told}");
    let h = t.history(&token, &conversation).await;
    assert_eq!(
        h.json["messages"][2]["text"],
        "A teammate could not approve that refund."
    );
}

#[tokio::test]
async fn an_agent_may_not_approve_where_only_admins_do_and_a_visitor_may_not_at_all() {
    let t = refunds(Policy::Approve).await;
    let token = t.visitor().await;
    ask_refund(&t, &token).await;
    let agent = t.console(OperatorRole::Agent).await;
    let items = waiting(&agent).await;
    assert_eq!(items[0]["can_approve"], false);
    let r = decide(&agent, &items[0], "approve").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json["error"]["code"], "forbidden");
    let call = items[0]["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        ["requested", "refused:not_approver"]
    );
    let rows = t.app.store.audit().for_call(call).await.unwrap();
    assert!(rows[1].operator.as_deref().unwrap().starts_with("agent-"));
    let path = format!(
        "/v1/operator/approvals/{}",
        items[0]["call"].as_str().unwrap()
    );
    let visitor = t
        .post(
            &path,
            Some(&token),
            crate::support::ORIGIN,
            json!({"decision": "approve", "signature": items[0]["signature"]}),
        )
        .await;
    assert_eq!(visitor.status, 401);
    assert_eq!(visitor.json["error"]["code"], "operator_unauthenticated");
    assert!(t.hook.calls().is_empty());
}

/// An app whose refunds wait for a teammate for five minutes at most.
async fn refunds_approved_within_five_minutes() -> TestApp {
    TestApp::with(|c| {
        let refund = tool(c, "refund");
        refund.policy = Policy::Approve;
        refund.approval_ttl_min = 5.0;
    })
    .await
}

#[tokio::test]
async fn an_approval_after_its_time_is_late_and_nothing_runs() {
    let t = refunds_approved_within_five_minutes().await;
    let token = t.visitor().await;
    let (conversation, _) = ask_refund(&t, &token).await;
    let admin = t.console(OperatorRole::Admin).await;
    let items = waiting(&admin).await;
    t.clock.advance_ms(5 * 60 * 1000 + 1);
    let r = decide(&admin, &items[0], "approve").await;
    assert_eq!(r.status, 410, "{:?}", r.json);
    assert_eq!(r.json["error"]["code"], "confirmation_expired");
    let call = items[0]["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        ["requested", "expired", "refused:late"]
    );
    let h = t.history(&token, &conversation).await;
    assert_eq!(h.json["messages"][1]["steps"][0]["status"], "expired");
    assert!(t.hook.calls().is_empty());
}

#[tokio::test]
async fn two_operators_approving_at_once_on_two_replicas_run_the_call_once() {
    let t = refunds(Policy::Approve).await;
    let other = t
        .replica(|c| {
            for_racing(c);
            tool(c, "refund").policy = Policy::Approve;
        })
        .await;
    let token = t.visitor().await;
    ask_refund(&t, &token).await;
    let first = t.console(OperatorRole::Admin).await;
    let second = other.console(OperatorRole::Admin).await;
    let item = waiting(&first).await.remove(0);
    t.hook.push(HookReply::ok("{}"));
    let (a, b) = tokio::join!(
        decide(&first, &item, "approve"),
        decide(&second, &item, "approve")
    );
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert_eq!(statuses, [200, 409], "{:?} {:?}", a.json, b.json);
    t.settle().await;
    other.settle().await;
    assert_eq!(t.hook.calls().len(), 1, "one run");
    let call = item["call"].as_str().unwrap();
    // The loser's refusal and the winner's run may land in either order.
    let mut events = t.audit_events(call).await;
    events.sort();
    assert_eq!(
        events,
        ["confirmed", "executed", "refused:replayed", "requested"]
    );
}

#[tokio::test]
async fn an_operator_cannot_confirm_a_visitors_own_card_through_the_approvals_route() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (_, card) = t.raise_card(&token).await;
    let admin = t.console(OperatorRole::Admin).await;
    assert!(
        waiting(&admin).await.is_empty(),
        "a visitor's card is not in the queue"
    );
    let r = decide(&admin, &card, "approve").await;
    assert_eq!(r.status, 403, "{:?}", r.json);
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        ["requested", "refused:not_approver"]
    );
    assert!(t.hook.calls().is_empty());
}

#[tokio::test]
async fn bad_approval_requests_are_refused_with_a_clear_code_and_nothing_runs() {
    let t = refunds(Policy::Approve).await;
    let token = t.visitor().await;
    ask_refund(&t, &token).await;
    let admin = t.console(OperatorRole::Admin).await;
    let item = waiting(&admin).await.remove(0);
    let path = format!("/v1/operator/approvals/{}", item["call"].as_str().unwrap());
    let long = "x".repeat(1001);
    for (body, code) in [
        (
            json!({"decision": "maybe", "signature": item["signature"]}),
            "invalid_request",
        ),
        (json!({"decision": "approve"}), "invalid_request"),
        (
            json!({"decision": "approve", "signature": item["signature"], "extra": 1}),
            "invalid_request",
        ),
        (
            json!({"decision": "approve", "signature": item["signature"], "note": long}),
            "invalid_request",
        ),
        (
            json!({"decision": "decline", "signature": item["signature"], "note": "ok\u{202e}"}),
            "invalid_request",
        ),
    ] {
        let r = admin.send(Method::POST, &path, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {:?}", r.json);
        assert_eq!(r.json["error"]["code"], code, "{body}");
    }
    for call in ["call_nope", "not-an-id", "c_123"] {
        let r = admin
            .send(
                Method::POST,
                &format!("/v1/operator/approvals/{call}"),
                json!({"decision": "approve", "signature": item["signature"]}),
            )
            .await;
        assert_eq!(r.status, 404, "{call}: {:?}", r.json);
        assert_eq!(r.json["error"]["code"], "call_not_found");
    }
    // Without the CSRF header a session may not decide.
    let r = admin
        .call(
            Method::POST,
            &path,
            Some(json!({"decision": "approve", "signature": item["signature"]})),
            false,
        )
        .await;
    assert_eq!(r.status, 403, "{:?}", r.json);
    assert_eq!(r.json["error"]["code"], "csrf_invalid");
    assert!(t.hook.calls().is_empty());
    assert_eq!(waiting(&admin).await.len(), 1, "the call still waits");
}

#[tokio::test]
async fn a_late_approval_tells_the_visitors_channel_the_call_expired() {
    let t = refunds_approved_within_five_minutes().await;
    let token = t.visitor().await;
    let (conversation, _) = ask_refund(&t, &token).await;
    let admin = t.console(OperatorRole::Admin).await;
    let item = waiting(&admin).await.remove(0);
    let mut channel = t.channel(&token, &conversation, None).await;
    t.clock.advance_ms(5 * 60 * 1000 + 1);
    assert_eq!(decide(&admin, &item, "approve").await.status, 410);
    let events = channel.take(1, Duration::from_secs(10)).await;
    assert_eq!(events[0].name, "card");
    assert_eq!(
        events[0].data,
        json!({"call": item["call"], "status": "expired"})
    );
}

#[tokio::test]
async fn a_declined_call_gives_its_quota_use_back() {
    let t = TestApp::with(|c| {
        let refund = tool(c, "refund");
        refund.policy = Policy::Approve;
        refund.quota = Some(deskbell::config::Quota {
            per: deskbell::config::QuotaPer::Visitor,
            window: deskbell::config::QuotaWindow::Month,
            max: 1,
        });
    })
    .await;
    let token = t.visitor().await;
    ask_refund(&t, &token).await;
    let admin = t.console(OperatorRole::Admin).await;
    let item = waiting(&admin).await.remove(0);
    t.llm.push(Script::text("Declined."));
    assert_eq!(decide(&admin, &item, "decline").await.status, 200);
    t.settle().await;
    // The one use came back: the next refund waits again instead of being
    // refused as over the quota.
    let (_, r) = ask_refund(&t, &token).await;
    assert_eq!(
        r.event("step")["status"],
        "awaiting_approval",
        "{:?}",
        r.names()
    );
    assert_eq!(waiting(&admin).await.len(), 1);
}
