//! What operators read (SPEC §15): conversations (newest first, filtered, paged,
//! live), one conversation with its calls' audit rows and usage, the audit table
//! with its filters and export, usage per day, and knowledge.

use std::time::Duration;

use deskbell::config::KnowledgeSource;
use deskbell::states::OperatorRole;
use deskbell::testkit::{Piece, Reply as Script};
use futures_util::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Console, TestApp};

fn ids(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect()
}

/// Three conversations, oldest first: answered, awaiting a card, failed.
async fn three_conversations(t: &TestApp) -> (String, String, String) {
    let visitor = t.visitor().await;
    t.llm.push(Script::text("Shipping takes 3 days."));
    let answered = t
        .question(&visitor, None, "How long is shipping?")
        .await
        .conversation();
    t.clock.advance_ms(1000);
    let (card, _) = t.raise_card(&visitor).await;
    t.clock.advance_ms(1000);
    // A model cut off after its first words: the answer fails.
    t.llm
        .push(Script::Stream(vec![Piece::Text("Hel".into()), Piece::Cut]));
    let failed = t.question(&visitor, None, "Hello there").await;
    assert_eq!(failed.event("done")["status"], "failed");
    let failed = failed.conversation();
    (answered, card, failed)
}

#[tokio::test]
async fn conversations_are_listed_newest_first_and_filtered() {
    let t = TestApp::start().await;
    let (answered, card, failed) = three_conversations(&t).await;
    let agent = t.console(OperatorRole::Agent).await;
    let all = agent.get("/v1/operator/conversations").await;
    assert_eq!(all.status, 200, "{:?}", all.json);
    assert_eq!(
        ids(&all.json),
        vec![failed.clone(), card.clone(), answered.clone()]
    );
    assert_eq!(all.json["next_cursor"], Value::Null);
    let first = &all.json["items"][2];
    assert_eq!(first["site"], "acme");
    assert_eq!(first["status"], "answered");
    assert_eq!(first["last_message"]["role"], "assistant");
    assert_eq!(first["last_message"]["text"], "Shipping takes 3 days.");

    let pending = agent.get("/v1/operator/conversations?pending=true").await;
    assert_eq!(ids(&pending.json), vec![card.clone()]);
    assert_eq!(
        pending.json["items"][0]["pending_card"]["label"],
        "Cancel an order"
    );
    assert_eq!(pending.json["items"][0]["status"], "awaiting_confirmation");

    for (status, expected) in [
        ("answered", &answered),
        ("failed", &failed),
        ("awaiting_confirmation", &card),
    ] {
        let r = agent
            .get(&format!("/v1/operator/conversations?status={status}"))
            .await;
        assert_eq!(ids(&r.json), vec![expected.clone()], "{status}");
    }
    let q = agent.get("/v1/operator/conversations?q=SHIPPING").await;
    assert_eq!(
        ids(&q.json),
        vec![answered.clone()],
        "case-insensitive text search"
    );
    let q = agent.get("/v1/operator/conversations?q=100%25").await;
    assert!(
        ids(&q.json).is_empty(),
        "a % is a character, not a wildcard"
    );
    let by_id = agent
        .get(&format!("/v1/operator/conversations?q={card}"))
        .await;
    assert_eq!(ids(&by_id.json), vec![card.clone()]);
    let other = agent.get("/v1/operator/conversations?site=other").await;
    assert!(ids(&other.json).is_empty());
}

#[tokio::test]
async fn conversation_pages_follow_their_cursor_to_the_end() {
    let t = TestApp::start().await;
    let (answered, card, failed) = three_conversations(&t).await;
    let agent = t.console(OperatorRole::Agent).await;
    let mut seen = Vec::new();
    let mut path = "/v1/operator/conversations?limit=1".to_string();
    loop {
        let page = agent.get(&path).await;
        assert_eq!(page.status, 200, "{:?}", page.json);
        seen.extend(ids(&page.json));
        match page.json["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/operator/conversations?limit=1&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, vec![failed, card, answered]);
}

#[tokio::test]
async fn bad_list_queries_are_refused_by_name() {
    let t = TestApp::start().await;
    let agent = t.console(OperatorRole::Agent).await;
    for (path, field) in [
        ("/v1/operator/conversations?status=happy", "status"),
        ("/v1/operator/conversations?cursor=zzz", "cursor"),
        ("/v1/operator/conversations?limit=0", "limit"),
        ("/v1/operator/conversations?colour=red", "colour"),
        ("/v1/operator/audit?event=deleted", "event"),
        ("/v1/operator/audit?after=yesterday", "after"),
        ("/v1/operator/audit/export?format=xml", "format"),
        ("/v1/operator/usage?days=0", "days"),
        ("/v1/operator/usage?days=91", "days"),
        ("/v1/operator/conversations?site=mars", "site"),
        ("/v1/operator/conversations?status=sent", "status"),
        ("/v1/operator/audit?site=mars", "site"),
    ] {
        let r = agent.get(path).await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"), "{path}");
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{path}: {message}");
    }
    assert_eq!(
        agent.get("/v1/operator/conversations/c_nope").await.code(),
        "conversation_not_found"
    );
}

#[tokio::test]
async fn one_conversation_shows_its_messages_calls_audit_and_usage() {
    let t = TestApp::start().await;
    let visitor = t.visitor().await;
    let (conversation, card) = t.raise_card(&visitor).await;
    t.llm.push(Script::text("Order 42 is cancelled."));
    let r = t.answer(&visitor, &conversation, &card, "confirm").await;
    assert_eq!(r.status, 200);
    let agent = t.console(OperatorRole::Agent).await;
    let r = agent
        .get(&format!("/v1/operator/conversations/{conversation}"))
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["site"], "acme");
    let messages = r.json["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "question, card bubble, continuation");
    let step = &messages[1]["steps"][0];
    assert_eq!(step["status"], "confirmed");
    assert_eq!(
        step["arguments"],
        json!([{"name": "Order ID", "value": "42"}])
    );
    assert!(
        !r.json.to_string().contains("signature\""),
        "no signature leaves the operator API"
    );
    assert_eq!(messages[2]["steps"][0]["status"], "succeeded");
    assert!(messages[1]["usage"]["output_tokens"].as_u64().is_some());
    let calls = r.json["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["arguments"], json!({"order_id": 42}));
    let events: Vec<&str> = calls[0]["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, vec!["requested", "confirmed", "executed"]);
    let total = &r.json["usage"];
    assert!(total["input_tokens"].as_u64().unwrap() > 0, "{total}");
}

/// `GET /v1/operator/events` with the console's cookie.
async fn open_events(console: &Console) -> reqwest::Response {
    console
        .http
        .get(format!("{}/v1/operator/events", console.base))
        .header("cookie", &console.cookie)
        .send()
        .await
        .unwrap()
}

/// Reads the operator event stream until `n` changes arrived.
async fn changes(
    console: &Console,
    n: usize,
    act: impl std::future::Future<Output = ()>,
) -> Vec<Value> {
    let response = open_events(console).await;
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    act.await;
    let mut text = String::new();
    let mut seen = Vec::new();
    while seen.len() < n {
        let chunk = tokio::time::timeout(Duration::from_secs(10), body.next())
            .await
            .expect("a change within 10 s")
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
        seen = crate::support::parse_sse(&text)
            .into_iter()
            .filter(|(name, _)| name == "conversation")
            .map(|(_, data)| data)
            .collect();
    }
    seen
}

#[tokio::test]
async fn the_live_stream_tells_of_a_new_conversation_its_card_and_the_answer() {
    let t = TestApp::start().await;
    let agent = t.console(OperatorRole::Agent).await;
    let visitor = t.visitor().await;
    let conversation = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let seen = changes(&agent, 4, async {
        let (c, card) = t.raise_card(&visitor).await;
        *conversation.lock().unwrap() = c.clone();
        t.llm.push(Script::text("Done."));
        t.answer(&visitor, &c, &card, "cancel").await;
    })
    .await;
    let kinds: Vec<&str> = seen.iter().map(|c| c["change"].as_str().unwrap()).collect();
    assert_eq!(
        &kinds[..3],
        &["started", "card_raised", "turn_ended"],
        "{kinds:?}"
    );
    assert!(kinds.contains(&"card_answered"), "{kinds:?}");
    let id = conversation.lock().unwrap().clone();
    assert!(
        seen.iter()
            .all(|c| c["id"] == id.as_str() && c["site"] == "acme")
    );
}

#[tokio::test]
async fn the_audit_is_filtered_paged_and_exported() {
    let t = TestApp::start().await;
    let visitor = t.visitor().await;
    let (conversation, card) = t.raise_card(&visitor).await;
    t.llm.push(Script::text("Cancelled."));
    t.answer(&visitor, &conversation, &card, "confirm").await;
    t.clock.advance_ms(1000);
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 7}),
    )]));
    t.llm.push(Script::text("It is on its way."));
    t.question(&visitor, None, "Where is order 7?").await;
    let admin = t.console(OperatorRole::Admin).await;
    admin
        .patch_tool("acme", "refund", json!({"policy": "off"}))
        .await;
    let total = t.audit().await.len();

    let all = admin.get("/v1/operator/audit?limit=100").await;
    let items = all.json["items"].as_array().unwrap();
    assert_eq!(items.len(), total);
    assert_eq!(items[0]["event"], "tool_changed", "newest first");
    assert_eq!(items[0]["call"], Value::Null);
    assert!(items[0]["operator"].as_str().unwrap().starts_with("admin-"));
    assert_eq!(items[0]["arguments"], json!({"policy": "off"}));
    // Call rows name no operator (SPEC §10: null on call rows).
    assert!(
        items[1..]
            .iter()
            .all(|r| r["operator"].is_null() && r["call"].is_string()),
        "{items:?}"
    );

    let requested = admin.get("/v1/operator/audit?event=requested").await;
    assert_eq!(requested.json["items"].as_array().unwrap().len(), 2);
    let tool = admin.get("/v1/operator/audit?tool=lookup_order").await;
    assert!(
        tool.json["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["tool"] == "lookup_order")
    );
    let call = card["call"].as_str().unwrap();
    let one = admin.get(&format!("/v1/operator/audit?call={call}")).await;
    assert_eq!(one.json["items"].as_array().unwrap().len(), 3);
    let late = deskbell::clock::rfc3339(t.clock_ms() + 1);
    let none = admin.get(&format!("/v1/operator/audit?after={late}")).await;
    assert!(none.json["items"].as_array().unwrap().is_empty());
    let before = admin
        .get(&format!("/v1/operator/audit?before={late}&site=acme"))
        .await;
    assert_eq!(before.json["items"].as_array().unwrap().len(), total);

    let mut paged = Vec::new();
    let mut path = "/v1/operator/audit?limit=2".to_string();
    loop {
        let page = admin.get(&path).await;
        paged.extend(page.json["items"].as_array().unwrap().iter().cloned());
        match page.json["next_cursor"].as_str() {
            Some(c) => path = format!("/v1/operator/audit?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(
        paged,
        items.to_vec(),
        "pages join up without gaps or repeats"
    );

    let (status, headers, text) = admin
        .download("/v1/operator/audit/export?format=jsonl")
        .await;
    assert_eq!(status, 200);
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .contains("attachment")
    );
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), total);
    assert_eq!(
        lines.last().unwrap()["event"],
        "tool_changed",
        "oldest first"
    );
    let (_, _, csv) = admin.download("/v1/operator/audit/export?format=csv").await;
    assert!(csv.starts_with("at,event,reason,call,site,conversation,visitor,tool,policy,arguments,http_status,duration_ms,operator,rule\n"));
    assert_eq!(csv.lines().count(), total + 1);
}

#[tokio::test]
async fn usage_counts_each_day_of_the_range() {
    let t = TestApp::start().await;
    let visitor = t.visitor().await;
    let (c1, card1) = t.raise_card(&visitor).await;
    t.llm.push(Script::text("Cancelled."));
    t.answer(&visitor, &c1, &card1, "confirm").await;
    let (c2, card2) = t.raise_card(&visitor).await;
    t.llm.push(Script::text("Kept."));
    t.answer(&visitor, &c2, &card2, "cancel").await;
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 7}),
    )]));
    t.llm.push(Script::text("On its way."));
    t.question(&visitor, None, "Where is order 7?").await;
    let agent = t.console(OperatorRole::Agent).await;
    let r = agent.get("/v1/operator/usage?site=acme&days=3").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    let site = &r.json["sites"][0];
    assert_eq!(site["site"], "acme");
    assert_eq!(site["daily_token_budget"], 1_000_000);
    let days = site["days"].as_array().unwrap();
    assert_eq!(days.len(), 3);
    let today = &days[2];
    assert_eq!(today["day"], deskbell::budget::utc_day(t.clock_ms()));
    assert_eq!(today["turns"], 3);
    assert_eq!(today["confirmed"], 1);
    assert_eq!(today["cancelled"], 1);
    assert_eq!(today["auto_calls"], 1);
    assert!(today["output_tokens"].as_i64().unwrap() > 0);
    assert!(today["spent"].as_i64().unwrap() > 0);
    assert_eq!(days[0]["turns"], 0, "an empty day is there, with zeros");
    let both = agent.get("/v1/operator/usage").await;
    assert_eq!(both.json["sites"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn knowledge_is_listed_reingested_by_an_admin_and_searched() {
    let (dir, docs, source) = shipping_docs();
    let data = dir.path().join("data");
    let t = TestApp::with(|c| {
        c.server.data_dir = data.clone();
        c.sites[0].knowledge = vec![source.clone()];
    })
    .await;
    let admin = t.console(OperatorRole::Admin).await;
    let list = admin.get("/v1/operator/knowledge").await;
    let acme = &list.json["items"][0];
    assert_eq!(acme["site"], "acme");
    assert_eq!(acme["indexed"], true);
    assert!(acme["sources"][0].as_str().unwrap().ends_with("docs"));

    std::fs::write(
        docs.join("returns.md"),
        "# Returns\n\nReturn any kettle within 30 days.",
    )
    .unwrap();
    let r = admin
        .send(
            Method::POST,
            "/v1/operator/knowledge/acme/ingest",
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["added"], 1);
    assert_eq!(r.json["unchanged"], 1);
    let list = admin.get("/v1/operator/knowledge").await;
    assert_eq!(list.json["items"][0]["last_report"]["added"], 1);

    let found = admin
        .get("/v1/operator/knowledge/acme/search?q=return%20a%20kettle")
        .await;
    assert_eq!(found.status, 200, "{:?}", found.json);
    let first = &found.json["passages"][0];
    assert_eq!(first["n"], 1);
    assert!(
        first["text"].as_str().unwrap().contains("30 days"),
        "{first}"
    );
    let empty = admin.get("/v1/operator/knowledge/acme/search?q=%20").await;
    assert_eq!(empty.code(), "invalid_request");
}

#[tokio::test]
async fn the_live_stream_ends_once_its_session_is_signed_out() {
    let t = TestApp::start().await;
    let agent = t.console(OperatorRole::Agent).await;
    let response = open_events(&agent).await;
    let out = agent
        .call(Method::DELETE, "/v1/operator/session", None, true)
        .await;
    assert_eq!(out.status, 204);
    let visitor = t.visitor().await;
    t.llm.push(Script::text("Hello."));
    t.question(&visitor, None, "Hi").await;
    let body = tokio::time::timeout(Duration::from_secs(10), response.text())
        .await
        .expect("the stream ended")
        .unwrap();
    assert!(
        !body.contains("event: conversation"),
        "nothing reached a signed-out console: {body}"
    );
}

#[tokio::test]
async fn a_word_search_reads_a_window_at_a_time_and_its_cursor_goes_on() {
    let t = TestApp::start().await;
    let visitor = t.visitor().await;
    let mut conversations = Vec::new();
    for question in ["Where is my kettle?", "Hello", "Hi", "Hey", "Good day"] {
        t.llm.push(Script::text("Sure."));
        conversations.push(t.question(&visitor, None, question).await.conversation());
        t.clock.advance_ms(1000);
    }
    // Only the oldest mentions a kettle; with a window of two, pages go on
    // until they reach it.
    let mut filter = deskbell::store::ConversationFilter {
        q: Some("KETTLE".into()),
        limit: 51,
        window: 2,
        ..Default::default()
    };
    let mut pages = 0;
    let found = loop {
        pages += 1;
        let (rows, window_end) = t.app.store.conversations().list(&filter).await.unwrap();
        if let Some(row) = rows.first() {
            break row.id.clone();
        }
        filter.before = Some(window_end.expect("an empty page of a search goes on"));
        assert!(pages < 5);
    };
    assert_eq!(found, conversations[0]);
    assert_eq!(pages, 3, "windows of 2, 2 and the last one");
}

#[tokio::test]
async fn knowledge_ingested_through_one_replica_is_cited_by_another_within_seconds() {
    let (dir, docs, source) = shipping_docs();
    // Each replica keeps its index on its own disk.
    let (a_data, b_data) = (dir.path().join("a"), dir.path().join("b"));
    let a = TestApp::with(|c| {
        c.server.data_dir = a_data.clone();
        c.sites[0].knowledge = vec![source.clone()];
    })
    .await;
    let b = a
        .replica(|c| {
            c.server.data_dir = b_data.clone();
            c.sites[0].knowledge = vec![source.clone()];
        })
        .await;
    std::fs::write(
        docs.join("returns.md"),
        "# Returns\n\nReturn any kettle within 30 days.",
    )
    .unwrap();
    let admin = a.console(OperatorRole::Admin).await;
    let r = admin
        .send(
            Method::POST,
            "/v1/operator/knowledge/acme/ingest",
            json!({}),
        )
        .await;
    assert_eq!(r.json["added"], 1, "{:?}", r.json);
    let visitor = b.visitor().await;
    let mut cited = None;
    for _ in 0..40 {
        b.llm.push(Script::text("Within 30 days [1]."));
        let r = b
            .question(&visitor, None, "How do I return a kettle?")
            .await;
        let title = r.event("citations")["items"][0]["title"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if title.contains("Returns") {
            cited = Some(title);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(cited.is_some(), "the other replica's index never caught up");
}

/// A folder holding one document about shipping, and the knowledge source
/// naming it (the folder lives as long as the first value).
fn shipping_docs() -> (tempfile::TempDir, std::path::PathBuf, KnowledgeSource) {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("shipping.md"),
        "# Shipping\n\nStandard shipping takes 3 to 5 working days.",
    )
    .unwrap();
    let source = KnowledgeSource::Folder {
        allow_private: false,
        path: docs.display().to_string(),
        base_url: None,
    };
    (dir, docs, source)
}
