use std::time::Duration;

use deskbell::testkit::{Piece, Reply as Script};
use futures_util::StreamExt;
use serde_json::json;

use crate::support::{ORIGIN, TestApp, parse_sse, sent};

#[tokio::test]
async fn a_question_streams_turn_deltas_and_done_in_order() {
    let t = TestApp::start().await;
    t.llm.push(Script::text("Hello there, how can I help?"));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Hi").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let names = r.names();
    assert_eq!(names.first(), Some(&"turn"));
    assert_eq!(names.last(), Some(&"done"));
    assert!(
        names[1..names.len() - 1].iter().all(|n| *n == "delta"),
        "{names:?}"
    );
    assert!(
        names.len() > 4,
        "the answer arrives in several deltas: {names:?}"
    );
    assert_eq!(r.text(), "Hello there, how can I help?");
    let turn = r.event("turn");
    assert!(turn["conversation"].as_str().unwrap().starts_with("c_"));
    assert!(turn["turn"].as_str().unwrap().starts_with("t_"));
    assert!(turn["message"].as_str().unwrap().starts_with("m_"));
    let done = r.event("done");
    assert_eq!(done["status"], "answered");
    assert_eq!(done["usage"]["input_tokens"], 10);
    assert!(done["usage"]["output_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn the_answer_and_its_usage_are_saved_and_shown_in_history() {
    let t = TestApp::start().await;
    t.llm.push(Script::Stream(vec![
        Piece::Text("Saved answer.".into()),
        Piece::Usage {
            input: 123,
            output: 45,
        },
    ]));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Save this").await;
    let conversation = r.conversation();
    let message = r.event("turn")["message"].as_str().unwrap().to_string();
    assert_eq!(
        r.event("done")["usage"],
        json!({"input_tokens": 123, "output_tokens": 45})
    );
    let usage = t
        .app
        .store
        .conversations()
        .message_usage(&message)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (123, 45));
    let h = t.history(&token, &conversation).await;
    assert_eq!(h.status, 200);
    assert_eq!(h.json["id"], conversation.as_str());
    let messages = h.json["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "visitor");
    assert_eq!(messages[0]["text"], "Save this");
    assert!(messages[0].get("status").is_none());
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["id"], message.as_str());
    assert_eq!(messages[1]["text"], "Saved answer.");
    assert_eq!(messages[1]["status"], "answered");
    assert_eq!(messages[1]["citations"], json!([]));
    assert_eq!(messages[1]["steps"], json!([]));
    assert!(messages[1]["created_at"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn the_model_is_called_with_streaming_usage_and_the_conversation_so_far() {
    let t = TestApp::start().await;
    t.llm.push(Script::text("First answer."));
    t.llm.push(Script::text("Second answer."));
    let token = t.visitor().await;
    let first = t.question(&token, None, "First question").await;
    let conversation = first.conversation();
    let second = t
        .question(&token, Some(&conversation), "Second question")
        .await;
    assert_eq!(second.conversation(), conversation);
    let request = &t.llm.requests()[1];
    assert_eq!(request["stream"], true);
    if sent::is_openai(request) {
        assert_eq!(request["stream_options"]["include_usage"], true);
    }
    assert_eq!(request["model"], "fake");
    let messages = sent::conversation(request);
    let roles: Vec<&str> = messages.iter().map(|(role, _)| role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert!(messages[0].1.contains("Be helpful."));
    assert_eq!(messages[1].1, "First question");
    assert_eq!(messages[2].1, "First answer.");
    assert_eq!(messages[3].1, "Second question");
}

#[tokio::test]
async fn a_turn_whose_client_disconnects_is_finished_and_saved() {
    let t = TestApp::start().await;
    t.llm.push(Script::Stream(vec![
        Piece::Text("Part one, ".into()),
        Piece::Pause(Duration::from_millis(300)),
        Piece::Text("part two.".into()),
    ]));
    let token = t.visitor().await;
    let response = t
        .http
        .post(format!("{}/v1/ask", t.base))
        .header("origin", ORIGIN)
        .bearer_auth(&token)
        .json(&json!({"message": "Tell me"}))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("\n\n") {
        seen.push_str(&String::from_utf8_lossy(
            &body.next().await.unwrap().unwrap(),
        ));
    }
    drop(body);
    let conversation = parse_sse(&seen)[0].1["conversation"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(50)).await;
    t.settle().await;
    let h = t.history(&token, &conversation).await;
    let answer = &h.json["messages"][1];
    assert_eq!(answer["text"], "Part one, part two.");
    assert_eq!(answer["status"], "answered");
}

#[tokio::test]
async fn bad_bodies_get_invalid_request() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let cases = [
        "{not json",
        r#"{"message": 5}"#,
        r#"{"message": "hi", "extra": true}"#,
        r#"{"message": ""}"#,
        r#"{"message": "   "}"#,
        r#"{}"#,
        r#"[]"#,
        r#"{"message": "hi", "call": "call_x", "decision": "confirm", "signature": "s"}"#,
        r#"{"conversation": "c_x", "call": "call_x", "decision": "maybe", "signature": "s"}"#,
        r#"{"conversation": "c_x", "call": "call_x"}"#,
    ];
    for body in cases {
        let r = t
            .post_raw("/v1/ask", Some(&token), Some(ORIGIN), body.to_string())
            .await;
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_request"),
            "body {body}: {:?}",
            r.json
        );
        assert!(
            r.json["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    assert!(
        t.llm.requests().is_empty(),
        "no refused request reached the model"
    );
}

#[tokio::test]
async fn a_message_over_the_site_limit_gets_413() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let r = t.question(&token, None, &"x".repeat(4001)).await;
    assert_eq!((r.status, r.code()), (413, "message_too_long"));
    let ok = t.question(&token, None, &"é".repeat(4000)).await;
    assert_eq!(ok.status, 200, "the limit counts characters, not bytes");
}

#[tokio::test]
async fn a_huge_body_is_refused_with_413() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let body = json!({"message": "x".repeat(200_000)}).to_string();
    let r = t
        .post_raw("/v1/ask", Some(&token), Some(ORIGIN), body)
        .await;
    assert_eq!((r.status, r.code()), (413, "message_too_long"));
}

#[tokio::test]
async fn another_visitors_conversation_is_indistinguishable_from_a_missing_one() {
    let t = TestApp::start().await;
    let alice = t.visitor().await;
    let bob = t.visitor().await;
    let conversation = t.question(&alice, None, "Mine").await.conversation();
    let missing = format!("c_{}", "0".repeat(32));
    let asked = t
        .question(&bob, Some("c_../../etc/passwd"), "Let me in")
        .await;
    assert_eq!(
        (asked.status, asked.code()),
        (404, "conversation_not_found")
    );
    for id in [
        conversation.as_str(),
        missing.as_str(),
        "c_0123",
        "nonsense",
    ] {
        let asked = t.question(&bob, Some(id), "Let me in").await;
        assert_eq!(
            (asked.status, asked.code()),
            (404, "conversation_not_found"),
            "{id}"
        );
        let shown = t.history(&bob, id).await;
        assert_eq!(
            (shown.status, shown.code()),
            (404, "conversation_not_found"),
            "{id}"
        );
        assert_eq!(shown.json, t.history(&bob, &missing).await.json);
    }
    assert_eq!(t.history(&alice, &conversation).await.status, 200);
}

#[tokio::test]
async fn health_is_reported() {
    let t = TestApp::start().await;
    let r = t
        .http
        .get(format!("{}/healthz", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn random_bodies_never_get_a_server_error() {
    let t = TestApp::with(|c| {
        c.sites[0].limits.requests_per_minute = 1000;
        c.sites[0].limits.requests_per_minute_per_ip = 1000;
    })
    .await;
    let token = t.visitor().await;
    let mut seed: u64 = 0x5eed;
    for i in 0..200 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let len = (seed >> 56) as usize;
        let body: String = (0..len)
            .map(|k| {
                let b = (seed.rotate_left(k as u32 * 7) >> 24) as u8;
                // Mostly JSON-ish punctuation, so some bodies get deep into the parser.
                let alphabet = b"{}[]\":,0123 messagecall\\n";
                alphabet[b as usize % alphabet.len()] as char
            })
            .collect();
        let body = if i % 3 == 0 {
            format!("{{\"message\": {body}}}")
        } else {
            body
        };
        let r = t
            .post_raw("/v1/ask", Some(&token), Some(ORIGIN), body.clone())
            .await;
        assert!(
            matches!(r.status, 200 | 400 | 404 | 413),
            "{} for {body:?}",
            r.status
        );
        assert!(r.status == 200 || !r.code().is_empty(), "{body:?}");
    }
}

#[tokio::test]
async fn the_model_sees_the_last_twenty_messages_in_order() {
    let t = TestApp::with(|c| c.sites[0].limits.requests_per_minute = 1000).await;
    let token = t.visitor().await;
    let mut conversation: Option<String> = None;
    for i in 0..12 {
        t.llm.push(Script::text(&format!("answer {i}")));
        let r = t
            .question(&token, conversation.as_deref(), &format!("question {i}"))
            .await;
        conversation = Some(r.conversation());
    }
    let last = t.llm.requests().pop().unwrap();
    let contents: Vec<String> = sent::conversation(&last)[1..]
        .iter()
        .map(|(_, text)| text.clone())
        .collect();
    assert_eq!(
        contents.len(),
        21,
        "twenty earlier messages and the new question"
    );
    assert_eq!(contents[0], "question 1");
    assert_eq!(contents[19], "answer 10");
    assert_eq!(contents[20], "question 11");
}

#[tokio::test]
async fn a_failing_write_in_a_group_commit_fails_alone() {
    use deskbell::states::Role;
    use deskbell::store::TurnStart;
    let t = TestApp::start().await;
    let row = |conversation: &str, id: String, role: Role| {
        crate::support::message_row(&id, conversation, role)
    };
    let start = |conversation: &str| TurnStart {
        conversation: conversation.to_string(),
        is_new: true,
        site: "acme".into(),
        visitor: "v_x".into(),
        now: 1,
        visitor_message: row(conversation, deskbell::ids::new_id("m"), Role::Visitor),
        bubble: row(conversation, deskbell::ids::new_id("m"), Role::Assistant),
        budget: None,
    };
    // Twenty new conversations, and one that reuses the first one's id: they reach
    // the writer together, and only the duplicate may fail.
    let ids: Vec<String> = (0..20).map(|_| deskbell::ids::new_id("c")).collect();
    let mut starts: Vec<TurnStart> = ids.iter().map(|id| start(id)).collect();
    starts.push(start(&ids[0]));
    let results =
        futures_util::future::join_all(starts.into_iter().map(|s| t.app.store.turns().begin(s)))
            .await;
    assert_eq!(
        results
            .iter()
            .filter(|r| matches!(r, Ok(deskbell::store::Reservation::Reserved)))
            .count(),
        20
    );
    assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
    // Each conversation holds its own two messages; the duplicate's were rolled back.
    for id in &ids {
        assert_eq!(
            t.app
                .store
                .conversations()
                .last_messages(id, 10)
                .await
                .unwrap()
                .len(),
            2,
            "{id}"
        );
    }
}
