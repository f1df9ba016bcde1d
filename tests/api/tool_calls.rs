//! Tool calls within a turn (SPEC §6.3, §9): refusals, auto calls, one card per
//! turn, failures the model hears about, and the executor's request.

use std::time::Duration;

use deskbell::testkit::{HookReply, Reply as Script};
use serde_json::{Value, json};

use crate::support::{TestApp, sent};

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
    assert_eq!(sent::tool_results(second)[0], r#"{"status": "shipped"}"#);
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
    let offered = sent::offered(&t.llm.requests()[0]);
    assert_eq!(
        offered,
        ["lookup_order", "cancel_order", "refund"],
        "off tools are never offered"
    );
    let tool_messages = sent::tool_results(&t.llm.requests()[1]);
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
    assert_eq!(sent::tool_results(second)[0].len(), 16 * 1024);
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
