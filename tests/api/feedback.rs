//! Visitors rate answers (issue 41): `POST /v1/conversations/{id}/messages/
//! {message}/feedback`, guarded like history, replaced when given again, and
//! shown to the team in the console, in usage and in the export.

use deskbell::states::OperatorRole;
use deskbell::testkit::Reply as Script;
use serde_json::{Value, json};

use crate::crash::harness::{Server, setup_with};
use crate::support::{ORIGIN, Reply, TestApp, free_port};

/// Asks one question and returns the conversation and the answer's id.
async fn answered(t: &TestApp, token: &str) -> (String, String) {
    t.llm.push(Script::text("Returns take 30 days."));
    let r = t.question(token, None, "How long do returns take?").await;
    let conversation = r.conversation();
    let h = t.history(token, &conversation).await;
    let answer = h.json["messages"][1]["id"].as_str().unwrap().to_string();
    (conversation, answer)
}

async fn rate(t: &TestApp, token: &str, conversation: &str, message: &str, body: Value) -> Reply {
    t.post(
        &format!("/v1/conversations/{conversation}/messages/{message}/feedback"),
        Some(token),
        ORIGIN,
        body,
    )
    .await
}

#[tokio::test]
async fn a_rating_with_a_comment_is_kept_and_shown_in_history_the_console_and_usage() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, answer) = answered(&t, &token).await;
    let comment = "<b>Too vague</b> — which days count?";
    let r = rate(
        &t,
        &token,
        &conversation,
        &answer,
        json!({"rating": "down", "comment": comment}),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["rating"], "down");
    assert_eq!(r.json["comment"], comment);

    let h = t.history(&token, &conversation).await.json;
    assert_eq!(h["messages"][1]["feedback"]["rating"], "down");
    assert_eq!(
        h["messages"][1]["feedback"]["comment"], comment,
        "kept as text"
    );
    assert!(h["messages"][0].get("feedback").is_none());

    let console = t.console(OperatorRole::Agent).await;
    let detail = console
        .get(&format!("/v1/operator/conversations/{conversation}"))
        .await;
    assert_eq!(detail.json["messages"][1]["feedback"]["rating"], "down");
    let usage = console.get("/v1/operator/usage?site=acme&days=1").await;
    let today = &usage.json["sites"][0]["days"][0];
    assert_eq!(
        (today["helpful"].as_i64(), today["not_helpful"].as_i64()),
        (Some(0), Some(1))
    );
}

#[tokio::test]
async fn rating_an_answer_again_replaces_the_first_rating() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, answer) = answered(&t, &token).await;
    let first = rate(&t, &token, &conversation, &answer, json!({"rating": "up"})).await;
    t.clock.advance_ms(90_000);
    let second = rate(
        &t,
        &token,
        &conversation,
        &answer,
        json!({"rating": "down", "comment": "Changed my mind"}),
    )
    .await;
    assert_eq!(second.status, 200);
    assert_eq!(
        second.json["created_at"], first.json["created_at"],
        "the first time is kept"
    );
    assert_ne!(second.json["updated_at"], first.json["updated_at"]);
    let h = t.history(&token, &conversation).await.json;
    assert_eq!(h["messages"][1]["feedback"]["rating"], "down");
    let console = t.console(OperatorRole::Agent).await;
    let usage = console.get("/v1/operator/usage?site=acme&days=1").await;
    let today = &usage.json["sites"][0]["days"][0];
    assert_eq!(
        (today["helpful"].as_i64(), today["not_helpful"].as_i64()),
        (Some(0), Some(1))
    );
    let (status, _, export) = console.download("/v1/operator/feedback/export").await;
    assert_eq!(status, 200);
    assert_eq!(export.lines().count(), 1, "{export}");
}

#[tokio::test]
async fn feedback_on_another_visitors_answer_or_on_a_message_that_is_not_an_answer_is_404() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, answer) = answered(&t, &token).await;
    let stranger = t.visitor().await;
    let r = rate(
        &t,
        &stranger,
        &conversation,
        &answer,
        json!({"rating": "up"}),
    )
    .await;
    assert_eq!((r.status, r.code()), (404, "conversation_not_found"));
    let h = t.history(&token, &conversation).await.json;
    let question = h["messages"][0]["id"].as_str().unwrap();
    for message in [question, "m_nothing", "../x"] {
        let r = rate(&t, &token, &conversation, message, json!({"rating": "up"})).await;
        assert_eq!((r.status, r.code()), (404, "not_found"), "{message}");
    }
    let r = t
        .post(
            &format!("/v1/conversations/{conversation}/messages/{answer}/feedback"),
            Some(&token),
            "https://evil.example",
            json!({"rating": "up"}),
        )
        .await;
    assert_eq!(r.status, 403);
    let h = t.history(&token, &conversation).await.json;
    assert!(
        h["messages"][1].get("feedback").is_none(),
        "nothing was kept"
    );
}

#[tokio::test]
async fn a_bad_rating_an_overlong_comment_or_an_unknown_field_is_a_clear_400() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, answer) = answered(&t, &token).await;
    for body in [
        json!({"rating": "meh"}),
        json!({}),
        json!({"rating": "up", "comment": "x".repeat(1001)}),
        json!({"rating": "up", "comment": "hidden\u{0}text"}),
        json!({"rating": "up", "stars": 5}),
    ] {
        let r = rate(&t, &token, &conversation, &answer, body.clone()).await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"), "{body}");
    }
    let ok = json!({"rating": "up", "comment": "é".repeat(1000)});
    assert_eq!(
        rate(&t, &token, &conversation, &answer, ok).await.status,
        200
    );
}

#[tokio::test]
async fn the_export_lists_every_rating_as_json_lines_and_as_csv_that_runs_no_formula() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, answer) = answered(&t, &token).await;
    let formula = "=HYPERLINK(\"http://evil.example\",\"click\")";
    rate(
        &t,
        &token,
        &conversation,
        &answer,
        json!({"rating": "down", "comment": formula}),
    )
    .await;
    let console = t.console(OperatorRole::Agent).await;
    let (status, headers, jsonl) = console
        .download("/v1/operator/feedback/export?site=acme")
        .await;
    assert_eq!(status, 200);
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains("deskbell-feedback.jsonl")
    );
    let row: Value = serde_json::from_str(jsonl.lines().next().unwrap()).unwrap();
    assert_eq!(row["message"], answer.as_str());
    assert_eq!(row["conversation"], conversation.as_str());
    assert_eq!(row["comment"], formula);
    let (_, _, csv) = console
        .download("/v1/operator/feedback/export?format=csv")
        .await;
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("updated_at,created_at,site,conversation,message,rating,comment")
    );
    let line = lines.next().unwrap();
    assert!(
        line.ends_with("\"'=HYPERLINK(\"\"http://evil.example\"\",\"\"click\"\")\""),
        "{line}"
    );
    let bad = console.get("/v1/operator/feedback/export?format=xml").await;
    assert_eq!(bad.status, 400);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rating_is_counted_in_the_metrics_by_site_and_rating() {
    let metrics = format!("127.0.0.1:{}", free_port());
    let s = setup_with(false, &format!("metrics_bind = \"{metrics}\"\n"), "").await;
    let server = Server::start(&s.config, None).await;
    let token = server.visitor().await;
    s.llm.push(Script::text("Hello!"));
    let conversation = server
        .ask(&token, json!({"message": "Hi"}))
        .await
        .conversation();
    let http = reqwest::Client::new();
    let history: Value = http
        .get(format!("{}/v1/conversations/{conversation}", server.base))
        .header("origin", ORIGIN)
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answer = history["messages"][1]["id"].as_str().unwrap();
    let rated = http
        .post(format!(
            "{}/v1/conversations/{conversation}/messages/{answer}/feedback",
            server.base
        ))
        .header("origin", ORIGIN)
        .bearer_auth(&token)
        .json(&json!({"rating": "up"}))
        .send()
        .await
        .unwrap();
    assert_eq!(rated.status(), 200);
    let text = http
        .get(format!("http://{metrics}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.lines()
            .any(|l| l == r#"deskbell_feedback_total{site="acme",rating="up"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn the_export_reads_page_after_page_without_losing_or_repeating_ratings_given_at_one_instant()
{
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let mut answers = Vec::new();
    for _ in 0..3 {
        let (conversation, answer) = answered(&t, &token).await;
        // The clock stands still: all three share one updated_at, and only
        // the message id orders them.
        assert_eq!(
            rate(&t, &token, &conversation, &answer, json!({"rating": "up"}))
                .await
                .status,
            200
        );
        answers.push(answer);
    }
    answers.sort();
    let store = t.app.store.feedback();
    let first = store.page(Some("acme"), None, 2).await.unwrap();
    let last = first.last().map(|r| (r.updated_at, r.message.clone()));
    let second = store.page(Some("acme"), last.as_ref(), 2).await.unwrap();
    let read: Vec<String> = first
        .iter()
        .chain(&second)
        .map(|r| r.message.clone())
        .collect();
    assert_eq!(read, answers);
    assert!(store.page(Some("other"), None, 2).await.unwrap().is_empty());
}
