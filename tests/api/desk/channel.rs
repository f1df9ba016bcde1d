//! The visitor's live channel: operator replies and holder changes arrive
//! live, a reconnect resumes without loss or duplicate, and replicas reach
//! each other's visitors (PostgreSQL LISTEN/NOTIFY).

use std::time::Duration;

use serde_json::json;

use super::{conversation, named_console, with_handoff};
use crate::support::{Backend, TestApp};
use deskbell::states::OperatorRole;

const LIVE: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_reply_reaches_the_visitor_live_with_the_operators_name_never_the_email() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    let mut live = t.channel(&token, &c, None).await;
    assert_eq!(live.status, 200);
    assert!(
        live.quiet_for(Duration::from_millis(300)).await,
        "an event before any"
    );
    t.handoff(&token, &c, json!({})).await;
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    assert_eq!(ada.takeover(&c, json!({})).await.status, 200);
    assert_eq!(ada.reply(&c, "Hi, I'm Ada. Let me look.").await.status, 200);
    let events = live.take(3, LIVE).await;
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["holder", "holder", "message"]);
    assert_eq!(events[0].data, json!({"holder": "queue", "name": null}));
    assert_eq!(events[1].data, json!({"holder": "operator", "name": "Ada"}));
    assert_eq!(events[2].data["role"], "operator");
    assert_eq!(events[2].data["name"], "Ada");
    assert_eq!(events[2].data["text"], "Hi, I'm Ada. Let me look.");
    let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
    assert_eq!(ids, [1, 2, 3]);
    for e in &events {
        assert!(!e.data.to_string().contains("ada@example.test"));
    }
    assert_eq!(ada.release(&c).await.status, 200);
    let back = live.take(1, LIVE).await;
    assert_eq!(back[0].data, json!({"holder": "assistant", "name": null}));
}

#[tokio::test]
async fn a_reconnect_gets_what_was_sent_meanwhile_exactly_once() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    t.handoff(&token, &c, json!({})).await;
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    assert_eq!(ada.takeover(&c, json!({})).await.status, 200);
    let mut first = t.channel(&token, &c, None).await;
    let seen = first.take(2, LIVE).await;
    assert_eq!(seen.last().unwrap().id, 2);
    drop(first);
    for n in 1..=3 {
        assert_eq!(ada.reply(&c, &format!("reply {n}")).await.status, 200);
    }
    let mut again = t.channel(&token, &c, Some("2")).await;
    let events = again.take(3, LIVE).await;
    let texts: Vec<&str> = events
        .iter()
        .map(|e| e.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["reply 1", "reply 2", "reply 3"]);
    assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), [3, 4, 5]);
    assert!(
        again.quiet_for(Duration::from_millis(500)).await,
        "an event came twice"
    );
    // What comes after the reconnect arrives live on it.
    assert_eq!(ada.reply(&c, "reply 4").await.status, 200);
    let next = again.take(1, LIVE).await;
    assert_eq!(
        (next[0].id, next[0].data["text"].as_str()),
        (6, Some("reply 4"))
    );
}

#[tokio::test]
async fn a_malformed_last_event_id_is_refused_and_channels_are_bounded_per_visitor() {
    let t = TestApp::with(|c| {
        with_handoff(c);
        c.sites[0].limits.requests_per_minute = 1000;
    })
    .await;
    let (token, c) = conversation(&t).await;
    assert_eq!(t.channel(&token, &c, Some("soon")).await.status, 400);
    assert_eq!(t.channel(&token, &c, Some("-1")).await.status, 400);
    let mut open = Vec::new();
    for _ in 0..deskbell_limit() {
        let ch = t.channel(&token, &c, None).await;
        assert_eq!(ch.status, 200);
        open.push(ch);
    }
    assert_eq!(t.channel(&token, &c, None).await.status, 429);
    open.pop();
    // A closed channel gives its place back (its slot is freed when the
    // server sees the connection go).
    let mut reopened = 0;
    for _ in 0..50 {
        let ch = t.channel(&token, &c, None).await;
        if ch.status == 200 {
            reopened += 1;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(reopened, 1);
}

fn deskbell_limit() -> usize {
    8
}

#[tokio::test]
async fn a_reply_on_one_replica_reaches_a_visitor_listening_on_another() {
    if Backend::under_test() != Backend::Postgres {
        // Replicas share PostgreSQL; on SQLite the process is alone.
        return;
    }
    let a = TestApp::with(with_handoff).await;
    let b = a.replica(with_handoff).await;
    let (token, c) = conversation(&a).await;
    let mut live = a.channel(&token, &c, None).await;
    a.handoff(&token, &c, json!({})).await;
    let ada = named_console(&b, OperatorRole::Agent, "ada@example.test", "Ada").await;
    assert_eq!(ada.takeover(&c, json!({})).await.status, 200);
    assert_eq!(ada.reply(&c, "From the other replica").await.status, 200);
    // Well under the streams' own ten-second re-read: the notification woke it.
    let events = live.take(3, Duration::from_secs(3)).await;
    assert_eq!(events[2].data["text"], "From the other replica");
}

#[tokio::test]
async fn an_operator_typing_reaches_the_visitor_and_only_the_holder_may_say_so() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation(&t).await;
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    let bob = named_console(&t, OperatorRole::Agent, "bob@example.test", "Bob").await;
    let typing = format!("/v1/operator/conversations/{c}/typing");
    let r = ada.send(reqwest::Method::POST, &typing, json!({})).await;
    assert_eq!((r.status, r.code()), (409, "not_held"));
    assert_eq!(ada.takeover(&c, json!({})).await.status, 200);
    let mut live = t.channel(&token, &c, Some("1")).await;
    assert_eq!(
        ada.send(reqwest::Method::POST, &typing, json!({}))
            .await
            .status,
        204
    );
    let r = bob.send(reqwest::Method::POST, &typing, json!({})).await;
    assert_eq!((r.status, r.code()), (409, "not_held"));
    let events = live.take(1, LIVE).await;
    assert_eq!(events[0].name, "typing");
    assert_eq!(events[0].data["name"], "Ada");
    assert!(events[0].data["at"].as_str().is_some());
    assert!(
        live.quiet_for(Duration::from_millis(300)).await,
        "a refused typing was sent"
    );
}
