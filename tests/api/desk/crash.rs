//! kill -9 of the process holding a visitor's live channel, then of the one
//! holding an operator's session: no reply is lost, and the visitor who
//! reconnects (to another process, with Last-Event-ID) gets what was sent
//! meanwhile exactly once. Real `deskbell serve` processes: replicas on
//! PostgreSQL, two processes on one file on SQLite.

use std::time::Duration;

use serde_json::{Value, json};

use crate::crash::harness::{Server, on_postgres, setup_with};
use crate::support::{Channel, session_cookie};
use deskbell::testkit::Reply as Script;

/// Ada, an agent named "Ada" in the database at `database_url`, signed in to
/// the console of the server at `base`: her cookie and CSRF token.
pub(crate) async fn ada_at(database_url: &str, base: &str) -> (String, String) {
    let store = deskbell::store::Store::connect(database_url, Default::default())
        .await
        .unwrap();
    deskbell::operator::accounts::add_operator(
        &store,
        "ada@example.test",
        deskbell::states::OperatorRole::Agent,
        crate::support::PASSWORD,
        chrono::Utc::now().timestamp_millis(),
    )
    .await
    .unwrap();
    store
        .operators()
        .set_name("ada@example.test", "Ada")
        .await
        .unwrap();
    sign_in(base, "ada@example.test").await
}

/// A signed-in console on `base`: its cookie and CSRF token.
async fn sign_in(base: &str, email: &str) -> (String, String) {
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/operator/session"))
        .json(&json!({"email": email, "password": crate::support::PASSWORD}))
        .send()
        .await
        .unwrap();
    let r = crate::support::read(r).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    (
        session_cookie(&r),
        r.json["csrf"].as_str().unwrap().to_string(),
    )
}

pub(crate) async fn operator_post(
    base: &str,
    (cookie, csrf): &(String, String),
    path: &str,
    body: Value,
) -> u16 {
    reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("cookie", cookie)
        .header("x-deskbell-csrf", csrf)
        .json(&body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn killing_the_processes_of_a_visitors_channel_and_an_operators_session_loses_no_reply() {
    let s = setup_with(on_postgres(), "", "[site.handoff]\nenabled = true\n").await;
    let a = Server::start(&s.replica_config(1), None).await;
    let b = Server::start(&s.replica_config(2), None).await;
    let session = ada_at(&s.database_url, &b.base).await;

    let token = a.visitor().await;
    s.llm.push(Script::text("Hello!"));
    let r = a.ask(&token, json!({"message": "Hi"})).await;
    let c = r.conversation();
    let handoff =
        crate::support::ask_path_post(&a.base, &token, &format!("/v1/conversations/{c}/handoff"))
            .await;
    assert_eq!(handoff["holder"], "queue", "{handoff:?}");
    let desk = format!("/v1/operator/conversations/{c}");
    assert_eq!(
        operator_post(&b.base, &session, &format!("{desk}/takeover"), json!({})).await,
        200
    );
    assert_eq!(
        operator_post(
            &b.base,
            &session,
            &format!("{desk}/messages"),
            json!({"text": "one"})
        )
        .await,
        200
    );

    // The visitor listens on A; SQLite's second process is seen within its re-read.
    let mut live = Channel::open(&a.base, &token, &c, None).await;
    let seen = live.take(3, Duration::from_secs(15)).await;
    assert_eq!(seen[2].data["text"], "one");
    let last = seen[2].id.to_string();
    a.kill();

    for text in ["two", "three"] {
        assert_eq!(
            operator_post(
                &b.base,
                &session,
                &format!("{desk}/messages"),
                json!({ "text": text })
            )
            .await,
            200
        );
    }
    // The visitor's widget reconnects, now to B, after the last event it saw.
    let mut again = Channel::open(&b.base, &token, &c, Some(&last)).await;
    let events = again.take(2, Duration::from_secs(15)).await;
    let texts: Vec<&str> = events
        .iter()
        .map(|e| e.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["two", "three"]);
    assert!(
        again.quiet_for(Duration::from_millis(500)).await,
        "an event came twice"
    );
    drop(again);

    // kill -9 of the operator's process after an acknowledged reply: the reply
    // is kept, and the session (in the database) goes on on another process.
    assert_eq!(
        operator_post(
            &b.base,
            &session,
            &format!("{desk}/messages"),
            json!({"text": "four"})
        )
        .await,
        200
    );
    b.kill();
    let c2 = Server::start(&s.replica_config(3), None).await;
    assert_eq!(
        operator_post(
            &c2.base,
            &session,
            &format!("{desk}/messages"),
            json!({"text": "five"})
        )
        .await,
        200
    );
    let history = c2.history(&token, &c).await;
    let replies: Vec<&str> = history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "operator")
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(replies, ["one", "two", "three", "four", "five"]);
    let mut last_channel =
        Channel::open(&c2.base, &token, &c, Some(&events[1].id.to_string())).await;
    let rest = last_channel.take(2, Duration::from_secs(15)).await;
    let texts: Vec<&str> = rest
        .iter()
        .map(|e| e.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["four", "five"]);
}

/// A process killed while an auto call runs; a person takes the conversation
/// before the process's work is recovered. The call is delivered again (its
/// outcome is owed), but the recovered turn asks the model nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_recovered_after_a_crash_does_not_answer_when_a_person_holds_the_conversation() {
    let s = crate::crash::harness::setup(on_postgres()).await;
    let server = Server::start(&s.config, None).await;
    let token = server.visitor().await;
    s.lookup_left_running(&server, &token).await;
    let db = s.db().await;
    let conversation: String = sqlx::query_scalar("SELECT id FROM conversations")
        .fetch_one(&db)
        .await
        .unwrap();
    server.kill();
    // An operator took the conversation meanwhile (through another replica).
    sqlx::query("UPDATE conversations SET holder = 'operator:ada@example.test', holder_since = 1 WHERE id = $1")
        .bind(&conversation)
        .execute(&db)
        .await
        .unwrap();
    let asked = s.llm.requests().len();
    s.llm.push(Script::text("The model must not say this."));
    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 2).await;
    s.wait_for_delivery("/lookup", 2).await;
    let answer = &history["messages"][1];
    assert_eq!(answer["text"], "Let me look. ", "{history}");
    assert_eq!(
        s.llm.requests().len(),
        asked,
        "the recovered turn asked the model"
    );
    assert_eq!(s.reserved().await, 0);
}
