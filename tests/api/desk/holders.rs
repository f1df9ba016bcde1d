//! Who holds a conversation: the three ways to a person, the one way back, and
//! the refusals around them.

use serde_json::json;

use super::{audit_of, conversation, named_console, with_handoff};
use crate::support::TestApp;
use deskbell::states::OperatorRole;

#[tokio::test]
async fn a_visitor_who_asks_for_a_person_waits_in_the_queue_and_the_model_is_not_asked() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    let r = t
        .handoff(&token, &c, json!({"reason": "I want a human"}))
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["holder"], "queue");
    let asked = t.llm.requests().len();
    let r = t.question(&token, Some(&c), "Is anyone there?").await;
    assert_eq!(r.status, 202, "{:?}", r.json);
    assert_eq!(r.json["queued"], true);
    assert_eq!(t.llm.requests().len(), asked, "the model was asked");
    let h = t.history(&token, &c).await;
    let messages = h.json["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "visitor");
    assert_eq!(last["text"], "Is anyone there?");
    let rows = audit_of(&t, &c, "handoff").await;
    assert_eq!(rows.len(), 1);
    let details: serde_json::Value = serde_json::from_str(&rows[0].arguments).unwrap();
    assert_eq!(
        details,
        json!({"from": "visitor", "reason": "I want a human"})
    );
    assert_eq!(rows[0].operator, None);
}

#[tokio::test]
async fn a_handoff_asked_for_twice_is_one_handoff() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    for _ in 0..3 {
        let r = t.handoff(&token, &c, json!({})).await;
        assert_eq!(r.status, 200, "{:?}", r.json);
        assert_eq!(r.json["holder"], "queue");
    }
    assert_eq!(audit_of(&t, &c, "handoff").await.len(), 1);
}

#[tokio::test]
async fn a_site_without_the_desk_refuses_a_handoff() {
    let t = TestApp::start().await;
    let (token, c) = conversation(&t).await;
    let r = t.handoff(&token, &c, json!({})).await;
    assert_eq!(
        (r.status, r.code()),
        (403, "handoff_disabled"),
        "{:?}",
        r.json
    );
}

#[tokio::test]
async fn two_operators_taking_over_at_once_leave_one_holder_and_an_agent_cannot_force() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    t.handoff(&token, &c, json!({})).await;
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    let bob = named_console(&t, OperatorRole::Agent, "bob@example.test", "Bob").await;
    let (a, b) = tokio::join!(ada.takeover(&c, json!({})), bob.takeover(&c, json!({})));
    let mut statuses = [a.status, b.status];
    statuses.sort();
    assert_eq!(statuses, [200, 409], "{:?} {:?}", a.json, b.json);
    let (winner, loser) = if a.status == 200 {
        (&ada, &bob)
    } else {
        (&bob, &ada)
    };
    let refused = if a.status == 409 { &a } else { &b };
    assert_eq!(refused.code(), "conversation_held");
    let r = loser.takeover(&c, json!({"force": true})).await;
    assert_eq!(
        (r.status, r.code()),
        (409, "conversation_held"),
        "an agent forced it"
    );
    // The winner pressing again keeps it.
    assert_eq!(winner.takeover(&c, json!({})).await.status, 200);
    let admin = named_console(&t, OperatorRole::Admin, "root@example.test", "Root").await;
    let r = admin.takeover(&c, json!({"force": true})).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["name"], "Root");
    let rows = audit_of(&t, &c, "handoff").await;
    // The visitor's, the winner's and the admin's: the refused ones left none.
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[2].operator.as_deref(), Some("root@example.test"));
}

#[tokio::test]
async fn a_reply_or_release_from_one_who_does_not_hold_it_is_refused() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    let bob = named_console(&t, OperatorRole::Agent, "bob@example.test", "Bob").await;
    // Held by the assistant: nobody may reply or release.
    let r = ada.reply(&c, "Hello").await;
    assert_eq!((r.status, r.code()), (409, "not_held"));
    assert_eq!(ada.release(&c).await.code(), "not_held");
    t.handoff(&token, &c, json!({})).await;
    assert_eq!(ada.takeover(&c, json!({})).await.status, 200);
    let r = bob.reply(&c, "I am not the holder").await;
    assert_eq!((r.status, r.code()), (409, "not_held"));
    let r = bob.release(&c).await;
    assert_eq!((r.status, r.code()), (409, "not_held"));
    let h = t.history(&token, &c).await;
    let texts: Vec<&str> = h.json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert!(!texts.contains(&"I am not the holder"), "{texts:?}");
    // An admin may release what another holds.
    let admin = named_console(&t, OperatorRole::Admin, "root@example.test", "Root").await;
    assert_eq!(admin.release(&c).await.status, 200);
}

#[tokio::test]
async fn operator_text_is_bounded_and_refuses_nul_and_an_unknown_conversation_is_a_404() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    t.handoff(&token, &c, json!({})).await;
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    assert_eq!(ada.takeover(&c, json!({})).await.status, 200);
    let long = "a".repeat(4001);
    let r = ada.reply(&c, &long).await;
    assert_eq!((r.status, r.code()), (413, "message_too_long"));
    let r = ada.reply(&c, "bad\u{0}text").await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let r = ada.reply(&c, "   ").await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    for hidden in [
        "pay \u{202E}evil",
        "zero\u{200B}width",
        "soft\u{00AD}hyphen",
    ] {
        let r = ada.reply(&c, hidden).await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"), "{hidden:?}");
    }
    let r = ada
        .reply(&c, "Line one\nline two 👨\u{200D}👩\u{200D}👧")
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    let r = ada.takeover("c_nope", json!({})).await;
    assert_eq!((r.status, r.code()), (404, "conversation_not_found"));
    let r = ada.takeover(&c, json!({"force": "yes"})).await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
}

#[tokio::test]
async fn after_release_the_assistant_answers_with_the_human_segment_marked() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    t.handoff(&token, &c, json!({})).await;
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    assert_eq!(ada.takeover(&c, json!({})).await.status, 200);
    let r = ada.reply(&c, "Your refund for order 7 is done.").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["name"], "Ada");
    assert_eq!(ada.release(&c).await.status, 200);
    let h = t.history(&token, &c).await;
    let messages = h.json["messages"].as_array().unwrap();
    let operator = messages.iter().find(|m| m["role"] == "operator").unwrap();
    assert_eq!(operator["name"], "Ada");
    assert!(
        !h.json.to_string().contains("ada@example.test"),
        "the email shows"
    );
    assert_eq!(messages.last().unwrap()["role"], "event");
    assert_eq!(messages.last().unwrap()["text"], "Back with the assistant");
    let released = audit_of(&t, &c, "released").await;
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].operator.as_deref(), Some("ada@example.test"));
    // The next question goes to the model, which is given the human segment
    // marked as such and told it is settled.
    t.llm
        .push(deskbell::testkit::Reply::text("Glad it is sorted."));
    let r = t.question(&token, Some(&c), "Thanks! Anything else?").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    let request = t.llm.requests().last().unwrap().to_string();
    assert!(
        request.contains(
            "Ada — a person from the support team — wrote:] Your refund for order 7 is done."
        ),
        "{request}"
    );
    assert!(
        request.contains("What they settled with the visitor is settled"),
        "{request}"
    );
}

#[tokio::test]
async fn a_visitor_cannot_reach_another_visitors_desk_and_tokens_do_not_cross() {
    let t = TestApp::with(with_handoff).await;
    let (_, c) = conversation(&t).await;
    let stranger = t.visitor().await;
    let r = t.handoff(&stranger, &c, json!({})).await;
    assert_eq!((r.status, r.code()), (404, "conversation_not_found"));
    assert_eq!(t.channel(&stranger, &c, None).await.status, 404);
    // A visitor token on an operator route, and an operator token on the
    // visitor's channel.
    let r = t
        .with_token(
            reqwest::Method::POST,
            &format!("/v1/operator/conversations/{c}/takeover"),
            &stranger,
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, 401, "{:?}", r.json);
    let (_, operator_token) = deskbell::operator::accounts::new_token(
        &t.app.store,
        "bot",
        OperatorRole::Agent,
        t.clock_ms(),
    )
    .await
    .unwrap();
    assert_eq!(t.channel(&operator_token, &c, None).await.status, 401);
}

#[test]
fn operator_add_takes_a_display_name_and_refuses_an_invisible_one() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("ops.db").display());
    let add = |email: &str, name: &str| {
        crate::support::deskbell_command()
            .args(["operator", "add", email, "--name", name])
            .env("DESKBELL_DATABASE_URL", &url)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = add("ada@example.test", "  Ada  ");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for bad in ["", "Ada\u{200b}", "Ada\nLovelace", &"a".repeat(61)] {
        let out = add("eve@example.test", bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--name"));
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = deskbell::store::Store::connect(&url, Default::default())
            .await
            .unwrap();
        let name = store.operators().name("ada@example.test").await.unwrap();
        assert_eq!(name.as_deref(), Some("Ada"));
        // A refused name created no account.
        assert!(
            store
                .operators()
                .get("eve@example.test")
                .await
                .unwrap()
                .is_none()
        );
    });
}
