//! Cards that run out of time or are superseded by a new question (SPEC §6.6, §7).

use std::time::Duration;

use deskbell::testkit::Reply as Script;

use crate::confirm::TEN_MINUTES_MS;
use crate::support::TestApp;

#[tokio::test]
async fn a_late_answer_is_refused_and_the_card_reads_expired() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    t.clock.advance_ms(TEN_MINUTES_MS);
    let r = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!((r.status, r.code()), (410, "confirmation_expired"));
    let again = t.answer(&token, &conversation, &card, "cancel").await;
    assert_eq!((again.status, again.code()), (410, "confirmation_expired"));
    assert!(t.hook.calls().is_empty());
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        ["requested", "expired", "refused:late", "refused:late"]
    );
    let expired = &t.app.store.audit().for_call(call).await.unwrap()[1];
    assert_eq!(
        expired.at,
        crate::support::card_expires_ms(&card),
        "the expiry time is the decision time"
    );
    let step = &t.history(&token, &conversation).await.json["messages"][1]["steps"][0];
    assert_eq!(step["status"], "expired");
    assert_eq!(step["decided_at"], card["expires_at"]);
    assert!(
        step.get("signature").is_none(),
        "an expired card carries no signature, so no buttons"
    );
}

#[tokio::test]
async fn a_card_expires_whether_or_not_anybody_answers() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (_, card) = t.raise_card(&token).await;
    t.clock.advance_ms(TEN_MINUTES_MS - 1);
    assert!(
        t.app
            .store
            .cards()
            .expire_due(deskbell::clock::Clock::now_ms(&*t.clock), None)
            .await
            .unwrap()
            .is_empty()
    );
    t.clock.advance_ms(1);
    let swept = t
        .app
        .store
        .cards()
        .expire_due(deskbell::clock::Clock::now_ms(&*t.clock), None)
        .await
        .unwrap();
    assert_eq!(swept.len(), 1);
    assert_eq!(
        t.audit_events(card["call"].as_str().unwrap()).await,
        ["requested", "expired"]
    );
}

#[tokio::test]
async fn the_time_to_live_follows_the_setting() {
    let t = TestApp::with(|c| c.approval_ttl = Duration::from_secs(3)).await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    assert_eq!(
        crate::support::card_expires_ms(&card) - deskbell::clock::Clock::now_ms(&*t.clock),
        3000
    );
    t.clock.advance_ms(2999);
    t.llm.push(Script::text("Done."));
    assert_eq!(
        t.answer(&token, &conversation, &card, "confirm")
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn a_new_message_closes_a_pending_card_as_superseded() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    t.llm.push(Script::text("Sure, what else?"));
    let r = t
        .question(&token, Some(&conversation), "Actually, never mind")
        .await;
    assert_eq!(r.status, 200);
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        ["requested", "cancelled:superseded"]
    );
    let stale = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!((stale.status, stale.code()), (409, "call_not_pending"));
    assert!(t.hook.calls().is_empty());
    let h = t.history(&token, &conversation).await.json;
    assert_eq!(h["messages"][1]["steps"][0]["status"], "cancelled");
}

/// A new message in a conversation whose card ran out before anybody swept it
/// closes the card as expired, at its expiry time, not as superseded.
#[tokio::test]
async fn a_new_message_after_a_card_ran_out_closes_it_as_expired() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    t.clock.advance_ms(TEN_MINUTES_MS + 5);
    t.llm.push(Script::text("Anything else?"));
    let r = t.question(&token, Some(&conversation), "Hello again").await;
    assert_eq!(r.status, 200);
    let call = card["call"].as_str().unwrap();
    assert_eq!(t.audit_events(call).await, ["requested", "expired"]);
    let rows = t
        .app
        .store
        .calls()
        .in_conversation(&conversation)
        .await
        .unwrap();
    let expires = crate::support::card_expires_ms(&card);
    assert_eq!(rows[0].decided_at, Some(expires), "decided at its expiry");
    assert_eq!(rows[0].reason, None);
}

/// Two questions saved in one batch of the group commit, in two conversations
/// whose cards run out between the two questions' times: each card is judged at
/// its own question's time, as it would be alone — the earlier question's card
/// is superseded, the later one's expired.
#[tokio::test]
async fn cards_closed_in_one_batch_are_each_judged_at_their_own_questions_time() {
    use deskbell::states::Role;
    use deskbell::store::{Reservation, TurnStart};
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (first, first_card) = t.raise_card(&token).await;
    let (second, second_card) = t.raise_card(&token).await;
    let expires = crate::support::card_expires_ms(&first_card);
    let start = |conversation: &str, now| TurnStart {
        conversation: conversation.to_string(),
        is_new: false,
        site: "acme".into(),
        visitor: "v_x".into(),
        now,
        visitor_message: crate::support::message_row(
            &deskbell::ids::new_id("m"),
            conversation,
            Role::Visitor,
        ),
        bubble: crate::support::message_row(
            &deskbell::ids::new_id("m"),
            conversation,
            Role::Assistant,
        ),
        budget: None,
    };
    // One batch, written by the batch's own statements: `write_batch` does not
    // fall back to job by job, so a statement failing on one database shows.
    let starts = [start(&first, expires - 1), start(&second, expires + 1)];
    let begun = t.app.store.turns().write_batch(&[], &starts).await.unwrap();
    assert_eq!(begun, [Reservation::Reserved, Reservation::Reserved]);
    assert_eq!(
        t.audit_events(first_card["call"].as_str().unwrap()).await,
        ["requested", "cancelled:superseded"]
    );
    assert_eq!(
        t.audit_events(second_card["call"].as_str().unwrap()).await,
        ["requested", "expired"]
    );
}
