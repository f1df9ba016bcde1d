//! The console's view of the desk: the queue, presence, and an operator's
//! Cancel of a pending card (never a Confirm).

use reqwest::Method;
use serde_json::json;

use super::{conversation, named_console, with_handoff};
use crate::support::{ORIGIN, TestApp};
use deskbell::states::OperatorRole;

#[tokio::test]
async fn the_queue_lists_the_longest_waiting_first_with_waiting_time_and_unread_counts() {
    let t = TestApp::with(with_handoff).await;
    let (first_token, first) = conversation(&t).await;
    t.handoff(&first_token, &first, json!({})).await;
    t.clock.advance_ms(30_000);
    let (second_token, second) = conversation(&t).await;
    t.handoff(&second_token, &second, json!({})).await;
    t.clock.advance_ms(1_000);
    for text in ["Hello?", "Anyone?"] {
        assert_eq!(
            t.question(&second_token, Some(&second), text).await.status,
            202
        );
    }
    t.clock.advance_ms(9_000);
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    let q = ada.get("/v1/operator/queue").await;
    assert_eq!(q.status, 200, "{:?}", q.json);
    let items = q.json["items"].as_array().unwrap();
    let order: Vec<&str> = items
        .iter()
        .map(|i| i["conversation"].as_str().unwrap())
        .collect();
    assert_eq!(order, [first.as_str(), second.as_str()]);
    assert_eq!(q.json["waiting"], 2);
    assert_eq!(items[0]["waiting_s"], 40);
    assert_eq!(items[1]["waiting_s"], 10);
    assert_eq!(items[1]["unread"], 2);
    assert_eq!(items[0]["unread"], 0);
    // Taken: it shows as Ada's, and a reply reads the visitor's messages.
    assert_eq!(ada.takeover(&second, json!({})).await.status, 200);
    assert_eq!(ada.reply(&second, "Here now.").await.status, 200);
    let q = ada.get("/v1/operator/queue").await;
    let taken = q.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["conversation"] == second.as_str())
        .unwrap()
        .clone();
    assert_eq!(
        (
            taken["holder"].as_str(),
            taken["name"].as_str(),
            taken["mine"].as_bool()
        ),
        (Some("operator"), Some("Ada"), Some(true))
    );
    assert_eq!(taken["unread"], 0);
    assert_eq!(q.json["waiting"], 1);
    // Released: it leaves the queue.
    assert_eq!(ada.release(&second).await.status, 200);
    let q = ada.get("/v1/operator/queue").await;
    assert_eq!(q.json["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn presence_names_the_operators_at_the_desk_and_forgets_them_after_two_minutes() {
    let t = TestApp::with(with_handoff).await;
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    let p = ada.get("/v1/operator/presence").await;
    assert_eq!(p.status, 200, "{:?}", p.json);
    assert_eq!(p.json["names"], json!(["Ada"]));
    assert!(!p.json.to_string().contains("ada@example.test"));
    t.clock.advance_ms(2 * 60 * 1000 + 1);
    // Bob asks now; Ada's console has not been used for over two minutes.
    let bob = named_console(&t, OperatorRole::Agent, "bob@example.test", "Bob").await;
    let p = bob.get("/v1/operator/presence").await;
    assert_eq!(p.json["names"], json!(["Bob"]));
    let visitor = t.visitor().await;
    let r = t
        .with_token(Method::GET, "/v1/operator/presence", &visitor, None)
        .await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn an_operator_may_cancel_a_pending_card_audited_as_theirs_but_never_confirm_it() {
    let t = TestApp::with(with_handoff).await;
    let token = t.visitor().await;
    let (c, card) = t.raise_card(&token).await;
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    assert_eq!(ada.takeover(&c, json!({})).await.status, 200);
    let call = card["call"].as_str().unwrap();
    // An operator credential cannot answer the card as the visitor.
    let (_, operator_token) = deskbell::operator::accounts::new_token(
        &t.app.store,
        "bot",
        OperatorRole::Admin,
        t.clock_ms(),
    )
    .await
    .unwrap();
    let body = json!({"conversation": c, "call": call, "decision": "confirm", "signature": card["signature"]});
    let r = t
        .post("/v1/ask", Some(&operator_token), ORIGIN, body.clone())
        .await;
    assert_eq!((r.status, r.code()), (401, "invalid_visitor_token"));
    let r = crate::support::read(
        t.http
            .post(format!("{}/v1/ask", t.base))
            .header("origin", ORIGIN)
            .header("cookie", &ada.cookie)
            .header("x-deskbell-csrf", &ada.csrf)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (401, "invalid_visitor_token"),
        "a console session answered a card"
    );
    let path = format!("/v1/operator/conversations/{c}/calls/{call}/cancel");
    let r = ada.send(Method::POST, &path, json!({})).await;
    assert_eq!(r.status, 204, "{:?}", r.json);
    // The visitor's widget hears of it at once.
    let mut live = t.channel(&token, &c, Some("1")).await;
    let closed = live.take(1, std::time::Duration::from_secs(5)).await;
    assert_eq!(closed[0].name, "card");
    assert_eq!(closed[0].data, json!({"call": call, "status": "cancelled"}));
    let r = ada.send(Method::POST, &path, json!({})).await;
    assert_eq!((r.status, r.code()), (409, "call_not_pending"));
    assert!(t.hook.calls().is_empty(), "the cancelled call ran");
    let rows = t.audit().await;
    let cancelled = rows
        .iter()
        .find(|r| r.call == call && r.event.as_str() == "cancelled")
        .unwrap();
    assert_eq!(cancelled.operator.as_deref(), Some("ada@example.test"));
    assert_eq!(cancelled.reason.map(|r| r.as_str()), Some("operator"));
    // The visitor's answer now finds the card closed.
    let r = t.answer(&token, &c, &card, "confirm").await;
    assert_eq!(
        (r.status, r.code()),
        (409, "call_not_pending"),
        "{:?}",
        r.json
    );
    let h = t.history(&token, &c).await;
    assert!(h.json.to_string().contains("\"cancelled\""));
    // A call of another conversation, or a malformed id, is not cancelled here.
    let (_, other) = conversation(&t).await;
    let r = ada
        .send(
            Method::POST,
            &format!("/v1/operator/conversations/{other}/calls/{call}/cancel"),
            json!({}),
        )
        .await;
    assert_eq!((r.status, r.code()), (409, "call_not_pending"));
    let r = ada
        .send(
            Method::POST,
            &format!("/v1/operator/conversations/{c}/calls/nope/cancel"),
            json!({}),
        )
        .await;
    assert_eq!((r.status, r.code()), (404, "call_not_found"));
}
