//! What a turn may hold and for how long (SPEC §5): the budget is no hidden
//! concurrency cap, unreported usage is charged, a client that stops reading
//! frees its turn, and every turn ends within its timeout.

use std::time::Duration;

use deskbell::testkit::{Piece, Reply as Script};
use serde_json::json;

use crate::support::{TestApp, for_racing};

#[tokio::test]
async fn only_other_turns_reservations_are_a_short_wait_not_an_exhausted_budget() {
    let t = TestApp::with(|c| {
        for_racing(c);
        c.sites[0].limits.daily_token_budget = 200_000;
        c.sites[0].limits.max_tokens_per_turn = 20_000;
    })
    .await;
    let mut tokens = Vec::new();
    for _ in 0..11 {
        tokens.push(t.visitor().await);
        t.llm.push(Script::Stream(vec![
            Piece::Text("a".into()),
            Piece::Pause(Duration::from_millis(500)),
        ]));
    }
    let asks = tokens.iter().map(|token| t.question(token, None, "hi"));
    let replies = futures_util::future::join_all(asks).await;
    let refused: Vec<_> = replies.iter().filter(|r| r.status != 200).collect();
    assert_eq!(refused.len(), 1, "ten turns fit the budget's reservations");
    assert_eq!(refused[0].code(), "too_many_streams");
    let retry: u64 = refused[0].headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry <= 5, "a few seconds, not until midnight: {retry}");
    // Once those turns settle, what they spent is far below the budget.
    t.llm.push(Script::text("fine"));
    let again = t.question(&tokens[10], None, "hi again").await;
    assert_eq!(again.status, 200, "{:?}", again.json);
}

#[tokio::test]
async fn a_turn_whose_provider_reports_no_usage_is_charged_an_estimate() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.llm.push(Script::Stream(vec![
        Piece::NoUsage,
        Piece::Text("An answer with no usage chunk after it.".into()),
    ]));
    let r = t.question(&token, None, "hi").await;
    assert_eq!(r.event("done")["status"], "answered");
    let day = deskbell::budget::utc_day(deskbell::clock::Clock::now_ms(&*t.clock));
    let spent = t.app.store.budget().spent("acme", &day).await.unwrap();
    assert!(spent > 10, "an estimate was charged, not zero: {spent}");
}

#[tokio::test]
async fn a_client_that_stops_reading_frees_its_turn_and_the_answer_is_saved() {
    use tokio::io::AsyncWriteExt;
    let t = TestApp::with(|c| {
        c.server.stalled_reader_timeout_s = 1.0;
        c.sites[0].limits.concurrent_streams_per_visitor = 1;
    })
    .await;
    let token = t.visitor().await;
    // Far more than the socket buffers hold: 24 MiB in 64 KiB deltas.
    let block = "x".repeat(64 * 1024);
    t.llm.push(Script::Stream(
        (0..384).map(|_| Piece::Chunk(block.clone())).collect(),
    ));
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let addr = t.base.trim_start_matches("http://").parse().unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let body = json!({"message": "tell me everything"}).to_string();
    let request = format!(
        "POST /v1/ask HTTP/1.1\r\nHost: x\r\nOrigin: {}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        crate::support::ORIGIN,
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    for _ in 0..200 {
        if !t.app.turns.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!t.app.turns.is_empty(), "the turn started");
    // The client never reads. Within a few seconds the turn is over anyway.
    for _ in 0..300 {
        if t.app.turns.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(t.app.turns.is_empty(), "the turn was pinned by its reader");
    t.llm.push(Script::text("next"));
    let next = t.question(&token, None, "are you there?").await;
    assert_eq!(
        next.status, 200,
        "the stream slot was given back: {:?}",
        next.json
    );
    let conversations =
        sqlx::query("SELECT text FROM messages WHERE role = 'assistant' AND status = 'answered'")
            .fetch_all(&t.db().await)
            .await
            .unwrap();
    assert_eq!(conversations.len(), 2, "the unread answer was saved too");
    drop(stream);
}

#[tokio::test]
async fn every_turn_ends_within_the_turn_timeout() {
    let t = TestApp::with(|c| c.llm.turn_timeout_s = 1.0).await;
    let token = t.visitor().await;
    // A model that keeps dripping text, never idle for long enough to stall.
    let mut drip = Vec::new();
    for _ in 0..20 {
        drip.push(Piece::Text("drip ".into()));
        drip.push(Piece::Pause(Duration::from_millis(300)));
    }
    t.llm.push(Script::Stream(drip));
    let started = std::time::Instant::now();
    let r = t.question(&token, None, "hi").await;
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_eq!(r.event("error")["code"], "turn_timeout");
    assert_eq!(r.event("done")["status"], "failed");
    let history = t.history(&token, &r.conversation()).await;
    assert_eq!(history.json["messages"][1]["status"], "failed");
    assert!(
        history.json["messages"][1]["text"]
            .as_str()
            .unwrap()
            .starts_with("drip")
    );
}

/// A tool slower than the turn's time is cut at the turn's deadline: the call is a
/// failed `timeout`, the model is not asked again past it, and the turn ends.
#[tokio::test]
async fn a_tool_slower_than_the_turn_is_cut_at_its_deadline() {
    let t = TestApp::with(|c| {
        c.llm.turn_timeout_s = 1.0;
        c.sites[0].tools[0].timeout_s = 30.0;
    })
    .await;
    let token = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 1}),
    )]));
    t.hook.push(deskbell::testkit::HookReply {
        status: 200,
        body: "{}".into(),
        delay: Duration::from_secs(20),
    });
    let started = std::time::Instant::now();
    let r = t.question(&token, None, "Where is order 1?").await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.event("done")["status"], "failed", "{:?}", r.events);
    let failures: Vec<_> = t
        .audit()
        .await
        .into_iter()
        .filter(|a| a.event.as_str() == "failed")
        .map(|a| a.reason.map(|r| r.as_str()))
        .collect();
    assert_eq!(failures, [Some("timeout")]);
}
