//! Connection bounds (SPEC §10): caps in all and per client address with a clear
//! refusal, and no connection held without a request — before its first one on
//! HTTP/1.1 and HTTP/2 alike (slow-loris), or idle between requests.

use std::time::Duration;

use deskbell::testkit::{Piece, Reply as Script};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::TestApp;

/// Reads until the server closes the connection; `None` if it stays open.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let read = tokio::time::timeout(limit, stream.read_to_end(&mut seen)).await;
    read.ok().map(|_| seen)
}

async fn connect(t: &TestApp) -> TcpStream {
    TcpStream::connect(t.base.trim_start_matches("http://"))
        .await
        .unwrap()
}

#[tokio::test]
async fn an_http2_connection_that_sends_no_request_is_closed() {
    let t = TestApp::with(|c| c.server.header_read_timeout_s = 0.3).await;
    let mut h2c = connect(&t).await;
    // The HTTP/2 preface and an empty SETTINGS frame, then nothing.
    h2c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    assert!(
        closed_within(&mut h2c, Duration::from_secs(3))
            .await
            .is_some(),
        "the server closed the silent HTTP/2 connection"
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_but_a_long_answer_is_not() {
    let t = TestApp::with(|c| c.server.idle_timeout_s = 0.5).await;
    let mut idle = connect(&t).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = closed_within(&mut idle, Duration::from_secs(3)).await;
    let answer = String::from_utf8(answer.expect("closed once idle")).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // An answer that streams for longer than the idle timeout is not cut.
    let token = t.visitor().await;
    t.llm.push(Script::Stream(vec![
        Piece::Text("slow ".into()),
        Piece::Pause(Duration::from_millis(1500)),
        Piece::Text("but whole".into()),
    ]));
    let r = t.question(&token, None, "take your time").await;
    assert_eq!(r.event("done")["status"], "answered");
    assert_eq!(r.text(), "slow but whole");
}

#[tokio::test]
async fn connections_from_one_address_are_capped_with_a_clear_refusal() {
    let t = TestApp::with(|c| c.server.max_connections_per_ip = 3).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect(&t).await);
    }
    let mut fourth = connect(&t).await;
    let refusal = closed_within(&mut fourth, Duration::from_secs(3))
        .await
        .expect("refused and closed");
    let refusal = String::from_utf8(refusal).unwrap();
    assert!(refusal.starts_with("HTTP/1.1 503"), "{refusal}");
    assert!(refusal.contains("too_many_connections"), "{refusal}");
    assert!(
        refusal.to_lowercase().contains("retry-after: 5"),
        "{refusal}"
    );
    drop(held);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ok = t.http.get(format!("{}/healthz", t.base)).send().await;
    assert_eq!(ok.unwrap().status(), 200, "closing frees the places");
}

/// Sends one HTTP/1.1 request whose head carries `pad` bytes of one header, and
/// returns what the server answered before closing.
async fn answer_to_head_of(t: &TestApp, pad: usize) -> String {
    let mut c = connect(t).await;
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(pad)
    );
    c.write_all(request.as_bytes()).await.unwrap();
    let answer = closed_within(&mut c, Duration::from_secs(3))
        .await
        .expect("answered and closed");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_request_head_up_to_8_kib_is_served_and_a_larger_one_is_refused_with_431() {
    let t = TestApp::start().await;
    let served = answer_to_head_of(&t, 8_000).await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    let refused = answer_to_head_of(&t, 8_200).await;
    assert!(refused.starts_with("HTTP/1.1 431"), "{refused}");
    // The refusal is that request's alone: the next one is served.
    let after = answer_to_head_of(&t, 10).await;
    assert!(after.starts_with("HTTP/1.1 200"), "{after}");
}

#[tokio::test]
async fn an_operator_can_allow_larger_request_heads() {
    let t = TestApp::with(|c| c.server.max_request_head_kib = 16).await;
    let served = answer_to_head_of(&t, 12_000).await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    let refused = answer_to_head_of(&t, 16_500).await;
    assert!(refused.starts_with("HTTP/1.1 431"), "{refused}");
}

/// A model server that sends nothing for 70 s (it answers when its first token
/// is ready) with `turn_timeout_s = 120`: the ask's handler is still within its
/// own deadline, so the connection watchdog must not cut it, and the answer
/// arrives. (The watchdog used to cut any request without a response after
/// max(30 s, `idle_timeout_s`).)
#[tokio::test]
async fn a_first_token_after_seventy_seconds_is_answered_within_the_turn_timeout() {
    let t = TestApp::with(|c| {
        c.llm.turn_timeout_s = 120.0;
        c.llm.idle_timeout_s = 100.0;
    })
    .await;
    t.llm.set_head_delay(Duration::from_secs(70));
    t.llm.push(Script::text("Here it is."));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Are you there?").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.text(), "Here it is.");
    assert_eq!(r.all("done").last().unwrap()["status"], "answered");
}
