//! The confirmation flow: `../shared/seeds/confirmation.txt` and SPEC §6–10.

use deskbell::testkit::{HookReply, Reply as Script};
use serde_json::{Value, json};

use crate::support::{ORIGIN, TOOL_SECRET, TestApp, sent};

pub const TEN_MINUTES_MS: i64 = 10 * 60 * 1000;

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
    assert_eq!(
        crate::support::card_expires_ms(card),
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
    let audit = t.app.store.audit().for_call(call).await.unwrap();
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
    let executed = &t.app.store.audit().for_call(call).await.unwrap()[2];
    assert_eq!(executed.http_status, Some(200));
    assert!(executed.duration_ms.is_some());

    // The model got the stored transcript and the tool's result.
    let request = t.llm.requests().pop().unwrap();
    assert!(sent::tool_results(&request)[0].contains("\"cancelled\": true"));
    // The result answers the call by its id (Anthropic's stand-in refuses a
    // request whose tool_result does not answer a tool_use).
    if sent::is_openai(&request) {
        let messages = request["messages"].as_array().unwrap();
        let assistant = messages
            .iter()
            .find(|m| m["role"] == "assistant" && m.get("tool_calls").is_some())
            .unwrap();
        let tool_message = messages.iter().find(|m| m["role"] == "tool").unwrap();
        assert_eq!(
            assistant["tool_calls"][0]["id"],
            tool_message["tool_call_id"]
        );
    }

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
    let told = &sent::tool_results(&request)[0];
    assert!(
        told.contains("did not approve") && told.contains("Do not try"),
        "{told}"
    );
    let offered = sent::offered(&request);
    assert!(!offered.iter().any(|t| t == "cancel_order"), "{offered:?}");
    assert!(offered.iter().any(|t| t == "lookup_order"));
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        ["requested", "cancelled:visitor"]
    );
    let h = t.history(&token, &conversation).await.json;
    assert_eq!(h["messages"][1]["steps"][0]["status"], "cancelled");
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
