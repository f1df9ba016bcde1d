//! The confirmation flow: `../shared/seeds/confirmation.txt` and SPEC §6–10.

use std::time::Duration;

use deskbell::testkit::{HookReply, Reply as Script};
use serde_json::{Value, json};

use crate::support::{ORIGIN, TOOL_SECRET, TestApp, for_racing};

const TEN_MINUTES_MS: i64 = 10 * 60 * 1000;

#[tokio::test]
async fn a_confirm_call_stops_the_turn_with_a_card_and_runs_nothing() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "cancel_order",
        json!({"order_id": 42}),
    )]));
    let r = t.question(&token, None, "Please cancel order 42").await;
    assert_eq!(r.names(), ["turn", "confirm", "done"]);
    let card = r.event("confirm");
    assert!(card["call"].as_str().unwrap().starts_with("call_"));
    assert_eq!(card["tool"], "cancel_order");
    assert_eq!(card["label"], "Cancel an order");
    assert_eq!(
        card["arguments"],
        json!([{"name": "Order ID", "value": "42"}])
    );
    let expires =
        chrono::DateTime::parse_from_rfc3339(card["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!(
        expires.timestamp_millis(),
        deskbell::clock::Clock::now_ms(&*t.clock) + TEN_MINUTES_MS
    );
    assert!(card["signature"].as_str().unwrap().len() >= 40);
    assert_eq!(r.event("done")["status"], "awaiting_confirmation");
    assert!(
        t.hook.calls().is_empty(),
        "nothing runs before the visitor confirms"
    );
    let call = card["call"].as_str().unwrap();
    assert_eq!(t.audit_events(call).await, ["requested"]);
    let audit = t.app.store.audit_for_call(call).await.unwrap();
    assert_eq!(audit[0].policy.as_str(), "confirm");
    assert_eq!(audit[0].arguments, r#"{"order_id":42}"#);

    let h = t.history(&token, &r.conversation()).await;
    let message = &h.json["messages"][1];
    assert_eq!(message["status"], "awaiting_confirmation");
    let step = &message["steps"][0];
    assert_eq!(step["kind"], "confirmation");
    assert_eq!(step["status"], "pending");
    assert_eq!(step["label"], "Cancel an order");
    assert_eq!(step["arguments"], card["arguments"]);
    assert_eq!(step["expires_at"], card["expires_at"]);
    assert_eq!(step["signature"], card["signature"]);
    assert_eq!(step["decided_at"], Value::Null);
}

#[tokio::test]
async fn confirming_runs_exactly_the_shown_arguments_once_and_answers_in_a_new_bubble() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    let first = t.history(&token, &conversation).await.json["messages"][1].clone();
    t.hook
        .push(HookReply::ok(r#"{"cancelled": true, "order_id": 42}"#));
    t.llm.push(Script::text("Order 42 is cancelled [1]."));
    let r = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    let names = r.names();
    assert_eq!(&names[..4], ["decision", "turn", "step", "step"]);
    assert_eq!(&names[names.len() - 2..], ["citations", "done"]);
    assert_eq!(
        r.event("decision"),
        &json!({"call": card["call"], "status": "confirmed"})
    );
    let turn = r.event("turn");
    assert_ne!(
        turn["message"], first["id"],
        "the answer streams into a new bubble"
    );
    let steps = r.all("step");
    assert_eq!(steps[0]["status"], "running");
    assert_eq!(steps[1]["status"], "succeeded");
    assert_eq!(steps[1]["label"], "Cancel an order");
    assert_eq!(r.text(), "Order 42 is cancelled [1].");
    assert_eq!(r.event("done")["status"], "answered");
    let citations = &r.event("citations")["items"];
    assert_eq!(citations[0]["n"], 1);
    assert_eq!(citations[0]["title"], "Cancel an order");

    let calls = t.hook.calls();
    assert_eq!(calls.len(), 1, "the call runs exactly once");
    let hit = &calls[0];
    assert_eq!(hit.path, "/cancel");
    assert_eq!(hit.body["arguments"], json!({"order_id": 42}));
    assert_eq!(hit.body["call"], card["call"]);
    assert_eq!(hit.body["tool"], "cancel_order");
    assert_eq!(hit.body["site"], "acme");
    assert_eq!(hit.body["conversation"], conversation.as_str());
    assert!(
        hit.body["visitor"]["id"]
            .as_str()
            .unwrap()
            .starts_with("v_")
    );
    assert_eq!(
        hit.headers["idempotency-key"],
        card["call"].as_str().unwrap()
    );
    let signature = &hit.headers["deskbell-signature"];
    let (t_part, v1) = signature.split_once(',').unwrap();
    let ts: i64 = t_part.strip_prefix("t=").unwrap().parse().unwrap();
    let expected = deskbell::tools::http::signature_header(TOOL_SECRET.as_bytes(), ts, &hit.raw);
    assert_eq!(signature, &expected);
    assert!(v1.starts_with("v1=") && v1.len() == 67);

    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        ["requested", "confirmed", "executed"]
    );
    let executed = &t.app.store.audit_for_call(call).await.unwrap()[2];
    assert_eq!(executed.http_status, Some(200));
    assert!(executed.duration_ms.is_some());

    // The model got the stored transcript and the tool's result.
    let request = t.llm.requests().pop().unwrap();
    let messages = request["messages"].as_array().unwrap();
    let tool_message = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert!(
        tool_message["content"]
            .as_str()
            .unwrap()
            .contains("\"cancelled\": true")
    );
    let assistant = messages
        .iter()
        .find(|m| m["role"] == "assistant" && m.get("tool_calls").is_some())
        .unwrap();
    assert_eq!(
        assistant["tool_calls"][0]["id"],
        tool_message["tool_call_id"]
    );

    let h = t.history(&token, &conversation).await.json;
    let messages = h["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        3,
        "the card's message and the continuation's"
    );
    let card_step = &messages[1]["steps"][0];
    assert_eq!(card_step["status"], "confirmed");
    assert!(
        card_step.get("signature").is_none(),
        "only a pending card carries its signature"
    );
    assert!(card_step["decided_at"].is_string());
    assert_eq!(messages[1]["status"], "answered");
    assert_eq!(messages[2]["text"], "Order 42 is cancelled [1].");
    assert_eq!(messages[2]["steps"][0]["status"], "succeeded");
    assert_eq!(messages[2]["citations"][0]["title"], "Cancel an order");
}

#[tokio::test]
async fn cancelling_runs_nothing_tells_the_model_and_withholds_the_tool() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    t.llm
        .push(Script::text("All right, I left the order as it is."));
    let r = t.answer(&token, &conversation, &card, "cancel").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.event("decision")["status"], "cancelled");
    assert!(!r.names().contains(&"step"));
    assert_eq!(r.event("done")["status"], "answered");
    assert!(t.hook.calls().is_empty());
    let request = t.llm.requests().pop().unwrap();
    let tool_message = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    let told = tool_message["content"].as_str().unwrap();
    assert!(
        told.contains("did not approve") && told.contains("Do not try"),
        "{told}"
    );
    let offered: Vec<&str> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(!offered.contains(&"cancel_order"), "{offered:?}");
    assert!(offered.contains(&"lookup_order"));
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        ["requested", "cancelled:visitor"]
    );
    let h = t.history(&token, &conversation).await.json;
    assert_eq!(h["messages"][1]["steps"][0]["status"], "cancelled");
}

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
    let expired = &t.app.store.audit_for_call(call).await.unwrap()[1];
    let expires_at =
        chrono::DateTime::parse_from_rfc3339(card["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!(
        expired.at,
        expires_at.timestamp_millis(),
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
            .expire_due(deskbell::clock::Clock::now_ms(&*t.clock), None)
            .await
            .unwrap()
            .is_empty()
    );
    t.clock.advance_ms(1);
    let swept = t
        .app
        .store
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
    let expires =
        chrono::DateTime::parse_from_rfc3339(card["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!(
        expires.timestamp_millis() - deskbell::clock::Clock::now_ms(&*t.clock),
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

#[tokio::test]
async fn only_one_card_per_turn_and_the_model_is_told_why() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.llm.push(Script::tool_calls(&[
        ("cancel_order", json!({"order_id": 42})),
        ("refund", json!({"amount": 10})),
    ]));
    let r = t.question(&token, None, "Cancel 42 and refund me").await;
    assert_eq!(r.all("confirm").len(), 1);
    assert_eq!(r.event("confirm")["tool"], "cancel_order");
    let rows = t.audit().await;
    let refund: Vec<String> = rows
        .iter()
        .filter(|r| r.tool == "refund")
        .map(|r| format!("{}:{}", r.event, r.reason.map_or("", |r| r.as_str())))
        .collect();
    assert_eq!(refund, ["requested:", "refused:one_per_turn"]);
    // On confirm, the model learns the second call did not run, and a confirm call
    // in the continuation does not raise another card.
    t.llm
        .push(Script::tool_calls(&[("refund", json!({"amount": 10}))]));
    t.llm
        .push(Script::text("Cancelled; ask me again for the refund."));
    let done = t
        .answer(&token, &r.conversation(), r.event("confirm"), "confirm")
        .await;
    assert!(done.all("confirm").is_empty());
    assert_eq!(done.event("done")["status"], "answered");
    let requests = t.llm.requests();
    let told = requests[1]["messages"].to_string();
    assert!(
        told.contains("only one confirmation is possible per turn"),
        "{told}"
    );
    assert_eq!(t.hook.calls().len(), 1);
}

#[tokio::test]
async fn auto_calls_of_the_same_response_run_before_the_card() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.llm.push(Script::tool_calls(&[
        ("cancel_order", json!({"order_id": 42})),
        ("lookup_order", json!({"order_id": 42})),
    ]));
    let r = t.question(&token, None, "Look up and cancel 42").await;
    assert_eq!(r.names(), ["turn", "step", "step", "confirm", "done"]);
    assert_eq!(r.all("step")[1]["status"], "succeeded");
    let calls = t.hook.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].path, "/lookup");
}

#[tokio::test]
async fn an_auto_call_runs_and_its_result_goes_back_to_the_model() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.hook.push(HookReply::ok(r#"{"status": "shipped"}"#));
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 7}),
    )]));
    t.llm.push(Script::text("Order 7 has shipped."));
    let r = t.question(&token, None, "Where is order 7?").await;
    assert_eq!(r.names()[..3], ["turn", "step", "step"]);
    assert_eq!(
        r.all("step")[0],
        &json!({"call": r.all("step")[0]["call"], "tool": "lookup_order", "label": "Look up an order", "status": "running"})
    );
    assert_eq!(r.text(), "Order 7 has shipped.");
    let second = &t.llm.requests()[1];
    let tool = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(tool["content"], r#"{"status": "shipped"}"#);
    let call = r.all("step")[0]["call"].as_str().unwrap().to_string();
    assert_eq!(t.audit_events(&call).await, ["requested", "executed"]);
    let h = t.history(&token, &r.conversation()).await.json;
    assert_eq!(h["messages"][1]["steps"][0]["kind"], "auto");
    assert_eq!(h["messages"][1]["steps"][0]["status"], "succeeded");
}

#[tokio::test]
async fn unknown_off_and_invalid_calls_are_refused_and_the_model_is_told_why() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.llm.push(Script::tool_calls(&[
        ("no_such_tool", json!({})),
        ("delete_account", json!({})),
        ("lookup_order", json!({"order_id": "forty-two"})),
        ("cancel_order", json!({})),
    ]));
    t.llm.push(Script::text("I cannot do that."));
    let r = t.question(&token, None, "Do bad things").await;
    assert!(
        r.all("confirm").is_empty() && r.all("step").is_empty(),
        "{:?}",
        r.names()
    );
    assert!(t.hook.calls().is_empty());
    let offered: Vec<String> = t.llm.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        offered,
        ["lookup_order", "cancel_order", "refund"],
        "off tools are never offered"
    );
    let tool_messages: Vec<String> = t.llm.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tool_messages.len(), 4);
    assert!(tool_messages[0].contains("no tool named"));
    assert!(tool_messages[2].contains("input schema"));
    let reasons: Vec<String> = t
        .audit()
        .await
        .iter()
        .filter(|r| r.event.as_str() == "refused")
        .map(|r| r.reason.unwrap().to_string())
        .collect();
    assert_eq!(
        reasons,
        [
            "tool_off",
            "tool_off",
            "invalid_arguments",
            "invalid_arguments"
        ]
    );
}

#[tokio::test]
async fn a_failing_or_slow_tool_is_a_failed_step_the_model_hears_about() {
    let t = TestApp::with(|c| c.sites[0].tools[0].timeout_s = 0.3).await;
    let token = t.visitor().await;
    t.hook.push(HookReply {
        status: 500,
        body: "boom".into(),
        delay: Duration::ZERO,
    });
    t.hook.push(HookReply {
        status: 200,
        body: "late".into(),
        delay: Duration::from_secs(2),
    });
    t.hook.push(HookReply {
        status: 302,
        body: String::new(),
        delay: Duration::ZERO,
    });
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 1}),
    )]));
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 2}),
    )]));
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 3}),
    )]));
    t.llm
        .push(Script::text("Sorry, the shop is having trouble."));
    let r = t.question(&token, None, "Where are my orders?").await;
    let statuses: Vec<&str> = r
        .all("step")
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "running", "failed", "running", "failed", "running", "failed"
        ]
    );
    let failures: Vec<String> = t
        .audit()
        .await
        .iter()
        .filter(|r| r.event.as_str() == "failed")
        .map(|r| r.reason.unwrap().to_string())
        .collect();
    assert_eq!(failures, ["http_status", "timeout", "http_status"]);
    let told = t.llm.requests()[1]["messages"].to_string();
    assert!(told.contains("HTTP status 500"), "{told}");
}

#[tokio::test]
async fn a_tool_result_is_cut_at_16_kib() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.hook.push(HookReply::ok(&"x".repeat(40_000)));
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 1}),
    )]));
    t.llm.push(Script::text("Long."));
    t.question(&token, None, "Go").await;
    let second = &t.llm.requests()[1];
    let tool = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(tool["content"].as_str().unwrap().len(), 16 * 1024);
}

#[tokio::test]
async fn a_turn_is_bounded_to_eight_model_rounds() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    for i in 0..10 {
        t.llm.push(Script::tool_calls(&[(
            "lookup_order",
            json!({"order_id": i}),
        )]));
    }
    let r = t.question(&token, None, "Loop forever").await;
    assert_eq!(r.event("done")["status"], "answered");
    let requests = t.llm.requests();
    assert_eq!(requests.len(), 8);
    assert!(
        requests[7].get("tools").is_none(),
        "the last round offers no tools"
    );
    assert_eq!(t.hook.calls().len(), 7);
}

#[tokio::test]
async fn a_card_replayed_from_history_after_a_reload_still_works() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, _card) = t.raise_card(&token).await;
    let h = t.history(&token, &conversation).await.json;
    let step = h["messages"][1]["steps"][0].clone();
    t.llm.push(Script::text("Done."));
    let r = t.answer(&token, &conversation, &step, "confirm").await;
    assert_eq!(r.status, 200);
    assert_eq!(t.hook.calls().len(), 1);
}

#[tokio::test]
async fn an_answer_passes_the_same_guards_as_a_question() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    let body = json!({"conversation": conversation, "call": card["call"], "decision": "confirm", "signature": card["signature"]}).to_string();
    let r = t
        .post_raw(
            "/v1/ask",
            Some(&token),
            Some("https://evil.example"),
            body.clone(),
        )
        .await;
    assert_eq!(r.code(), "origin_not_allowed");
    let r = t
        .post_raw("/v1/ask", Some(&token), None, body.clone())
        .await;
    assert_eq!(r.code(), "origin_not_allowed");
    let r = t
        .post_raw("/v1/ask", Some("dbv1.x.y"), Some(ORIGIN), body.clone())
        .await;
    assert_eq!(r.code(), "invalid_visitor_token");
    let r = t.post_raw("/v1/ask", None, Some(ORIGIN), body).await;
    assert_eq!(r.code(), "invalid_visitor_token");
    assert!(t.hook.calls().is_empty());
    assert_eq!(
        t.audit_events(card["call"].as_str().unwrap()).await,
        ["requested"]
    );
}

#[tokio::test]
async fn the_audit_table_is_append_only() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.raise_card(&token).await;
    t.assert_audit_is_append_only().await;
    assert_eq!(t.audit().await.len(), 1);
}

#[tokio::test]
async fn the_audit_export_writes_every_row_oldest_first() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    t.answer(&token, &conversation, &card, "confirm").await;
    let export = |format: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_deskbell"))
            .args(["audit", "export", "--site", "acme", "--format", format])
            .env("DESKBELL_DATABASE_URL", &t.database_url)
            .output()
            .unwrap()
    };
    let out = export("jsonl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let events: Vec<&str> = rows.iter().map(|r| r["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["requested", "confirmed", "executed"]);
    let row = &rows[1];
    assert!(row["at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(row["call"], card["call"]);
    assert_eq!(row["site"], "acme");
    assert_eq!(row["conversation"], conversation.as_str());
    assert!(row["visitor"].as_str().unwrap().starts_with("v_"));
    assert_eq!(row["tool"], "cancel_order");
    assert_eq!(row["policy"], "confirm");
    assert_eq!(row["reason"], Value::Null);
    assert_eq!(row["arguments"], json!({"order_id": 42}));
    let csv = String::from_utf8(export("csv").stdout).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("at,event,reason,call"));
    assert!(
        lines[2].contains(",confirmed,,") && lines[2].contains("\"{\"\"order_id\"\":42}\""),
        "{}",
        lines[2]
    );
}

#[tokio::test]
async fn a_tool_call_names_the_verified_user_and_is_signed_only_when_the_tool_has_a_secret() {
    let t = TestApp::start().await;
    let v = t.verified_visitor("user-7").await;
    let token = v.json["token"].as_str().unwrap();
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 7}),
    )]));
    t.question(token, None, "Where is order 7?").await;
    let call = &t.hook.calls()[0];
    assert_eq!(
        call.body["visitor"],
        json!({"id": v.json["visitor"], "user_id": "user-7"})
    );
    assert!(call.headers.contains_key("idempotency-key"));
    assert!(
        !call.headers.contains_key("deskbell-signature"),
        "lookup_order has no secret"
    );
    let anonymous = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 8}),
    )]));
    t.question(&anonymous, None, "And order 8?").await;
    assert_eq!(t.hook.calls()[1].body["visitor"]["user_id"], Value::Null);
}
