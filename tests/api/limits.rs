//! Rate limits, the daily budget and the stream caps (SPEC §5), and their
//! refusals with `Retry-After`.

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
    // Minting a visitor counts against the address too (SPEC §4): three mints and
    // two asks spend a limit of five.
    let t = TestApp::with(|c| c.sites[0].limits.requests_per_minute_per_ip = 5).await;
    let tokens = [t.visitor().await, t.visitor().await, t.visitor().await];
    for (i, token) in tokens[..2].iter().enumerate() {
        assert_eq!(
            t.question(token, None, &format!("hi {i}")).await.status,
            200
        );
    }
    let spoofed = t
        .http
        .post(format!("{}/v1/ask", t.base))
        .header("origin", ORIGIN)
        .header("x-forwarded-for", "198.51.100.7")
        .bearer_auth(&tokens[2])
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
        // Each visitor is minted from an address of its own behind the proxy.
        let minted: serde_json::Value = t
            .http
            .post(format!("{}/v1/visitors", t.base))
            .header("origin", ORIGIN)
            .header("x-forwarded-for", format!("203.0.113.{}", client.0))
            .json(&json!({"site": "acme"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let token = minted["token"].as_str().unwrap().to_string();
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
    assert_eq!(
        t.llm.requests().len(),
        2,
        "a question refused for the budget is not sent to the model (which may bill it)"
    );
    let now = deskbell::clock::Clock::now_ms(&*t.clock);
    assert_eq!(retry_after(&r), deskbell::budget::seconds_to_midnight(now));
    let day = deskbell::budget::utc_day(now);
    assert_eq!(t.app.store.budget().spent("acme", &day).await.unwrap(), 140);

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
    let spent = t.app.store.budget().spent("acme", &day).await.unwrap();
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

/// SPEC §5 orders the budget before the stream caps: a question that meets both
/// a spent budget and a full stream cap is told the budget is spent (questions
/// read the budget inside the turn, after taking their stream slot).
#[tokio::test]
async fn a_spent_budget_is_told_before_a_full_stream_cap() {
    let t = TestApp::with(|c| {
        c.sites[0].limits.daily_token_budget = 100;
        c.sites[0].limits.max_tokens_per_turn = 50;
        c.sites[0].limits.concurrent_streams_per_visitor = 1;
    })
    .await;
    let (alice, bob) = (t.visitor().await, t.visitor().await);
    // Alice's answer streams slowly; Bob's spends the day's budget meanwhile.
    t.llm.push(slow("slow", 600));
    t.llm.push(Script::Stream(vec![
        Piece::Text("ok".into()),
        Piece::Usage {
            input: 100,
            output: 40,
        },
    ]));
    let (a, (b, c)) = tokio::join!(t.question(&alice, None, "one"), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let b = t.question(&bob, None, "two").await;
        (b, t.question(&alice, None, "three").await)
    });
    assert_eq!((a.status, b.status), (200, 200));
    assert_eq!((c.status, c.code()), (429, "daily_budget_exhausted"));
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
        t.app.counters.open_streams("s|acme").await.unwrap(),
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

/// Two processes' group commits reserving one budget row at once: a batch takes
/// its row's shares in one statement when they all fit, one by one when they do
/// not, and either way exactly the starts that would have passed one after
/// another pass — here 4 of 10 shares of 30 under a budget of 100 (the fifth
/// sees 120 reserved), and all 10 under a budget of 1,000.
#[tokio::test(flavor = "multi_thread")]
async fn budget_reservations_batched_by_two_processes_pass_exactly_as_one_by_one() {
    use deskbell::states::Role;
    use deskbell::store::{BudgetShare, Reservation, TurnStart};
    let a = TestApp::start().await;
    let b = a.replica(|_| {}).await;
    for (day, limit, passing) in [("2026-01-01", 100, 4), ("2026-01-02", 1_000, 10)] {
        let start = |n: usize| {
            let conversation = deskbell::ids::new_id("c");
            TurnStart {
                is_new: true,
                site: "acme".into(),
                visitor: format!("v_{n}"),
                now: 1,
                visitor_message: crate::support::message_row(
                    &deskbell::ids::new_id("m"),
                    &conversation,
                    Role::Visitor,
                ),
                bubble: crate::support::message_row(
                    &deskbell::ids::new_id("m"),
                    &conversation,
                    Role::Assistant,
                ),
                conversation,
                budget: Some(BudgetShare {
                    site: "acme".into(),
                    day: day.into(),
                    reserved: 30,
                    limit,
                }),
            }
        };
        let starts = (0..10).map(|n| {
            let store = if n % 2 == 0 {
                &a.app.store
            } else {
                &b.app.store
            };
            store.turns().begin(start(n))
        });
        let results = futures_util::future::join_all(starts).await;
        let reserved = results
            .iter()
            .filter(|r| matches!(r, Ok(Reservation::Reserved)))
            .count();
        assert_eq!(reserved, passing, "{day}: {results:?}");
        let (saved,): (i64,) = sqlx::query_as(
            "SELECT CAST(reserved AS BIGINT) FROM budgets WHERE site = 'acme' AND day = $1",
        )
        .bind(day)
        .fetch_one(&a.db().await)
        .await
        .unwrap();
        assert_eq!(saved, 30 * passing as i64, "{day}");
    }
}

/// A daily budget smaller than a turn's cap: the turn reserves at most the
/// budget, so it starts no model round past it. (It used to reserve its whole
/// cap and run round after round far past the day's budget.)
#[tokio::test]
async fn a_turn_reserves_no_more_than_the_whole_daily_budget() {
    let t = TestApp::with(|c| {
        c.sites[0].limits.daily_token_budget = 100;
        c.sites[0].limits.max_tokens_per_turn = 1_000;
    })
    .await;
    let token = t.visitor().await;
    t.llm.push(Script::Stream(vec![
        Piece::ToolCall {
            id: "c1".into(),
            name: "lookup_order".into(),
            arguments: r#"{"order_id":42}"#.into(),
        },
        Piece::Usage {
            input: 70,
            output: 40,
        },
    ]));
    t.llm.push(Script::text("Never asked for."));
    let r = t.question(&token, None, "Where is order 42?").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(t.llm.requests().len(), 1, "no model round past the budget");
    let day = deskbell::budget::utc_day(deskbell::clock::Clock::now_ms(&*t.clock));
    assert_eq!(t.app.store.budget().spent("acme", &day).await.unwrap(), 110);
    assert_eq!(
        t.question(&token, None, "And now?").await.code(),
        "daily_budget_exhausted"
    );
}
