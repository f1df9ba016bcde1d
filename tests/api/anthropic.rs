//! Anthropic's Messages API, spoken natively (SPEC §22), against a stand-in
//! that streams its real event shapes and refuses what the real API refuses.
//! The provider-facing suites (`ask`, `confirm`, `tool_calls`, `provider`, …)
//! also run against this stand-in in CI (`DESKBELL_TEST_PROVIDER=anthropic`);
//! these are the cases that only Anthropic's protocol has.

use deskbell::testkit::{Dialect, Piece, Reply as Script};
use serde_json::json;

use crate::support::{TestApp, sent};

async fn app() -> TestApp {
    TestApp::speaking(Dialect::Anthropic, None, |_| {}).await
}

#[tokio::test]
async fn a_tool_call_streamed_in_many_input_deltas_runs_and_its_result_goes_back_as_a_tool_result()
{
    let t = app().await;
    t.llm.push(Script::Stream(vec![
        Piece::Text("Checking.".into()),
        Piece::ToolCall {
            id: "toolu_01A".into(),
            name: "lookup_order".into(),
            arguments: r#"{"order_id": 4242424242}"#.into(),
        },
    ]));
    t.llm.push(Script::text("It has shipped."));
    t.hook
        .push(deskbell::testkit::HookReply::ok(r#"{"status": "shipped"}"#));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Where is order 4242424242?").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.event("done")["status"], "answered");
    assert_eq!(
        t.hook.calls()[0].body["arguments"],
        json!({"order_id": 4242424242u64})
    );
    let requests = t.llm.requests();
    let first = &requests[0];
    assert!(
        first["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Be helpful.")
    );
    assert_eq!(first["tools"][0]["name"], "lookup_order");
    assert!(first["tools"][0]["input_schema"]["properties"]["order_id"].is_object());
    let second = &requests[1];
    let messages = second["messages"].as_array().unwrap();
    let call = &messages[1]["content"];
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(call[0], json!({"type": "text", "text": "Checking."}));
    assert_eq!(call[1]["type"], "tool_use");
    assert_eq!(call[1]["id"], "toolu_01A");
    assert_eq!(call[1]["input"], json!({"order_id": 4242424242u64}));
    let result = &messages[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_01A");
    assert_eq!(result.get("is_error"), None);
}

#[tokio::test]
async fn a_tool_call_cut_by_max_tokens_is_refused_as_invalid_arguments_and_never_run() {
    let t = app().await;
    // Cut inside its input, and cut before any input came.
    t.llm.push(Script::Stream(vec![
        Piece::ToolCall {
            id: "toolu_cut".into(),
            name: "cancel_order".into(),
            arguments: r#"{"order_id": 4"#.into(),
        },
        Piece::Stop("max_tokens".into()),
    ]));
    t.llm.push(Script::text("I ran out of room."));
    t.llm.push(Script::Stream(vec![
        Piece::ToolCall {
            id: "toolu_empty".into(),
            name: "refund".into(),
            arguments: String::new(),
        },
        Piece::Stop("max_tokens".into()),
    ]));
    t.llm.push(Script::text("Again."));
    let token = t.visitor().await;
    for question in ["Cancel order 42", "Refund me"] {
        let r = t.question(&token, None, question).await;
        assert_eq!(r.status, 200);
        assert!(r.all("confirm").is_empty(), "no card: {:?}", r.names());
    }
    assert!(t.hook.calls().is_empty(), "nothing ran");
    let refused: Vec<(String, String)> = t
        .audit()
        .await
        .iter()
        .filter(|r| r.event.as_str() == "refused")
        .map(|r| (r.tool.clone(), r.reason.unwrap().to_string()))
        .collect();
    assert_eq!(
        refused,
        [
            ("cancel_order".to_string(), "invalid_arguments".to_string()),
            ("refund".to_string(), "invalid_arguments".to_string())
        ]
    );
    let told = sent::conversation(&t.llm.requests()[1]);
    assert!(
        told.iter()
            .any(|(role, text)| role == "tool" && text.contains("not run")),
        "{told:?}"
    );
    let result = &t.llm.requests()[1]["messages"][2]["content"][0];
    assert_eq!(result["is_error"], true, "a refusal is an error result");
}

#[tokio::test]
async fn an_overloaded_error_before_the_first_token_is_retried() {
    let t = app().await;
    t.llm.push(Script::Stream(vec![Piece::Error(
        "overloaded_error".into(),
    )]));
    t.llm.push(Script::text("Here now."));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Hello?").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "Here now.");
    assert_eq!(t.llm.requests().len(), 2);
}

#[tokio::test]
async fn an_overloaded_error_after_text_ends_the_answer_failed_with_its_text() {
    let t = app().await;
    t.llm.push(Script::Stream(vec![
        Piece::Text("Half an ans".into()),
        Piece::Error("overloaded_error".into()),
    ]));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Hello?").await;
    assert_eq!(r.event("error")["code"], "provider_error");
    assert_eq!(r.event("done")["status"], "failed");
    assert_eq!(t.llm.requests().len(), 1, "no retry once text was shown");
    let h = t.history(&token, &r.conversation()).await;
    assert_eq!(h.json["messages"][1]["text"], "Half an ans");
}

#[tokio::test]
async fn a_529_is_retried_after_its_retry_after_and_a_long_retry_after_is_not_waited_out() {
    let t = app().await;
    t.llm.push(Script::Busy {
        status: 529,
        retry_after_s: 0,
    });
    t.llm.push(Script::Busy {
        status: 429,
        retry_after_s: 0,
    });
    t.llm.push(Script::text("Third time."));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Hello?").await;
    assert_eq!(r.text(), "Third time.");
    assert_eq!(t.llm.requests().len(), 3);

    // A moderate wait is waited out.
    t.llm.push(Script::Busy {
        status: 529,
        retry_after_s: 1,
    });
    t.llm.push(Script::text("After a second."));
    let started = std::time::Instant::now();
    let r = t.question(&token, None, "And now?").await;
    assert_eq!(r.text(), "After a second.");
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
    assert_eq!(t.llm.requests().len(), 5);

    t.llm.push(Script::Busy {
        status: 429,
        retry_after_s: 3600,
    });
    let started = std::time::Instant::now();
    let r = t.question(&token, None, "Again?").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.code(), "provider_unavailable");
    assert_eq!(t.llm.requests().len(), 6, "an hour is not waited out");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[tokio::test]
async fn a_stream_cut_inside_a_tool_call_runs_nothing() {
    let t = app().await;
    t.llm.push(Script::Stream(vec![
        Piece::Text("Let me cancel it.".into()),
        Piece::ToolCall {
            id: "toolu_1".into(),
            name: "lookup_order".into(),
            arguments: r#"{"order_id": 42}"#.into(),
        },
        Piece::Cut,
    ]));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Where is 42?").await;
    assert_eq!(r.event("done")["status"], "failed");
    assert!(t.hook.calls().is_empty());
}
