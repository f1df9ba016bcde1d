//! The assistant never talks over a person: not from a turn already streaming,
//! not from the continuation after a card.

use std::time::Duration;

use deskbell::testkit::{Piece, Reply as Script};
use serde_json::json;

use super::{conversation, named_console, with_handoff};
use crate::support::TestApp;
use deskbell::states::OperatorRole;

#[tokio::test]
async fn a_turn_streaming_when_an_operator_takes_over_ends_at_once() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    t.llm.push(Script::Stream(vec![
        Piece::Text("Part one, ".into()),
        Piece::Pause(Duration::from_secs(20)),
        Piece::Text("part two.".into()),
    ]));
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    let started = std::time::Instant::now();
    let asking = t.question(&token, Some(&c), "Tell me everything");
    let taking = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        ada.takeover(&c, json!({})).await
    };
    let (r, taken) = tokio::join!(asking, taking);
    assert_eq!(taken.status, 200, "{:?}", taken.json);
    assert_eq!(
        r.text(),
        "Part one, ",
        "the assistant talked over the person"
    );
    assert_eq!(
        r.event("holder"),
        &json!({"holder": "operator", "name": "Ada"})
    );
    assert_eq!(r.event("done")["status"], "answered");
    // At once: not when the model's next word comes, twenty seconds on.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let h = t.history(&token, &c).await;
    assert!(
        h.json["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "event" && m["text"] == "Ada joined the conversation"),
        "{}",
        h.json
    );
    let messages = h.json["messages"].as_array().unwrap();
    let answer = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(answer["text"], "Part one, ");
}

#[tokio::test]
async fn calls_the_model_wrote_while_a_person_took_over_neither_run_nor_raise_a_card() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    t.llm.push(Script::Stream(vec![
        Piece::Pause(Duration::from_millis(800)),
        Piece::ToolCall {
            id: "call_x".into(),
            name: "cancel_order".into(),
            arguments: r#"{"order_id": 42}"#.into(),
        },
    ]));
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    let asking = t.question(&token, Some(&c), "Cancel order 42");
    let taking = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ada.takeover(&c, json!({})).await
    };
    let (r, taken) = tokio::join!(asking, taking);
    assert_eq!(taken.status, 200);
    assert!(
        r.all("confirm").is_empty(),
        "a card was raised after the takeover"
    );
    assert_eq!(r.event("holder")["holder"], "operator");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let h = t.history(&token, &c).await;
    assert!(!h.json.to_string().contains("\"pending\""), "{}", h.json);
    assert!(t.hook.calls().is_empty());
}

#[tokio::test]
async fn a_card_answered_while_a_person_holds_it_runs_but_the_model_is_not_asked_to_go_on() {
    let t = TestApp::with(with_handoff).await;
    let token = t.visitor().await;
    let (c, card) = t.raise_card(&token).await;
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    assert_eq!(ada.takeover(&c, json!({})).await.status, 200);
    let asked = t.llm.requests().len();
    let r = t.answer(&token, &c, &card, "confirm").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(t.hook.calls().len(), 1, "the confirmed call did not run");
    assert_eq!(
        t.llm.requests().len(),
        asked,
        "the model was asked to go on"
    );
    assert!(r.text().is_empty(), "{:?}", r.names());
    assert_eq!(r.event("holder")["holder"], "operator");
    assert_eq!(r.event("done")["status"], "answered");
    let steps: Vec<_> = r.all("step").iter().map(|s| s["status"].clone()).collect();
    assert_eq!(steps.last().unwrap(), "succeeded", "{steps:?}");
}

#[tokio::test]
async fn the_assistants_handoff_tool_queues_the_conversation_once_and_ends_the_turn() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    let offered = t.llm.requests().last().unwrap()["tools"].to_string();
    assert!(offered.contains("\"handoff\""), "{offered}");
    t.llm.push(Script::tool_calls(&[
        ("handoff", json!({"reason": "a refund exception"})),
        ("handoff", json!({"reason": "again"})),
        ("cancel_order", json!({"order_id": 42})),
    ]));
    let r = t
        .question(&token, Some(&c), "I need an exception to the refund rules")
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.event("holder"), &json!({"holder": "queue", "name": null}));
    assert_eq!(r.event("done")["status"], "answered");
    assert!(r.all("confirm").is_empty(), "a card came after the handoff");
    let asked = t.llm.requests().len();
    let queued = t.question(&token, Some(&c), "Hello?").await;
    assert_eq!(queued.status, 202);
    assert_eq!(t.llm.requests().len(), asked);
    let rows = super::audit_of(&t, &c, "handoff").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let details: serde_json::Value = serde_json::from_str(&rows[0].arguments).unwrap();
    assert_eq!(
        details,
        json!({"from": "assistant", "reason": "a refund exception"})
    );
}

#[tokio::test]
async fn a_site_without_the_desk_is_not_offered_the_handoff_tool_and_its_call_is_refused() {
    let t = TestApp::start().await;
    let (token, c) = conversation(&t).await;
    let offered = t.llm.requests().last().unwrap()["tools"].to_string();
    assert!(!offered.contains("\"handoff\""), "{offered}");
    t.llm
        .push(Script::tool_calls(&[("handoff", json!({"reason": "x"}))]));
    t.llm.push(Script::text("I can help you myself."));
    let r = t.question(&token, Some(&c), "A person please").await;
    assert_eq!(r.status, 200);
    assert!(r.all("holder").is_empty());
    assert!(super::audit_of(&t, &c, "handoff").await.is_empty());
}
