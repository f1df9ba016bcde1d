//! Quotas (SPEC §20): a call past its quota is refused before any card, the
//! model told; the card shows what is left; a card closed without running
//! gives its use back; racing calls on two replicas are counted exactly.

use deskbell::config::{Quota, QuotaPer, QuotaWindow};
use deskbell::testkit::{HookReply, Reply as Script};
use serde_json::json;

use super::tool;
use crate::support::{TestApp, for_racing};

fn quota(per: QuotaPer, window: QuotaWindow, max: u32) -> Option<Quota> {
    Some(Quota { per, window, max })
}

#[tokio::test]
async fn a_call_past_its_quota_is_refused_before_it_runs_and_the_model_is_told() {
    let t = TestApp::with(|c| {
        tool(c, "lookup_order").quota = quota(QuotaPer::Visitor, QuotaWindow::Day, 2);
    })
    .await;
    let token = t.visitor().await;
    for n in 0..3 {
        t.llm.push(Script::tool_calls(&[(
            "lookup_order",
            json!({"order_id": n}),
        )]));
        t.hook.push(HookReply::ok(r#"{"status": "shipped"}"#));
        t.llm.push(Script::text("Done."));
        let r = t.question(&token, None, "Where is my order?").await;
        assert_eq!(r.status, 200, "{:?}", r.json);
    }
    assert_eq!(t.hook.calls().len(), 2, "the third call is past the quota");
    let refused: Vec<_> = t
        .audit()
        .await
        .into_iter()
        .filter(|r| r.reason.map(|x| x.as_str()) == Some("quota"))
        .collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].event.as_str(), "refused");
    assert_eq!(refused[0].arguments, r#"{"order_id":2}"#);
    let told = t.llm.requests().last().unwrap().to_string();
    assert!(told.contains("used up"), "{told}");
    // Another visitor has a quota of their own.
    let other = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 9}),
    )]));
    t.hook.push(HookReply::ok(r#"{"status": "shipped"}"#));
    t.question(&other, None, "Where is my order?").await;
    assert_eq!(t.hook.calls().len(), 3);
}

#[tokio::test]
async fn a_card_shows_what_is_left_and_a_cancelled_card_gives_its_use_back() {
    let t = TestApp::with(|c| {
        tool(c, "cancel_order").quota = quota(QuotaPer::Visitor, QuotaWindow::Month, 3);
    })
    .await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    assert_eq!(
        card["quota"],
        json!({"left": 2, "max": 3, "window": "month"})
    );
    let h = t.history(&token, &conversation).await;
    assert_eq!(h.json["messages"][1]["steps"][0]["quota"], card["quota"]);
    t.llm.push(Script::text("Left as it is."));
    t.answer(&token, &conversation, &card, "cancel").await;
    let (_, again) = t.raise_card(&token).await;
    assert_eq!(
        again["quota"]["left"], 2,
        "the cancelled card gave its use back"
    );
    let (_, third) = t.raise_card(&token).await;
    // Each card is in a conversation of its own: the second is still
    // pending, so it holds its use.
    assert_eq!(third["quota"]["left"], 1);
    // The console's usage view shows the use.
    let admin = t.console(deskbell::states::OperatorRole::Agent).await;
    let usage = admin.get("/v1/operator/usage?site=acme&days=1").await;
    let quotas = &usage.json["sites"][0]["quotas"];
    assert_eq!(quotas.as_array().unwrap().len(), 1, "{quotas}");
    assert_eq!(quotas[0]["tool"], "cancel_order");
    assert_eq!(quotas[0]["per"], "visitor");
    assert_eq!(quotas[0]["used"], 2);
    assert_eq!(quotas[0]["max"], 3);
    assert!(quotas[0]["visitor"].as_str().unwrap().starts_with("v_"));
}

#[tokio::test]
async fn a_quota_spent_refuses_the_card_before_it_is_shown() {
    let t = TestApp::with(|c| {
        tool(c, "cancel_order").quota = quota(QuotaPer::Site, QuotaWindow::Day, 1);
    })
    .await;
    let token = t.visitor().await;
    let (_, card) = t.raise_card(&token).await;
    assert_eq!(card["quota"]["left"], 0);
    let other = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "cancel_order",
        json!({"order_id": 7}),
    )]));
    t.llm
        .push(Script::text("I cannot cancel more orders today."));
    let r = t.question(&other, None, "Cancel order 7").await;
    assert!(!r.names().contains(&"confirm"), "{:?}", r.names());
    assert_eq!(r.event("done")["status"], "answered");
    let told = t.llm.requests().last().unwrap().to_string();
    assert!(
        told.contains("at most 1 times for this site per UTC day"),
        "{told}"
    );
}

#[tokio::test]
async fn twenty_racing_calls_over_two_replicas_run_exactly_the_quota_of_three() {
    let t = TestApp::with(|c| {
        for_racing(c);
        tool(c, "lookup_order").quota = quota(QuotaPer::Site, QuotaWindow::Day, 3);
    })
    .await;
    let other = t
        .replica(|c| {
            for_racing(c);
            tool(c, "lookup_order").quota = quota(QuotaPer::Site, QuotaWindow::Day, 3);
        })
        .await;
    for n in 0..20 {
        t.llm.push(Script::tool_calls(&[(
            "lookup_order",
            json!({"order_id": n}),
        )]));
    }
    let mut asks = Vec::new();
    for n in 0..20 {
        let app = if n % 2 == 0 { &t } else { &other };
        let token = app.visitor().await;
        asks.push(async move { app.question(&token, None, "Where is my order?").await });
    }
    let replies = futures_util::future::join_all(asks).await;
    for r in &replies {
        assert_eq!(r.status, 200, "{:?}", r.json);
    }
    assert_eq!(t.hook.calls().len(), 3, "exactly the quota ran");
    let refused = t
        .audit()
        .await
        .into_iter()
        .filter(|r| r.reason.map(|x| x.as_str()) == Some("quota"))
        .count();
    assert_eq!(refused, 17);
}

#[tokio::test]
async fn an_edited_card_keeps_its_use_and_an_expired_one_gives_it_back() {
    let t = TestApp::with(|c| {
        let url = tool(c, "refund").url.replace("/refund", "/order");
        let mut order = super::order_tool(url);
        order.quota = quota(QuotaPer::Visitor, QuotaWindow::Month, 2);
        c.sites[0].tools.push(order);
    })
    .await;
    let token = t.visitor().await;
    let raise = || async {
        t.llm.push(Script::tool_calls(&[(
            "order_more",
            json!({"sku": "SKU-1", "quantity": 2}),
        )]));
        let r = t.question(&token, None, "Order two more").await;
        (r.conversation(), r.event("confirm").clone())
    };
    let (conversation, card) = raise().await;
    assert_eq!(card["quota"]["left"], 1);
    let edited = t
        .ask(
            &token,
            json!({"conversation": conversation, "call": card["call"], "decision": "confirm",
                   "signature": card["signature"], "edits": {"quantity": 3}}),
        )
        .await;
    let new = edited.event("confirm");
    assert_eq!(
        new["quota"]["left"], 1,
        "the edit passed its use on, not a second one"
    );
    // The edited card expires: its use comes back.
    t.clock.advance_ms(11 * 60 * 1000);
    t.history(&token, &conversation).await;
    let (_, again) = raise().await;
    assert_eq!(again["quota"]["left"], 1);
    let (_, last) = raise().await;
    assert_eq!(last["quota"]["left"], 0);
}
