//! Nobody there (SPEC §19): outside the hours, or with no operator signed in
//! for two minutes, no handoff is made; the visitor is told so at once and
//! may leave an email, which the console shows and the model never sees.

use deskbell::testkit::Reply as Script;
use reqwest::Method;
use serde_json::json;

use super::{audit_of, conversation_alone, named_console, on_duty, with_handoff};
use crate::support::{ORIGIN, TestApp};
use deskbell::states::OperatorRole;

/// Milliseconds since the epoch of an RFC 3339 instant.
fn at(utc: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(utc)
        .unwrap()
        .timestamp_millis()
}

/// Berlin's hours every day, 09:00–17:00 on the wall clock.
fn berlin_hours(c: &mut deskbell::config::Config) {
    with_handoff(c);
    c.sites[0].handoff.hours = Some("Mon-Sun 09:00-17:00 Europe/Berlin".into());
    c.sites[0].handoff.offline_message = Some("We are back at 9 tomorrow.".into());
}

#[tokio::test]
async fn at_one_minute_past_closing_on_the_day_summer_time_starts_the_visitor_is_told_nobody_is_there()
 {
    let t = TestApp::with(berlin_hours).await;
    // 29 March 2026, 15:01 UTC: 17:01 in Berlin, which moved to UTC+2 at 02:00.
    t.clock
        .advance_ms(at("2026-03-29T15:01:00Z") - t.clock_ms());
    let (token, c) = conversation_alone(&t).await;
    on_duty(&t).await;
    let r = t.handoff(&token, &c, json!({})).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["holder"], "assistant");
    assert_eq!(r.json["offline"], "We are back at 9 tomorrow.");
    assert!(
        audit_of(&t, &c, "handoff").await.is_empty(),
        "a handoff was made"
    );
    t.llm.push(Script::text("I'm still here to help."));
    assert_eq!(t.question(&token, Some(&c), "Hello?").await.status, 200);
    // The next day at 14:59 UTC, 16:59 on the wall, the desk is open.
    t.clock
        .advance_ms(at("2026-03-30T14:59:00Z") - t.clock_ms());
    on_duty(&t).await;
    let r = t.handoff(&token, &c, json!({})).await;
    assert_eq!(
        (r.status, r.json["holder"].as_str()),
        (200, Some("queue")),
        "{:?}",
        r.json
    );
    let r = t.question(&token, Some(&c), "Still there?").await;
    assert_eq!(r.status, 202);
    assert!(r.json.get("offline").is_none(), "{:?}", r.json);
    // Three minutes on the desk has closed: a visitor still waiting is told so.
    t.clock.advance_ms(3 * 60 * 1000);
    let r = t.question(&token, Some(&c), "Hello?").await;
    assert_eq!(r.status, 202);
    assert_eq!(
        r.json["offline"], "We are back at 9 tomorrow.",
        "{:?}",
        r.json
    );
}

#[tokio::test]
async fn with_nobody_signed_in_for_two_minutes_no_handoff_is_made() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation_alone(&t).await;
    on_duty(&t).await;
    t.clock.advance_ms(2 * 60 * 1000 + 1);
    let r = t.handoff(&token, &c, json!({})).await;
    assert_eq!(r.json["holder"], "assistant", "{:?}", r.json);
    assert!(
        r.json["offline"]
            .as_str()
            .unwrap()
            .contains("Nobody from the team")
    );
    // The assistant's own handoff tells the visitor the same, at once.
    t.llm.push(Script::tool_calls(&[(
        "handoff",
        json!({"reason": "asked"}),
    )]));
    let r = t.question(&token, Some(&c), "A person, please").await;
    assert_eq!(r.status, 200);
    assert!(
        r.event("offline")["offline"]
            .as_str()
            .unwrap()
            .contains("Nobody")
    );
    assert!(r.all("holder").is_empty());
    assert!(audit_of(&t, &c, "handoff").await.is_empty());
}

#[tokio::test]
async fn an_email_left_for_the_team_is_shown_in_the_console_and_never_to_the_model() {
    let t = TestApp::with(with_handoff).await;
    let (token, c) = conversation_alone(&t).await;
    let path = format!("/v1/conversations/{c}/contact");
    let contact = |body: serde_json::Value| t.post(&path, Some(&token), ORIGIN, body);
    for bad in [
        "",
        "not-an-email",
        "a b@example.test",
        "a@b.test?bcc=evil@x.test",
        "a@",
        "@example.test",
        "x@y@z",
    ] {
        let r = contact(json!({ "email": bad })).await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"), "{bad}");
    }
    assert_eq!(
        contact(json!({"email": "visitor@example.test"}))
            .await
            .status,
        204
    );
    let stranger = t.visitor().await;
    let r = t
        .post(
            &format!("/v1/conversations/{c}/contact"),
            Some(&stranger),
            ORIGIN,
            json!({"email": "x@example.test"}),
        )
        .await;
    assert_eq!(r.status, 404);
    let ada = named_console(&t, OperatorRole::Agent, "ada@example.test", "Ada").await;
    let detail = ada
        .call(
            Method::GET,
            &format!("/v1/operator/conversations/{c}"),
            None,
            false,
        )
        .await;
    assert_eq!(detail.json["contact"], "visitor@example.test");
    assert_eq!(detail.json["holder"], "assistant");
    t.llm.push(Script::text("Sure."));
    assert_eq!(t.question(&token, Some(&c), "Thanks").await.status, 200);
    let request = t.llm.requests().last().unwrap().to_string();
    assert!(
        !request.contains("visitor@example.test"),
        "the model saw the email"
    );
}
