use serde_json::json;

use crate::support::{ORIGIN, TestApp};

fn forge(token: &str) -> String {
    let mut parts: Vec<String> = token.split('.').map(String::from).collect();
    let tag = parts[2].clone();
    let flipped = if tag.starts_with('A') {
        tag.replacen('A', "B", 1)
    } else {
        format!("A{}", &tag[1..])
    };
    parts[2] = flipped;
    parts.join(".")
}

#[tokio::test]
async fn a_missing_or_unlisted_origin_is_refused_before_anything_else() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let body = json!({"message": "hi"}).to_string();
    for origin in [
        None,
        Some("https://evil.example"),
        Some("http://shop.example"),
        Some("https://shop.example:444"),
    ] {
        let r = t
            .post_raw("/v1/ask", Some(&token), origin, body.clone())
            .await;
        assert_eq!(
            (r.status, r.code()),
            (403, "origin_not_allowed"),
            "{origin:?}"
        );
    }
    // Even a malformed body or a missing token is refused for its origin first.
    let r = t
        .post_raw("/v1/ask", None, Some("https://evil.example"), "{".into())
        .await;
    assert_eq!(r.code(), "origin_not_allowed");
    assert!(t.llm.requests().is_empty());
}

#[tokio::test]
async fn missing_malformed_forged_and_foreign_tokens_get_401() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let other_site = t.visitor_for("other").await;
    let foreign_deployment = {
        let keys = deskbell::secret::Keys::derive(&deskbell::secret::Secret::new(
            "some-other-deployments-secret-0123456789",
        ));
        let claims = deskbell::visitor::token::Claims {
            site: "acme".into(),
            visitor: "v_x".into(),
            user_id: None,
            issued_at: 0,
        };
        deskbell::visitor::token::issue(&keys.visitor_tokens, &claims)
    };
    let body = json!({"message": "hi"}).to_string();
    let missing = t
        .post_raw("/v1/ask", None, Some(ORIGIN), body.clone())
        .await;
    assert_eq!(
        (missing.status, missing.code()),
        (401, "invalid_visitor_token")
    );
    for bad in [
        "garbage",
        "dbv1.e30.",
        "dbv1..",
        &forge(&token),
        &other_site,
        &foreign_deployment,
    ] {
        let r = t
            .post_raw("/v1/ask", Some(bad), Some(ORIGIN), body.clone())
            .await;
        assert_eq!(
            (r.status, r.code()),
            (401, "invalid_visitor_token"),
            "{bad}"
        );
        let h = t.history(bad, "c_00000000000000000000000000000000").await;
        assert_eq!(h.status, 401, "{bad}");
    }
}

#[tokio::test]
async fn cors_preflights_are_answered_for_listed_origins_only() {
    let t = TestApp::start().await;
    let preflight = |origin: &'static str| {
        t.http
            .request(reqwest::Method::OPTIONS, format!("{}/v1/ask", t.base))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .send()
    };
    let ok = preflight(ORIGIN).await.unwrap();
    assert_eq!(ok.headers()["access-control-allow-origin"], ORIGIN);
    let allowed_headers = ok.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(allowed_headers.contains("authorization") && allowed_headers.contains("content-type"));
    let evil = preflight("https://evil.example").await.unwrap();
    assert!(evil.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn a_site_that_requires_verified_identity_refuses_anonymous_visitors() {
    let t = TestApp::with(|c| c.sites[0].require_verified_identity = true).await;
    let anonymous = t.visitor().await;
    let r = t.question(&anonymous, None, "hi").await;
    assert_eq!((r.status, r.code()), (403, "identity_invalid"));
    let v = t.verified_visitor("user-7").await;
    let verified = v.json["token"].as_str().unwrap();
    assert_eq!(t.question(verified, None, "hi").await.status, 200);
}

mod limits {
    use std::time::Duration;

    use deskbell::testkit::{Piece, Reply as Script};
    use serde_json::json;

    use crate::support::{ORIGIN, TestApp};

    fn slow(text: &str, ms: u64) -> Script {
        Script::Stream(vec![
            Piece::Text(text.into()),
            Piece::Pause(Duration::from_millis(ms)),
            Piece::Text(".".into()),
        ])
    }

    fn retry_after(r: &crate::support::Reply) -> u64 {
        r.headers["retry-after"].to_str().unwrap().parse().unwrap()
    }

    #[tokio::test]
    async fn a_visitor_over_the_rate_limit_gets_429_with_retry_after() {
        let t = TestApp::with(|c| c.sites[0].limits.requests_per_minute = 3).await;
        let token = t.visitor().await;
        for _ in 0..3 {
            assert_eq!(t.question(&token, None, "hi").await.status, 200);
        }
        let r = t.question(&token, None, "hi").await;
        assert_eq!((r.status, r.code()), (429, "rate_limited"));
        assert_eq!(retry_after(&r), 20);
        assert_eq!(
            t.llm.requests().len(),
            3,
            "a refusal never reaches the model"
        );
        t.clock.advance_ms(19_000);
        assert_eq!(retry_after(&t.question(&token, None, "hi").await), 1);
        t.clock.advance_ms(1_000);
        assert_eq!(t.question(&token, None, "hi").await.status, 200);
        let other = t.visitor().await;
        assert_eq!(
            t.question(&other, None, "hi").await.status,
            200,
            "limits are per visitor"
        );
    }

    #[tokio::test]
    async fn an_answer_to_a_card_counts_against_the_rate_limit() {
        let t = TestApp::with(|c| c.sites[0].limits.requests_per_minute = 1).await;
        let token = t.visitor().await;
        let (conversation, card) = t.raise_card(&token).await;
        let refused = t.answer(&token, &conversation, &card, "confirm").await;
        assert_eq!((refused.status, refused.code()), (429, "rate_limited"));
        assert!(t.hook.calls().is_empty());
        t.clock.advance_ms(60_000);
        assert_eq!(
            t.answer(&token, &conversation, &card, "confirm")
                .await
                .status,
            200
        );
        assert_eq!(t.hook.calls().len(), 1);
    }

    #[tokio::test]
    async fn the_per_ip_limit_holds_across_visitors_and_ignores_untrusted_forwarding() {
        let t = TestApp::with(|c| c.sites[0].limits.requests_per_minute_per_ip = 2).await;
        for i in 0..2 {
            let token = t.visitor().await;
            assert_eq!(
                t.question(&token, None, &format!("hi {i}")).await.status,
                200
            );
        }
        let token = t.visitor().await;
        let spoofed = t
            .http
            .post(format!("{}/v1/ask", t.base))
            .header("origin", ORIGIN)
            .header("x-forwarded-for", "198.51.100.7")
            .bearer_auth(&token)
            .json(&json!({"message": "hi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            spoofed.status(),
            429,
            "X-Forwarded-For from an untrusted peer is ignored"
        );
    }

    #[tokio::test]
    async fn behind_a_trusted_proxy_the_forwarded_address_is_the_client() {
        let t = TestApp::with(|c| {
            c.sites[0].limits.requests_per_minute_per_ip = 1;
            c.server.trusted_proxies = vec!["127.0.0.1".into()];
        })
        .await;
        for client in ["198.51.100.1", "198.51.100.2", "198.51.100.2"]
            .iter()
            .enumerate()
        {
            let token = t.visitor().await;
            let r = t
                .http
                .post(format!("{}/v1/ask", t.base))
                .header("origin", ORIGIN)
                .header("x-forwarded-for", *client.1)
                .bearer_auth(&token)
                .json(&json!({"message": "hi"}))
                .send()
                .await
                .unwrap();
            let expected = if client.0 < 2 { 200 } else { 429 };
            assert_eq!(r.status(), expected, "{client:?}");
        }
    }

    #[tokio::test]
    async fn a_spent_daily_budget_refuses_turns_until_midnight_utc_and_survives_a_restart() {
        let t = TestApp::with(|c| {
            c.sites[0].limits.daily_token_budget = 100;
            c.sites[0].limits.max_tokens_per_turn = 50;
        })
        .await;
        let token = t.visitor().await;
        for _ in 0..2 {
            t.llm.push(Script::Stream(vec![
                Piece::Text("ok".into()),
                Piece::Usage {
                    input: 40,
                    output: 30,
                },
            ]));
            assert_eq!(t.question(&token, None, "hi").await.status, 200);
        }
        let r = t.question(&token, None, "hi").await;
        assert_eq!((r.status, r.code()), (429, "daily_budget_exhausted"));
        let now = deskbell::clock::Clock::now_ms(&*t.clock);
        assert_eq!(retry_after(&r), deskbell::budget::seconds_to_midnight(now));
        let day = deskbell::budget::utc_day(now);
        assert_eq!(t.app.store.budget_spent("acme", &day).await.unwrap(), 140);

        let restarted = t
            .replica(|c| {
                c.sites[0].limits.daily_token_budget = 100;
            })
            .await;
        assert_eq!(
            restarted.question(&token, None, "hi").await.code(),
            "daily_budget_exhausted"
        );
        t.clock.advance_ms(retry_after(&r) as i64 * 1000);
        assert_eq!(
            restarted.question(&token, None, "hi").await.status,
            200,
            "a new UTC day, a new budget"
        );
    }

    #[tokio::test]
    async fn an_answer_to_a_card_is_refused_when_the_budget_is_spent() {
        let t = TestApp::with(|c| {
            c.sites[0].limits.daily_token_budget = 60;
            c.sites[0].limits.max_tokens_per_turn = 50;
        })
        .await;
        let token = t.visitor().await;
        t.llm.push(Script::Stream(vec![
            Piece::ToolCall {
                id: "c1".into(),
                name: "cancel_order".into(),
                arguments: r#"{"order_id":42}"#.into(),
            },
            Piece::Usage {
                input: 50,
                output: 20,
            },
        ]));
        let r = t.question(&token, None, "Cancel 42").await;
        let refused = t
            .answer(&token, &r.conversation(), r.event("confirm"), "confirm")
            .await;
        assert_eq!(
            (refused.status, refused.code()),
            (429, "daily_budget_exhausted")
        );
        assert!(t.hook.calls().is_empty());
    }

    #[tokio::test]
    async fn turns_running_at_once_overshoot_the_budget_by_at_most_one_turns_cap() {
        let t = TestApp::with(|c| {
            c.sites[0].limits.daily_token_budget = 100;
            c.sites[0].limits.max_tokens_per_turn = 50;
        })
        .await;
        let mut tokens = Vec::new();
        for _ in 0..10 {
            tokens.push(t.visitor().await);
            t.llm.push(Script::Stream(vec![
                Piece::Text("a".into()),
                Piece::Pause(Duration::from_millis(200)),
                Piece::Usage {
                    input: 25,
                    output: 25,
                },
            ]));
        }
        let asks = tokens.iter().map(|token| t.question(token, None, "hi"));
        let replies = futures_util::future::join_all(asks).await;
        let admitted = replies.iter().filter(|r| r.status == 200).count();
        // Nothing was spent when they were refused: the other turns' reservations
        // stood in the way, which is a moment's wait, not "come back tomorrow".
        assert!(
            replies
                .iter()
                .all(|r| r.status == 200 || r.code() == "too_many_streams")
        );
        let day = deskbell::budget::utc_day(deskbell::clock::Clock::now_ms(&*t.clock));
        let spent = t.app.store.budget_spent("acme", &day).await.unwrap();
        assert!(spent <= 100 + 50, "spent {spent}");
        assert_eq!(spent, 50 * admitted as i64);
        assert!(admitted >= 2);
    }

    #[tokio::test]
    async fn a_visitor_may_stream_only_so_many_answers_at_once() {
        let t = TestApp::with(|c| c.sites[0].limits.concurrent_streams_per_visitor = 1).await;
        let token = t.visitor().await;
        t.llm.push(slow("slow", 400));
        let (first, second) = tokio::join!(t.question(&token, None, "one"), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            t.question(&token, None, "two").await
        });
        assert_eq!(first.status, 200);
        assert_eq!((second.status, second.code()), (429, "too_many_streams"));
        assert!(retry_after(&second) >= 1);
        t.settle().await;
        assert_eq!(
            t.question(&token, None, "three").await.status,
            200,
            "the slot came back"
        );
        let other = t.visitor().await;
        t.llm.push(slow("slow", 300));
        let (a, b) = tokio::join!(t.question(&token, None, "mine"), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            t.question(&other, None, "theirs").await
        });
        assert_eq!((a.status, b.status), (200, 200), "the cap is per visitor");
    }

    #[tokio::test]
    async fn the_site_wide_stream_cap_holds_across_visitors() {
        let t = TestApp::with(|c| c.sites[0].limits.concurrent_streams = 1).await;
        let (alice, bob) = (t.visitor().await, t.visitor().await);
        t.llm.push(slow("slow", 400));
        let (a, b) = tokio::join!(t.question(&alice, None, "one"), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            t.question(&bob, None, "two").await
        });
        assert_eq!((a.status, b.code()), (200, "too_many_streams"));
    }

    #[tokio::test]
    async fn a_stream_slot_is_freed_when_the_client_leaves_or_the_provider_fails() {
        let t = TestApp::with(|c| c.sites[0].limits.concurrent_streams_per_visitor = 1).await;
        let token = t.visitor().await;
        t.llm.push(slow("bye", 200));
        let response = t
            .http
            .post(format!("{}/v1/ask", t.base))
            .header("origin", ORIGIN)
            .bearer_auth(&token)
            .json(&json!({"message": "hi"}))
            .send()
            .await
            .unwrap();
        drop(response);
        tokio::time::sleep(Duration::from_millis(50)).await;
        t.settle().await;
        assert_eq!(
            t.app.counters.open_streams("s|acme"),
            0,
            "every slot of the site is free again"
        );
        t.llm.push(Script::Stream(vec![
            Piece::Text("broken".into()),
            Piece::Cut,
        ]));
        assert_eq!(
            t.question(&token, None, "again").await.event("done")["status"],
            "failed"
        );
        t.settle().await;
        assert_eq!(t.question(&token, None, "and again").await.status, 200);
    }

    #[tokio::test]
    async fn an_answer_to_a_card_takes_a_stream_slot_too() {
        let t = TestApp::with(|c| c.sites[0].limits.concurrent_streams_per_visitor = 1).await;
        let token = t.visitor().await;
        t.llm.push(Script::tool_calls(&[(
            "cancel_order",
            json!({"order_id": 42}),
        )]));
        let r = t.question(&token, None, "Cancel 42").await;
        t.llm.push(slow("slow", 400));
        let (_, answer) = tokio::join!(t.question(&token, None, "meanwhile"), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            t.answer(&token, &r.conversation(), r.event("confirm"), "confirm")
                .await
        });
        assert_eq!((answer.status, answer.code()), (429, "too_many_streams"));
        assert!(t.hook.calls().is_empty());
    }
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t = TestApp::with(|c| c.server.header_read_timeout_s = 0.3).await;
    let addr = t.base.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"POST /v1/ask HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        slow.read_to_end(&mut buf),
    )
    .await;
    assert!(read.is_ok(), "the server closed the connection");
    // Healthy clients are unaffected.
    assert_eq!(
        t.http
            .get(format!("{}/healthz", t.base))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}
