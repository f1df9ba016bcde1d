//! Answers that must be refused (SPEC §8): forged, altered, replayed, foreign,
//! stale — and racing answers, of which exactly one runs the call.

use serde_json::json;

use crate::support::{TestApp, for_racing};

#[tokio::test]
async fn a_replayed_confirmation_is_refused() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    assert_eq!(
        t.answer(&token, &conversation, &card, "confirm")
            .await
            .status,
        200
    );
    for decision in ["confirm", "cancel"] {
        let again = t.answer(&token, &conversation, &card, decision).await;
        assert_eq!((again.status, again.code()), (409, "call_not_pending"));
    }
    assert_eq!(t.hook.calls().len(), 1);
    let events = t.audit_events(card["call"].as_str().unwrap()).await;
    assert_eq!(
        events,
        [
            "requested",
            "confirmed",
            "executed",
            "refused:replayed",
            "refused:replayed"
        ]
    );
}

#[tokio::test]
async fn a_forged_signature_is_refused_and_nothing_runs() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    let mut forged = card.clone();
    for signature in ["AAAA", "", "not base64!", &"A".repeat(43)] {
        forged["signature"] = json!(signature);
        let r = t.answer(&token, &conversation, &forged, "confirm").await;
        assert_eq!(
            (r.status, r.code()),
            (403, "signature_invalid"),
            "{signature}"
        );
    }
    assert!(t.hook.calls().is_empty());
    let call = card["call"].as_str().unwrap();
    assert_eq!(t.audit_events(call).await[1], "refused:forged");
    // The genuine answer still works: forgeries do not burn the card.
    assert_eq!(
        t.answer(&token, &conversation, &card, "confirm")
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn arguments_altered_after_signing_are_refused_and_nothing_runs() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    sqlx::query("UPDATE calls SET arguments = '{\"order_id\":43}' WHERE id = $1")
        .bind(card["call"].as_str().unwrap())
        .execute(&t.db().await)
        .await
        .unwrap();
    let r = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!((r.status, r.code()), (403, "signature_invalid"));
    assert!(t.hook.calls().is_empty());
    assert_eq!(
        t.audit_events(card["call"].as_str().unwrap()).await[1],
        "refused:altered"
    );
}

#[tokio::test]
async fn another_visitor_cannot_answer_a_card() {
    let t = TestApp::start().await;
    let alice = t.visitor().await;
    let mallory = t.visitor().await;
    let (conversation, card) = t.raise_card(&alice).await;
    let r = t.answer(&mallory, &conversation, &card, "confirm").await;
    assert_eq!((r.status, r.code()), (404, "conversation_not_found"));
    assert!(t.hook.calls().is_empty());
    assert_eq!(
        t.audit_events(card["call"].as_str().unwrap()).await,
        ["requested", "refused:foreign_conversation"]
    );
}

#[tokio::test]
async fn a_call_from_another_conversation_is_refused() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation_a, _card_a) = t.raise_card(&token).await;
    let (_conversation_b, card_b) = t.raise_card(&token).await;
    let r = t.answer(&token, &conversation_a, &card_b, "confirm").await;
    assert_eq!((r.status, r.code()), (404, "call_not_found"));
    assert!(t.hook.calls().is_empty());
    assert_eq!(
        t.audit_events(card_b["call"].as_str().unwrap()).await,
        ["requested", "refused:foreign_conversation"]
    );
    let unknown =
        json!({"call": format!("call_{}", "0".repeat(32)), "signature": card_b["signature"]});
    let r = t.answer(&token, &conversation_a, &unknown, "confirm").await;
    assert_eq!((r.status, r.code()), (404, "call_not_found"));
}

#[tokio::test]
async fn a_card_whose_tool_changed_since_it_was_signed_is_refused_as_stale() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    // The operator edits the tool and restarts: a second app on the same database.
    let edited = t
        .replica(|c| {
            c.sites[0].tools[1].url = t.hook.url("/cancel-v2");
        })
        .await;
    let r = edited.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!((r.status, r.code()), (409, "call_not_pending"));
    assert!(t.hook.calls().is_empty());
    assert_eq!(
        t.audit_events(card["call"].as_str().unwrap()).await,
        ["requested", "refused:stale"]
    );
}

#[tokio::test]
async fn fifty_concurrent_confirmations_run_the_call_exactly_once() {
    let t = TestApp::with(for_racing).await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    let answers = (0..50).map(|_| t.answer(&token, &conversation, &card, "confirm"));
    let replies = futures_util::future::join_all(answers).await;
    let ok = replies.iter().filter(|r| r.status == 200).count();
    let conflicts = replies
        .iter()
        .filter(|r| r.status == 409 && r.code() == "call_not_pending")
        .count();
    assert_eq!((ok, conflicts), (1, 49));
    t.settle().await;
    assert_eq!(t.hook.calls().len(), 1);
    let events = t.audit_events(card["call"].as_str().unwrap()).await;
    assert_eq!(events.iter().filter(|e| *e == "confirmed").count(), 1);
    assert_eq!(events.iter().filter(|e| *e == "executed").count(), 1);
}

#[tokio::test]
async fn two_replicas_racing_on_one_database_run_the_call_once() {
    let t = TestApp::with(for_racing).await;
    let replica = t.replica(for_racing).await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    let answers = (0..20).map(|i| {
        let app = if i % 2 == 0 { &t } else { &replica };
        app.answer(&token, &conversation, &card, "confirm")
    });
    let replies = futures_util::future::join_all(answers).await;
    assert_eq!(replies.iter().filter(|r| r.status == 200).count(), 1);
    t.settle().await;
    replica.settle().await;
    assert_eq!(t.hook.calls().len(), 1);
}
