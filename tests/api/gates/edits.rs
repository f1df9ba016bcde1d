//! Editing a card before confirming (SPEC §20): the edits are checked, a new
//! card is signed for them, the old one closes superseded, and only the new
//! one runs — with the edited values, which the model and the audit see.

use deskbell::testkit::{HookReply, Reply as Script};
use serde_json::{Value, json};

use super::order_tool;
use crate::support::TestApp;

/// The test site with the order tool, on the test's webhook (`/order`).
async fn shop() -> TestApp {
    TestApp::with(|c| {
        let url = super::tool(c, "refund").url.replace("/refund", "/order");
        c.sites[0].tools.push(order_tool(url));
    })
    .await
}

/// Raises the order card for two of SKU-1; returns the conversation and card.
async fn order_card(t: &TestApp, token: &str) -> (String, Value) {
    t.llm.push(Script::tool_calls(&[(
        "order_more",
        json!({"sku": "SKU-1", "quantity": 2, "size": "M", "note": "hi"}),
    )]));
    let r = t.question(token, None, "Order two more").await;
    assert_eq!(r.names(), ["turn", "confirm", "done"], "{:?}", r.json);
    (r.conversation(), r.event("confirm").clone())
}

async fn edit(
    t: &TestApp,
    token: &str,
    conversation: &str,
    card: &Value,
    edits: Value,
) -> crate::support::Reply {
    t.ask(
        token,
        json!({"conversation": conversation, "call": card["call"], "decision": "confirm",
               "signature": card["signature"], "edits": edits}),
    )
    .await
}

#[tokio::test]
async fn the_card_shows_its_editable_fields_typed_by_the_schema() {
    let t = shop().await;
    let token = t.visitor().await;
    let (conversation, card) = order_card(&t, &token).await;
    let fields = card["editable"].as_array().unwrap();
    let by_field = |f: &str| fields.iter().find(|x| x["field"] == f).unwrap().clone();
    assert_eq!(
        by_field("quantity"),
        json!({"field": "quantity", "name": "Quantity", "input": "integer", "value": 2})
    );
    assert_eq!(by_field("size")["input"], "select");
    assert_eq!(
        by_field("size")["options"][2],
        json!({"value": "L", "title": "L"})
    );
    assert_eq!(by_field("gift")["input"], "boolean");
    assert!(
        by_field("gift").get("value").is_none(),
        "the call left it out"
    );
    let h = t.history(&token, &conversation).await;
    assert_eq!(
        h.json["messages"][1]["steps"][0]["editable"],
        card["editable"]
    );
}

#[tokio::test]
async fn an_edited_quantity_runs_once_on_the_new_card_and_the_model_and_audit_see_it() {
    let t = shop().await;
    let token = t.visitor().await;
    let (conversation, card) = order_card(&t, &token).await;
    let r = edit(&t, &token, &conversation, &card, json!({"quantity": 3})).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.names(), ["decision", "confirm", "done"]);
    assert_eq!(
        r.event("decision"),
        &json!({"call": card["call"], "status": "cancelled"})
    );
    let new = r.event("confirm").clone();
    assert_ne!(new["call"], card["call"]);
    assert!(
        new["arguments"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "Quantity", "value": "3"}))
    );
    assert_eq!(r.event("done")["status"], "awaiting_confirmation");
    assert!(t.hook.calls().is_empty(), "an edit runs nothing");

    // The old card can no longer run.
    let old = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!(old.status, 409, "{:?}", old.json);
    assert_eq!(old.json["error"]["code"], "call_not_pending");

    t.hook.push(HookReply::ok(r#"{"ordered": 3}"#));
    t.llm.push(Script::text("Three more are on their way [1]."));
    let ran = t.answer(&token, &conversation, &new, "confirm").await;
    assert_eq!(ran.status, 200, "{:?}", ran.json);
    assert_eq!(ran.event("done")["status"], "answered");
    let calls = t.hook.calls();
    assert_eq!(calls.len(), 1, "exactly one run");
    assert_eq!(
        calls[0].body["arguments"],
        json!({"note": "hi", "quantity": 3, "size": "M", "sku": "SKU-1"})
    );
    assert_eq!(calls[0].body["call"], new["call"]);

    // The model is told the values that ran, in its own history too.
    let asked = t.llm.requests().last().unwrap().to_string();
    assert!(asked.contains(r#"\"quantity\":3"#), "{asked}");
    assert!(!asked.contains(r#"\"quantity\":2"#), "{asked}");
    assert!(
        asked.contains("changed the arguments on the card"),
        "{asked}"
    );

    // The audit keeps both argument sets.
    let old_rows = t
        .app
        .store
        .audit()
        .for_call(card["call"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(
        old_rows[0].arguments,
        r#"{"note":"hi","quantity":2,"size":"M","sku":"SKU-1"}"#
    );
    assert_eq!(
        t.audit_events(card["call"].as_str().unwrap()).await,
        ["requested", "cancelled:superseded", "refused:replayed"]
    );
    let new_call = new["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(new_call).await,
        ["requested", "confirmed", "executed"]
    );
    let new_rows = t.app.store.audit().for_call(new_call).await.unwrap();
    assert_eq!(
        new_rows[0].arguments,
        r#"{"note":"hi","quantity":3,"size":"M","sku":"SKU-1"}"#
    );
    assert_eq!(new_rows[2].arguments, new_rows[0].arguments);
}

#[tokio::test]
async fn bad_edits_are_refused_and_audited_and_the_card_stays_answerable() {
    let t = shop().await;
    let token = t.visitor().await;
    let (conversation, card) = order_card(&t, &token).await;
    for (edits, why) in [
        (json!({"sku": "SKU-2"}), "cannot be changed"),
        (json!({"quantity": 99}), "do not fit"),
        (json!({"quantity": "3"}), "do not fit"),
        (json!({"size": "XL"}), "do not fit"),
        (json!({"quantity": {"n": 3}}), "plain value"),
        (json!({"note": "hi\u{202e}there"}), "invisible"),
    ] {
        let r = edit(&t, &token, &conversation, &card, edits.clone()).await;
        assert_eq!(r.status, 422, "{edits}: {:?}", r.json);
        assert_eq!(r.json["error"]["code"], "invalid_edit", "{edits}");
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{edits}: {message}");
    }
    // A number beyond I-JSON, sent as the visitor's own text.
    let raw = format!(
        r#"{{"conversation": "{conversation}", "call": {}, "decision": "confirm", "signature": {}, "edits": {{"quantity": 9007199254740993}}}}"#,
        card["call"], card["signature"]
    );
    let r = t
        .post_raw("/v1/ask", Some(&token), Some(crate::support::ORIGIN), raw)
        .await;
    assert_eq!(r.json["error"]["code"], "invalid_edit", "{:?}", r.json);
    // Beyond any integer type, and beyond a double: refused, not rounded.
    for number in ["18446744073709551616", "1e400"] {
        let raw = format!(
            r#"{{"conversation": "{conversation}", "call": {}, "decision": "confirm", "signature": {}, "edits": {{"quantity": {number}}}}}"#,
            card["call"], card["signature"]
        );
        let origin = Some(crate::support::ORIGIN);
        let r = t.post_raw("/v1/ask", Some(&token), origin, raw).await;
        assert_eq!(r.status, 422, "{number}: {:?}", r.json);
        assert_eq!(r.json["error"]["code"], "invalid_edit", "{number}");
    }
    let call = card["call"].as_str().unwrap();
    let events = t.audit_events(call).await;
    assert_eq!(events.len(), 10, "{events:?}");
    assert!(
        events[1..].iter().all(|e| e == "refused:invalid_arguments"),
        "{events:?}"
    );
    assert!(t.hook.calls().is_empty());
    t.hook.push(HookReply::ok("{}"));
    let r = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!(r.status, 200, "the card was never closed: {:?}", r.json);
    assert_eq!(t.hook.calls().len(), 1);
}

#[tokio::test]
async fn an_edit_with_a_forged_signature_or_on_another_conversation_is_refused() {
    let t = shop().await;
    let token = t.visitor().await;
    let (conversation, card) = order_card(&t, &token).await;
    let (other_conversation, _) = order_card(&t, &token).await;
    let mut forged = card.clone();
    forged["signature"] = json!("AAAA".repeat(11));
    let r = edit(&t, &token, &conversation, &forged, json!({"quantity": 3})).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json["error"]["code"], "signature_invalid");
    let r = edit(
        &t,
        &token,
        &other_conversation,
        &card,
        json!({"quantity": 3}),
    )
    .await;
    assert_eq!(r.status, 404, "{:?}", r.json);
    let stranger = t.visitor().await;
    let r = edit(&t, &stranger, &conversation, &card, json!({"quantity": 3})).await;
    assert_eq!(r.json["error"]["code"], "conversation_not_found");
    let events = t.audit_events(card["call"].as_str().unwrap()).await;
    assert_eq!(
        events,
        [
            "requested",
            "refused:forged",
            "refused:foreign_conversation",
            "refused:foreign_conversation"
        ]
    );
    // A replayed edit answer: the first edit wins, the same answer again is refused.
    let first = edit(&t, &token, &conversation, &card, json!({"quantity": 3})).await;
    assert_eq!(first.status, 200);
    let again = edit(&t, &token, &conversation, &card, json!({"quantity": 3})).await;
    assert_eq!(again.status, 409);
    assert_eq!(again.json["error"]["code"], "call_not_pending");
    let events = t.audit_events(card["call"].as_str().unwrap()).await;
    assert_eq!(
        &events[events.len() - 2..],
        ["cancelled:superseded", "refused:replayed"]
    );
    assert!(t.hook.calls().is_empty());
}

#[tokio::test]
async fn edits_with_a_cancel_are_a_bad_request() {
    let t = shop().await;
    let token = t.visitor().await;
    let (conversation, card) = order_card(&t, &token).await;
    let r = t
        .ask(
            &token,
            json!({"conversation": conversation, "call": card["call"], "decision": "cancel",
                   "signature": card["signature"], "edits": {"quantity": 3}}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json["error"]["code"], "invalid_request");
}

#[tokio::test]
async fn an_edit_racing_a_confirm_of_the_same_card_never_both_win() {
    let t = TestApp::with(|c| {
        crate::support::for_racing(c);
        let url = super::tool(c, "refund").url.replace("/refund", "/order");
        c.sites[0].tools.push(order_tool(url));
    })
    .await;
    for _ in 0..5 {
        let token = t.visitor().await;
        let (conversation, card) = order_card(&t, &token).await;
        // The continuation, if the confirm wins, takes the model stand-in's
        // default answer: a scripted one would be left over when the edit wins.
        let before = t.hook.calls().len();
        let (edited, confirmed) = tokio::join!(
            edit(&t, &token, &conversation, &card, json!({"quantity": 4})),
            t.answer(&token, &conversation, &card, "confirm"),
        );
        t.settle().await;
        let ran = t.hook.calls().len() - before;
        match (edited.status, confirmed.status) {
            // The edit won: a new card, nothing ran.
            (200, 409) => assert_eq!(ran, 0),
            // The confirm won: the shown quantity ran once, the edit refused.
            (409, 200) => {
                assert_eq!(ran, 1);
                assert_eq!(
                    t.hook.calls().last().unwrap().body["arguments"]["quantity"],
                    2
                );
            }
            other => panic!(
                "both or neither won: {other:?} {:?} {:?}",
                edited.json, confirmed.json
            ),
        }
        let events = t.audit_events(card["call"].as_str().unwrap()).await;
        assert_eq!(
            events
                .iter()
                .filter(|e| e.starts_with("refused:replayed"))
                .count(),
            1,
            "{events:?}"
        );
    }
}
