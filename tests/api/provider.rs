//! When the model misbehaves (SPEC §5, §6.7): retries before the first token,
//! 503 when it cannot be reached, and a failed answer that keeps its text when it
//! breaks off mid-stream.

use std::time::Duration;

use deskbell::testkit::{Piece, Reply as Script};

use crate::support::TestApp;

#[tokio::test]
async fn transient_provider_errors_are_retried_before_the_first_token() {
    let t = TestApp::start().await;
    t.llm.push(Script::Status(500));
    t.llm.push(Script::Status(429));
    t.llm.push(Script::text("Third time lucky."));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Hello?").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "Third time lucky.");
    assert_eq!(t.llm.requests().len(), 3);
}

#[tokio::test]
async fn a_provider_that_keeps_failing_gives_503_provider_unavailable() {
    let t = TestApp::start().await;
    for _ in 0..3 {
        t.llm.push(Script::Status(503));
    }
    let token = t.visitor().await;
    let r = t.question(&token, None, "Hello?").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.code(), "provider_unavailable");
    assert_eq!(t.llm.requests().len(), 3, "one try and two retries");
}

#[tokio::test]
async fn an_unreachable_provider_gives_503_provider_unavailable() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let t = TestApp::with(|c| {
        c.llm.base_url = format!("http://{closed}/v1");
        c.llm.max_retries = 1;
    })
    .await;
    let token = t.visitor().await;
    let r = t.question(&token, None, "Anyone there?").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.code(), "provider_unavailable");
}

#[tokio::test]
async fn a_client_error_from_the_provider_is_not_retried() {
    let t = TestApp::start().await;
    t.llm.push(Script::Status(401));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Hello?").await;
    assert_eq!(r.status, 503);
    assert_eq!(t.llm.requests().len(), 1);
}

#[tokio::test]
async fn a_stalled_provider_times_out_with_503() {
    let t = TestApp::with(|c| {
        c.llm.idle_timeout_s = 0.3;
        c.llm.max_retries = 0;
    })
    .await;
    t.llm.push(Script::Stall);
    let token = t.visitor().await;
    let r = t.question(&token, None, "Hello?").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.code(), "provider_unavailable");
}

#[tokio::test]
async fn a_stream_cut_after_text_ends_failed_and_keeps_the_partial_answer() {
    let t = TestApp::start().await;
    t.llm.push(Script::Stream(vec![
        Piece::Text("Partial answ".into()),
        Piece::Cut,
    ]));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Go").await;
    assert_eq!(r.status, 200);
    let names = r.names();
    assert_eq!(&names[names.len() - 2..], ["error", "done"]);
    assert_eq!(r.event("error")["code"], "provider_error");
    assert_eq!(r.event("done")["status"], "failed");
    assert_eq!(t.llm.requests().len(), 1, "no retry once text was streamed");
    let h = t.history(&token, &r.conversation()).await;
    assert_eq!(h.json["messages"][1]["text"], "Partial answ");
    assert_eq!(h.json["messages"][1]["status"], "failed");
}

#[tokio::test]
async fn a_stream_that_stalls_mid_answer_times_out_as_failed() {
    let t = TestApp::with(|c| c.llm.idle_timeout_s = 0.3).await;
    t.llm.push(Script::Stream(vec![
        Piece::Text("Wait".into()),
        Piece::Pause(Duration::from_secs(5)),
        Piece::Text("!".into()),
    ]));
    let token = t.visitor().await;
    let r = t.question(&token, None, "Go").await;
    assert_eq!(r.event("done")["status"], "failed");
    assert_eq!(r.text(), "Wait");
}

/// `[llm] http2 = true` speaks HTTP/2 to an `http://` model server (h2c), so
/// every turn's stream shares one connection; by default it is HTTP/1.1.
#[tokio::test]
async fn a_model_server_is_spoken_to_in_http2_when_configured_and_http1_otherwise() {
    use axum::http::Version;
    let h1 = TestApp::start().await;
    let token = h1.visitor().await;
    assert_eq!(h1.question(&token, None, "hi").await.status, 200);
    assert_eq!(h1.llm.versions(), vec![Version::HTTP_11]);

    let h2 = TestApp::with(|c| c.llm.http2 = true).await;
    let (one, two) = (h2.visitor().await, h2.visitor().await);
    let (a, b) = tokio::join!(
        h2.question(&one, None, "one"),
        h2.question(&two, None, "two")
    );
    assert_eq!((a.status, b.status), (200, 200));
    assert_eq!(a.text(), "OK.");
    assert_eq!(h2.llm.versions(), vec![Version::HTTP_2, Version::HTTP_2]);
}
