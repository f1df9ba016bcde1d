//! Tools steered from the console (SPEC §15): a change applies to the next model
//! round on every replica, survives restarts, is audited naming the operator, and
//! makes the tool's pending cards stale.

use deskbell::states::OperatorRole;
use deskbell::testkit::{Piece, Reply as Script};
use reqwest::Method;
use serde_json::json;

use crate::support::TestApp;

#[tokio::test]
async fn a_tool_switched_to_needs_confirmation_raises_a_card_on_the_next_turn() {
    let t = TestApp::start().await;
    let admin = t.console(OperatorRole::Admin).await;
    let r = admin
        .patch_tool("acme", "lookup_order", json!({"policy": "confirm"}))
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["policy"], "confirm");
    assert_eq!(r.json["changed"], true);
    assert_eq!(r.json["file"]["policy"], "auto");

    let visitor = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 7}),
    )]));
    let r = t.question(&visitor, None, "Where is order 7?").await;
    assert_eq!(r.event("done")["status"], "awaiting_confirmation");
    assert_eq!(r.event("confirm")["tool"], "lookup_order");
    assert!(
        t.hook.calls().is_empty(),
        "nothing ran before the visitor confirmed"
    );

    let changed: Vec<_> = t
        .audit()
        .await
        .into_iter()
        .filter(|a| a.event.as_str() == "tool_changed")
        .collect();
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].tool, "lookup_order");
    assert_eq!(changed[0].policy.as_str(), "confirm");
    assert!(
        changed[0]
            .operator
            .as_deref()
            .unwrap()
            .starts_with("admin-")
    );
    assert_eq!(changed[0].arguments, r#"{"policy":"confirm"}"#);
}

#[tokio::test]
async fn a_pending_card_of_a_changed_tool_is_refused_as_stale_and_nothing_runs() {
    let t = TestApp::start().await;
    let admin = t.console(OperatorRole::Admin).await;
    let visitor = t.visitor().await;
    let (conversation, card) = t.raise_card(&visitor).await;
    let r = admin
        .patch_tool(
            "acme",
            "cancel_order",
            json!({"label": "Cancel an order now"}),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    let r = t.answer(&visitor, &conversation, &card, "confirm").await;
    assert_eq!((r.status, r.code()), (409, "call_not_pending"));
    assert!(t.hook.calls().is_empty(), "the stale card ran nothing");
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        vec!["requested", "expired:stale", "refused:stale"],
        "closed by the change, and the late answer refused as stale"
    );
    // The visitor's history no longer offers the card.
    let history = t.history(&visitor, &conversation).await;
    let step = &history.json["messages"][1]["steps"][0];
    assert_eq!(step["status"], "expired");
    assert!(step.get("signature").is_none());
}

#[tokio::test]
async fn two_changes_at_once_both_count() {
    let t = TestApp::start().await;
    let admin = t.console(OperatorRole::Admin).await;
    let (a, b) = tokio::join!(
        admin.patch_tool("acme", "refund", json!({"label": "Refund in full"})),
        admin.patch_tool("acme", "refund", json!({"policy": "auto"})),
    );
    assert_eq!((a.status, b.status), (200, 200));
    let tool = admin.tool("acme", "refund").await;
    assert_eq!(tool["label"], "Refund in full");
    assert_eq!(tool["policy"], "auto");
}

#[tokio::test]
async fn an_agent_is_refused_before_its_body_is_read() {
    let t = TestApp::start().await;
    let agent = t.console(OperatorRole::Agent).await;
    let r = agent
        .call(
            Method::PATCH,
            "/v1/operator/tools/acme/refund",
            Some(json!({"nonsense": true})),
            true,
        )
        .await;
    assert_eq!((r.status, r.code()), (403, "forbidden"));
}

#[tokio::test]
async fn the_policy_is_judged_when_the_calls_arrive_not_when_the_round_began() {
    let t = TestApp::start().await;
    let admin = t.console(OperatorRole::Admin).await;
    let visitor = t.visitor().await;
    // The model pauses before its call, while the operator makes the change.
    t.llm.push(Script::Stream(vec![
        Piece::Pause(std::time::Duration::from_millis(1500)),
        Piece::ToolCall {
            id: "call_fake_0".into(),
            name: "lookup_order".into(),
            arguments: json!({"order_id": 7}).to_string(),
        },
    ]));
    let asking = {
        let (base, http, token) = (t.base.clone(), t.http.clone(), visitor.clone());
        tokio::spawn(async move {
            let req = http
                .post(format!("{base}/v1/ask"))
                .header("origin", crate::support::ORIGIN)
                .bearer_auth(token)
                .json(&json!({"message": "Where is order 7?"}));
            crate::support::read(req.send().await.unwrap()).await
        })
    };
    while t.llm.requests().is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let offered = t.llm.requests()[0]["tools"].to_string();
    assert!(
        offered.contains("lookup_order"),
        "offered as auto before the change"
    );
    let r = admin
        .patch_tool("acme", "lookup_order", json!({"policy": "confirm"}))
        .await;
    assert_eq!(r.status, 200);
    let r = asking.await.unwrap();
    assert_eq!(
        r.event("done")["status"],
        "awaiting_confirmation",
        "{:?}",
        r.names()
    );
    assert!(t.hook.calls().is_empty());
}

#[tokio::test]
async fn a_change_on_one_replica_applies_on_another_and_survives_a_restart() {
    let t = TestApp::start().await;
    let other = t.replica(|_| {}).await;
    let admin = t.console(OperatorRole::Admin).await;
    let r = admin
        .patch_tool("acme", "lookup_order", json!({"policy": "off"}))
        .await;
    assert_eq!(r.status, 200);
    // The other replica read its tools before the change.
    let visitor = other.visitor().await;
    other.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 7}),
    )]));
    other.llm.push(Script::text("I cannot look that up."));
    let r = other.question(&visitor, None, "Where is order 7?").await;
    assert_eq!(r.status, 200);
    let offered = &other.llm.requests()[0]["tools"];
    assert!(
        !offered.to_string().contains("lookup_order"),
        "an off tool is not offered: {offered}"
    );
    assert!(
        other.hook.calls().is_empty(),
        "the call was refused, not run"
    );

    let restarted = t.replica(|_| {}).await;
    let admin2 = restarted.console(OperatorRole::Agent).await;
    let tool = admin2.tool("acme", "lookup_order").await;
    assert_eq!(tool["policy"], "off");
    assert_eq!(tool["changed"], true);

    let reset = admin
        .patch_tool("acme", "lookup_order", json!({"reset": true}))
        .await;
    assert_eq!(reset.json["policy"], "auto");
    assert_eq!(reset.json["changed"], false);
    assert_eq!(admin2.tool("acme", "lookup_order").await["policy"], "auto");
}

#[tokio::test]
async fn label_and_description_changes_reach_the_card_and_the_model() {
    let t = TestApp::start().await;
    let admin = t.console(OperatorRole::Admin).await;
    let r = admin
        .patch_tool(
            "acme",
            "cancel_order",
            json!({"label": "Cancel your order", "description": "Cancels an unshipped order."}),
        )
        .await;
    assert_eq!(r.status, 200);
    let visitor = t.visitor().await;
    let (_, card) = t.raise_card(&visitor).await;
    assert_eq!(card["label"], "Cancel your order");
    let request = t.llm.requests().last().unwrap().clone();
    assert!(
        request["tools"]
            .to_string()
            .contains("Cancels an unshipped order.")
    );
    // A later change of one field keeps the other.
    let r = admin
        .patch_tool("acme", "cancel_order", json!({"policy": "auto"}))
        .await;
    assert_eq!(r.json["label"], "Cancel your order");
    assert_eq!(r.json["policy"], "auto");
}

#[tokio::test]
async fn bad_tool_changes_are_refused_by_field_and_change_nothing() {
    let t = TestApp::start().await;
    let admin = t.console(OperatorRole::Admin).await;
    for (body, field) in [
        (json!({"reset": true, "label": "x"}), "reset"),
        (json!({}), "body"),
        (json!({"label": "  "}), "label"),
        (json!({"label": "Pay\u{202e}evil"}), "label"),
        (json!({"policy": "sometimes"}), "policy"),
        (json!({"colour": "red"}), "colour"),
        (json!({"description": "x".repeat(5000)}), "description"),
    ] {
        let r = admin.patch_tool("acme", "cancel_order", body.clone()).await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"), "{body}");
        assert!(
            r.json["error"]["message"].as_str().unwrap().contains(field),
            "{field}: {:?}",
            r.json
        );
    }
    assert_eq!(
        admin
            .patch_tool("acme", "nope", json!({"policy": "off"}))
            .await
            .status,
        404
    );
    assert_eq!(
        admin
            .patch_tool("mars", "cancel_order", json!({"policy": "off"}))
            .await
            .status,
        404
    );
    let no_csrf = admin
        .call(
            Method::PATCH,
            "/v1/operator/tools/acme/cancel_order",
            Some(json!({"policy": "off"})),
            false,
        )
        .await;
    assert_eq!((no_csrf.status, no_csrf.code()), (403, "csrf_invalid"));
    assert_eq!(admin.tool("acme", "cancel_order").await["changed"], false);
    assert!(t.audit().await.is_empty());
}

#[tokio::test]
async fn tools_are_listed_with_their_schema_and_no_secret() {
    // Credentials and a query in an executor URL are where keys hide.
    let t = TestApp::with(|c| {
        c.sites[0].tools[2].url =
            "https://deskbell:hunter2@backend.example/refund?key=topsecret".into();
    })
    .await;
    let agent = t.console(OperatorRole::Agent).await;
    let r = agent.get("/v1/operator/tools").await;
    assert_eq!(r.status, 200);
    let items = r.json["items"].as_array().unwrap();
    assert_eq!(
        items.len(),
        4,
        "every tool of every site, off ones included"
    );
    let cancel = items.iter().find(|t| t["name"] == "cancel_order").unwrap();
    assert_eq!(cancel["source"], "file");
    assert_eq!(
        cancel["input_schema"]["properties"]["order_id"]["title"],
        "Order ID"
    );
    let text = r.json.to_string();
    assert!(!text.contains(crate::support::TOOL_SECRET));
    for secret in ["hunter2", "topsecret", "deskbell:"] {
        assert!(!text.contains(secret), "{secret} leaked");
    }
    let refund = items.iter().find(|t| t["name"] == "refund").unwrap();
    assert_eq!(refund["url"], "https://backend.example/refund?…");
    assert_eq!(
        agent.get("/v1/operator/tools?site=mars").await.code(),
        "invalid_request"
    );
}

#[tokio::test]
async fn the_card_preview_shows_what_a_card_would_show() {
    let t = TestApp::start().await;
    let agent = t.console(OperatorRole::Agent).await;
    let r = agent
        .send(
            Method::POST,
            "/v1/operator/tools/acme/cancel_order/preview",
            json!({"arguments": {"order_id": 42, "reason": "too late"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["title"], "Cancel an order");
    assert_eq!(
        r.json["lines"],
        json!([{"name": "Order ID", "value": "42"}, {"name": "Reason", "value": "too late"}])
    );
    let bad = agent
        .send(
            Method::POST,
            "/v1/operator/tools/acme/cancel_order/preview",
            json!({"arguments": {"order_id": "forty-two"}}),
        )
        .await;
    assert_eq!((bad.status, bad.code()), (400, "invalid_request"));
}

/// A tool change and an answer to one of its cards, at the same moment: either
/// the answer wins (the call runs once, the card is not closed as stale) or the
/// change does (nothing runs, the card is stale) — never both, never neither.
#[tokio::test]
async fn a_tool_change_racing_an_answer_to_its_card_gives_one_outcome() {
    let t = TestApp::with(crate::support::for_racing).await;
    let admin = t.console(OperatorRole::Admin).await;
    let visitor = t.visitor().await;
    let mut outcomes = (0, 0);
    for round in 0..8 {
        let (conversation, card) = t.raise_card(&visitor).await;
        let call = card["call"].as_str().unwrap().to_string();
        t.llm.push(Script::text("Done."));
        let label = format!("Cancel an order ({round})");
        let (changed, answered) = tokio::join!(
            admin.patch_tool("acme", "cancel_order", json!({"label": label})),
            t.answer(&visitor, &conversation, &card, "confirm"),
        );
        assert_eq!(changed.status, 200);
        let ran = t
            .hook
            .calls()
            .iter()
            .filter(|c| c.headers["idempotency-key"] == call)
            .count();
        let events = t.audit_events(&call).await;
        match answered.status {
            200 => {
                outcomes.0 += 1;
                assert_eq!(ran, 1, "{events:?}");
                assert!(events.contains(&"confirmed".to_string()), "{events:?}");
                assert!(!events.iter().any(|e| e.ends_with(":stale")), "{events:?}");
            }
            409 => {
                outcomes.1 += 1;
                assert_eq!(ran, 0, "{events:?}");
                assert!(events.contains(&"expired:stale".to_string()), "{events:?}");
                assert!(!events.contains(&"confirmed".to_string()), "{events:?}");
                // The continuation's scripted reply was not used: use it up.
                t.question(&visitor, None, "Thanks").await;
            }
            other => panic!("unexpected {other}: {:?}", answered.json),
        }
    }
    assert_eq!(outcomes.0 + outcomes.1, 8);
}

#[tokio::test]
async fn an_admin_sets_a_rule_in_the_console_and_it_decides_the_next_call() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    // A refund card raised before the change goes stale with it.
    t.llm
        .push(Script::tool_calls(&[("refund", json!({"amount": 500}))]));
    let r = t.question(&token, None, "Refund 500").await;
    let (conversation, card) = (r.conversation(), r.event("confirm").clone());

    let agent = t.console(OperatorRole::Agent).await;
    let r = agent
        .patch_tool(
            "acme",
            "refund",
            json!({"confirm_when": "args.amount > 100"}),
        )
        .await;
    assert_eq!(r.status, 403);
    let admin = t.console(OperatorRole::Admin).await;
    let bad = admin
        .patch_tool("acme", "refund", json!({"confirm_when": "args.amount >"}))
        .await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.json["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("confirm_when: does not compile at line 1, column "),
        "{:?}",
        bad.json
    );
    let r = admin
        .patch_tool(
            "acme",
            "refund",
            json!({"confirm_when": "args.amount > 100"}),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["confirm_when"], "args.amount > 100");
    assert_eq!(r.json["file"]["confirm_when"], serde_json::Value::Null);
    let stale = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!(stale.json["error"]["code"], "call_not_pending");

    // Below the rule the call now runs on its own.
    t.llm
        .push(Script::tool_calls(&[("refund", json!({"amount": 20}))]));
    t.llm.push(Script::text("Refunded."));
    let r = t.question(&token, None, "Refund 20").await;
    assert!(!r.names().contains(&"confirm"), "{:?}", r.names());
    assert_eq!(t.hook.calls().len(), 1);
    let changed = t
        .audit()
        .await
        .into_iter()
        .find(|r| r.event.as_str() == "tool_changed")
        .unwrap();
    assert_eq!(changed.arguments, r#"{"confirm_when":"args.amount > 100"}"#);

    // An empty rule turns it off: every call gets its card again.
    let r = admin
        .patch_tool("acme", "refund", json!({"confirm_when": ""}))
        .await;
    assert_eq!(r.json["confirm_when"], serde_json::Value::Null);
    t.llm
        .push(Script::tool_calls(&[("refund", json!({"amount": 20}))]));
    let r = t.question(&token, None, "Refund 20 again").await;
    assert!(r.names().contains(&"confirm"), "{:?}", r.names());
}
