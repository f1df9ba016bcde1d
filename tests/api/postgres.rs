//! The same guarantees on PostgreSQL: each test gets a fresh database on the server
//! named by DESKBELL_TEST_POSTGRES (default: the local server, trust auth).

use std::sync::Arc;

use deskbell::clock::ManualClock;
use deskbell::testkit::{FakeLlm, Reply as Script, Webhook};
use serde_json::json;

use crate::support::TestApp;

async fn start_on_postgres() -> TestApp {
    start_on_postgres_with(crate::support::for_racing).await
}

/// An app on a fresh PostgreSQL database whose configuration `edit` may change.
pub async fn start_on_postgres_with(edit: impl FnOnce(&mut deskbell::config::Config)) -> TestApp {
    let url = crate::support::fresh_postgres_database().await;
    let llm = FakeLlm::start().await.unwrap();
    let hook = Webhook::start().await.unwrap();
    TestApp::on(
        url,
        None,
        llm,
        hook,
        Arc::new(ManualClock::starting_now()),
        None,
        edit,
    )
    .await
}

#[tokio::test]
async fn the_confirmation_flow_works_on_postgresql() {
    let t = start_on_postgres().await;
    let token = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "cancel_order",
        json!({"order_id": 42}),
    )]));
    let r = t.question(&token, None, "Cancel 42").await;
    let conversation = r.conversation();
    let card = r.event("confirm").clone();
    t.llm.push(Script::text("Cancelled [1]."));
    let done = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!(done.event("done")["status"], "answered");
    assert_eq!(t.hook.calls().len(), 1);
    assert_eq!(
        t.audit_events(card["call"].as_str().unwrap()).await,
        ["requested", "confirmed", "executed"]
    );
    let h = t.history(&token, &conversation).await.json;
    assert_eq!(h["messages"].as_array().unwrap().len(), 3);
    assert_eq!(h["messages"][1]["steps"][0]["status"], "confirmed");
    let replay = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!(replay.status, 409);
}

#[tokio::test]
async fn replicas_sharing_postgresql_run_a_confirmed_call_once() {
    let t = start_on_postgres().await;
    let replica = t.replica(crate::support::for_racing).await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    let answers = (0..30).map(|i| {
        if i % 2 == 0 { &t } else { &replica }.answer(&token, &conversation, &card, "confirm")
    });
    let replies = futures_util::future::join_all(answers).await;
    assert_eq!(replies.iter().filter(|r| r.status == 200).count(), 1);
    assert_eq!(replies.iter().filter(|r| r.status == 409).count(), 29);
    t.settle().await;
    replica.settle().await;
    assert_eq!(t.hook.calls().len(), 1);
}

#[tokio::test]
async fn verified_visitors_and_the_append_only_audit_hold_on_postgresql() {
    let t = start_on_postgres().await;
    let body =
        json!({"site": "acme", "user_id": "u1", "user_hash": crate::support::user_hash("u1")});
    let a = t.post("/v1/visitors", None, crate::support::ORIGIN, body.clone());
    let b = t.post("/v1/visitors", None, crate::support::ORIGIN, body);
    let (a, b) = tokio::join!(a, b);
    assert_eq!(
        a.json["visitor"], b.json["visitor"],
        "racing devices get one visitor"
    );
    let token = a.json["token"].as_str().unwrap();
    t.llm.push(Script::tool_calls(&[(
        "cancel_order",
        json!({"order_id": 1}),
    )]));
    t.question(token, None, "Cancel 1").await;
    t.assert_audit_is_append_only().await;
}

/// Every write of a turn takes its locks in one order (budget, call, audit,
/// messages): an answer to a card racing a new question in the same conversation
/// waits for the other instead of deadlocking (which PostgreSQL breaks with an
/// error, a 500 for one of them).
#[tokio::test]
async fn answers_racing_new_questions_in_one_conversation_never_deadlock() {
    let t = start_on_postgres().await;
    let token = t.visitor().await;
    for _ in 0..12 {
        // Both continuations take the scripted model's default answer, so a
        // lost race leaves no scripted reply behind for the next round.
        let (conversation, card) = t.raise_card(&token).await;
        let (answer, question) = tokio::join!(
            t.answer(&token, &conversation, &card, "confirm"),
            t.question(&token, Some(&conversation), "Something else")
        );
        assert!(
            matches!(answer.status, 200 | 409),
            "answer: {} {:?}",
            answer.status,
            answer.json
        );
        assert_eq!(question.status, 200, "question: {:?}", question.json);
    }
}

/// Turns' starts are committed together; one that fails (here: a message id
/// already taken) fails alone, and every other start of its batch is saved.
#[tokio::test]
async fn a_failing_start_in_a_group_commit_fails_alone() {
    use deskbell::states::Role;
    use deskbell::store::TurnStart;
    let t = crate::support::TestApp::start().await;
    let message = crate::support::message_row;
    let start = |n: usize, taken: bool| {
        let conversation = format!("c_{n:032x}");
        let visitor_id = if taken {
            "m_taken".to_string()
        } else {
            format!("m_v{n}")
        };
        TurnStart {
            conversation: conversation.clone(),
            is_new: true,
            site: "acme".into(),
            visitor: "v_x".into(),
            now: 1,
            visitor_message: message(&visitor_id, &conversation, Role::Visitor),
            bubble: message(&format!("m_b{n}"), &conversation, Role::Assistant),
            budget: None,
        }
    };
    t.app.store.turns().begin(start(0, true)).await.unwrap();
    let starts = (1..=20).map(|n| t.app.store.turns().begin(start(n, n == 10)));
    let results = futures_util::future::join_all(starts).await;
    for (i, r) in results.iter().enumerate() {
        let n = i + 1;
        assert_eq!(r.is_err(), n == 10, "start {n}: {r:?}");
    }
    let pool = t.db().await;
    let (saved,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM conversations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        saved, 20,
        "the first and the nineteen good ones of the batch"
    );
}

/// The expiry sweep is one replica's duty at a time: a second process cannot
/// take it while the first holds it, and takes it over once the hold lapses.
#[tokio::test]
async fn a_duty_is_held_by_one_process_until_its_hold_lapses() {
    let a = crate::support::TestApp::start().await;
    let b = a.replica(|_| {}).await;
    assert!(
        a.app
            .store
            .leases()
            .hold_duty("test_duty", 1_000)
            .await
            .unwrap()
    );
    assert!(
        !b.app
            .store
            .leases()
            .hold_duty("test_duty", 1_000)
            .await
            .unwrap(),
        "held by a"
    );
    assert!(
        a.app
            .store
            .leases()
            .hold_duty("test_duty", 1_000)
            .await
            .unwrap(),
        "a renews its own"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    assert!(
        b.app
            .store
            .leases()
            .hold_duty("test_duty", 1_000)
            .await
            .unwrap(),
        "lapsed: b takes it"
    );
    assert!(
        !a.app
            .store
            .leases()
            .hold_duty("test_duty", 1_000)
            .await
            .unwrap()
    );
}

/// Every connection to PostgreSQL sends at once (`TCP_NODELAY`, patched into
/// sqlx-core: `vendor/README.md`). Without it, a message longer than one TCP
/// segment waited for the server's delayed ACK, 40 ms or more.
#[tokio::test]
async fn connections_to_postgresql_send_without_waiting_for_acks() {
    let t = start_on_postgres().await;
    let token = t.visitor().await;
    t.llm.push(Script::text("Hello."));
    assert_eq!(t.question(&token, None, "Hi").await.status, 200);
    let server = std::env::var("DESKBELL_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
    let port = reqwest::Url::parse(&server).unwrap().port().unwrap_or(5432);
    let mut checked = 0;
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if !std::fs::read_link(entry.path())
            .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        {
            continue;
        }
        // SAFETY: the descriptor is only borrowed to read its options; another
        // test may close it meanwhile, and then the calls below fail and it is
        // skipped.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&fd);
        let Some(peer) = socket.peer_addr().ok().and_then(|a| a.as_socket()) else {
            continue;
        };
        if peer.port() != port {
            continue;
        }
        let Ok(nodelay) = socket.tcp_nodelay() else {
            continue;
        };
        assert!(
            nodelay,
            "a connection to PostgreSQL at {peer} waits for ACKs (Nagle)"
        );
        checked += 1;
    }
    assert!(
        checked > 0,
        "no connection to PostgreSQL was found to check"
    );
}

/// A pooled connection is pinged only after a second idle (`PING_AFTER_IDLE`),
/// not before every query; one that PostgreSQL dropped while it sat idle is
/// still replaced, never handed to a question. A restart (SQLSTATE 57P01) met
/// on a connection used a moment ago is a 503 to retry, not a 500.
#[tokio::test]
async fn connections_postgresql_dropped_while_idle_are_replaced() {
    let t = start_on_postgres().await;
    let token = t.visitor().await;
    t.llm.push(Script::text("Hello."));
    let first = t.question(&token, None, "Hi").await;
    assert_eq!(first.status, 200);
    let (server, name) = t.database_url.rsplit_once('/').unwrap();
    let admin = sqlx::AnyPool::connect(&format!("{server}/postgres"))
        .await
        .unwrap();
    let dropped = sqlx::query(
        "SELECT pg_terminate_backend(pid) AS gone FROM pg_stat_activity \
         WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(name)
    .fetch_all(&admin)
    .await
    .unwrap();
    admin.close().await;
    assert!(!dropped.is_empty(), "the app held no connection to drop");
    // At once, a connection used within the last second is not checked: a
    // question that meets a dropped one is told to retry, never given a 500.
    t.llm.push(Script::text("Hello at once."));
    let at_once = t.question(&token, None, "Hi at once").await;
    match at_once.status {
        200 => {}
        503 => {
            assert_eq!(at_once.code(), "service_unavailable");
            // Refused before the model was asked: its scripted reply is left
            // for the next question, which only needs an answer.
            assert!(at_once.headers.contains_key("retry-after"));
        }
        other => panic!("{other}: {}", at_once.json),
    }
    // Past the idle time after which a connection is checked before use.
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    t.llm.push(Script::text("Hello again."));
    let again = t.question(&token, None, "Hi again").await;
    assert_eq!(again.status, 200, "{}", again.json);
    assert_eq!(again.event("done")["status"], "answered");
    let history = t.history(&token, &again.conversation()).await;
    assert_eq!(history.status, 200);
}

/// PostgreSQL reads an unquoted NULL in an array (how the group commit's
/// columns mean a missing value there) as missing only while `array_nulls` is
/// on. A database set otherwise still gets a batch's missing values as
/// missing, not as the word, because every connection of the store sets it.
#[tokio::test]
async fn a_batchs_missing_values_stay_missing_where_the_database_reads_null_as_a_word() {
    use deskbell::states::Role;
    use deskbell::store::{Durability, Reservation, Store, TurnStart};
    use sqlx::Row;
    let url = crate::support::fresh_postgres_database().await;
    let admin = sqlx::AnyPool::connect(&url).await.unwrap();
    let name: String = sqlx::query("SELECT current_database()::text AS name")
        .fetch_one(&admin)
        .await
        .unwrap()
        .get("name");
    let alter = format!("ALTER DATABASE \"{name}\" SET array_nulls = off");
    sqlx::query(sqlx::AssertSqlSafe(alter))
        .execute(&admin)
        .await
        .unwrap();
    let store = Store::connect(&url, Durability::default()).await.unwrap();
    let conversation = deskbell::ids::new_id("c");
    let message =
        |role| crate::support::message_row(&deskbell::ids::new_id("m"), &conversation, role);
    let asked = message(Role::Visitor);
    let id = asked.id.clone();
    let start = TurnStart {
        conversation: conversation.clone(),
        is_new: true,
        site: "acme".into(),
        visitor: "v_x".into(),
        now: 1,
        visitor_message: asked,
        bubble: message(Role::Assistant),
        budget: None,
    };
    let begun = store.turns().write_batch(&[], &[start]).await.unwrap();
    assert_eq!(begun, [Reservation::Reserved]);
    let db = sqlx::AnyPool::connect(&url).await.unwrap();
    let row = sqlx::query("SELECT citations, owner, author FROM messages WHERE id = $1")
        .bind(id)
        .fetch_one(&db)
        .await
        .unwrap();
    for column in ["citations", "owner", "author"] {
        assert_eq!(row.get::<Option<String>, _>(column), None, "{column}");
    }
}
