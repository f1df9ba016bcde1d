//! Replicas behind a real load balancer (SPEC §16): every guarantee holds across
//! `deskbell serve` processes sharing one PostgreSQL database and one Redis, with
//! HAProxy in front as an operator would run them.

use std::time::Duration;

use deskbell::testkit::{Piece, Reply as Script};
use serde_json::json;

pub(crate) mod cluster;
use cluster::Cluster;

use crate::crash::harness::hanging;
use crate::support::RedisChild;

fn slow(ms: u64) -> Script {
    Script::Stream(vec![
        Piece::Text("Let me see".into()),
        Piece::Pause(Duration::from_millis(ms)),
        Piece::Text(".".into()),
    ])
}

#[tokio::test]
async fn a_visitors_limit_holds_exactly_across_replicas_behind_the_balancer() {
    // The per-visitor stream cap is raised so that only the rate limit refuses
    // these asks, which all race at once over the three replicas.
    let c = Cluster::start(
        3,
        None,
        "[site.limits]\nrequests_per_minute = 7\nconcurrent_streams_per_visitor = 20",
        &[],
    )
    .await;
    let token = c.visitor().await;
    for _ in 0..10 {
        c.setup.llm.push(Script::text("Hello."));
    }
    let asks = (0..10).map(|_| c.ask(&token, json!({"message": "Hi"})));
    let replies = futures_util::future::join_all(asks).await;
    let mut accepted = 0;
    let mut limited = 0;
    for r in &replies {
        match r.status {
            200 => accepted += 1,
            429 => {
                assert_eq!(r.code(), "rate_limited", "{:?}", r.json);
                assert!(r.headers.contains_key("retry-after"));
                limited += 1;
            }
            other => panic!("unexpected {other}: {:?}", r.json),
        }
    }
    assert_eq!((accepted, limited), (7, 3));
}

#[tokio::test]
async fn a_card_raised_on_one_replica_and_answered_thirty_times_across_them_runs_once() {
    let limits = "[site.limits]\nrequests_per_minute = 1000\nconcurrent_streams_per_visitor = 100";
    let c = Cluster::start(3, None, limits, &[]).await;
    let token = c.visitor().await;
    c.setup.llm.push(Script::tool_calls(&[(
        "cancel_order",
        json!({"order_id": 42}),
    )]));
    let raised = c
        .replica(0)
        .ask(&token, json!({"message": "Cancel order 42"}))
        .await;
    let conversation = raised.conversation();
    let card = raised.event("confirm").clone();
    for _ in 0..30 {
        c.setup.llm.push(Script::text("Order 42 is cancelled."));
    }
    let body = json!({"conversation": conversation, "call": card["call"], "decision": "confirm", "signature": card["signature"]});
    let answers = (0..30).map(|_| c.ask(&token, body.clone()));
    let replies = futures_util::future::join_all(answers).await;
    let won = replies.iter().filter(|r| r.status == 200).count();
    let refused = replies
        .iter()
        .filter(|r| r.status == 409 && r.code() == "call_not_pending")
        .count();
    assert_eq!(
        (won, refused),
        (1, 29),
        "{:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert_eq!(c.setup.hook.calls().len(), 1, "the backend got one call");
    let call = card["call"].as_str().unwrap();
    let events = c.setup.audit(call).await;
    // The refusals of the losing answers may be written while the winner runs.
    for once in ["requested", "confirmed", "executed"] {
        assert_eq!(
            events.iter().filter(|e| *e == once).count(),
            1,
            "{once}: {events:?}"
        );
    }
    assert_eq!(
        events.iter().filter(|e| *e == "refused:replayed").count(),
        29
    );
}

#[tokio::test]
async fn a_killed_replica_frees_its_stream_slot_and_its_answer_is_failed() {
    let c = Cluster::start(2, None, "[site.limits]\nconcurrent_streams = 1", &[]).await;
    let token = c.visitor().await;
    // One answer streams on replica 0 and holds the site's only slot.
    // Killed only once the stream is acknowledged: before that its start may not
    // be saved yet, and then there is no answer to fail (nor was one promised).
    c.setup.llm.push(slow(120_000));
    let acknowledged = c
        .replica(0)
        .ask_acknowledged(&token, json!({"message": "Tell me everything"}))
        .await;
    assert_eq!(acknowledged, 200);
    let full = c.replica(1).ask(&token, json!({"message": "Me too"})).await;
    assert_eq!(full.code(), "too_many_streams");

    let mut c = c;
    c.replicas[0].take().unwrap().kill();
    // The balancer notices the dead replica, and the slot lapses with its lease.
    let killed = std::time::Instant::now();
    let mut served = false;
    while !served && killed.elapsed() < Duration::from_secs(30) {
        c.setup.llm.push(Script::text("Now I can answer."));
        served = c.ask(&token, json!({"message": "And now?"})).await.status == 200;
        if !served {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert!(served, "the slot came free within 30 s");
    // The interrupted answer is failed (a live replica claimed it), as the
    // visitor's history through the other replica shows.
    let (conversation,): (String,) =
        sqlx::query_as("SELECT conversation FROM messages WHERE text = 'Tell me everything'")
            .fetch_one(&c.setup.db().await)
            .await
            .unwrap();
    let mut answer = serde_json::Value::Null;
    for _ in 0..100 {
        let history = c.replica(1).history(&token, &conversation).await;
        answer = history["messages"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["role"] == "assistant"))
            .cloned()
            .unwrap_or_default();
        if !answer.is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        answer["status"], "failed",
        "the killed replica's answer is failed, not streaming forever: {answer}"
    );
}

#[tokio::test]
async fn a_call_running_on_a_killed_replica_is_delivered_again_by_another_with_the_same_key() {
    let c = Cluster::start(2, None, "", &[]).await;
    let token = c.visitor().await;
    c.setup.hook.push(hanging());
    let (conversation, card) = c.replica(0).confirm_in_background(&c.setup, &token).await;
    c.setup.wait_for_delivery("/cancel", 1).await;
    let mut c = c;
    c.replicas[0].take().unwrap().kill();
    c.setup.llm.push(Script::text("Order 42 is cancelled [1]."));
    let history = c.replica(1).settled_history(&token, &conversation, 3).await;
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        c.setup.audit(call).await,
        ["requested", "confirmed", "executed"]
    );
    let keys = c.setup.idempotency_keys("/cancel");
    assert_eq!(keys.len(), 2, "delivered again once");
    assert!(
        keys.iter().all(|k| k == call),
        "with the same Idempotency-Key"
    );
    assert_eq!(history["messages"][2]["steps"][0]["status"], "succeeded");
}

#[tokio::test]
async fn many_cards_expiring_at_once_on_three_replicas_give_one_expired_row_each() {
    let limits = "[site.limits]\nrequests_per_minute = 1000";
    let c = Cluster::start(
        3,
        None,
        limits,
        &[("DESKBELL_ACTION_APPROVAL_TTL_MIN", "0.02")],
    )
    .await;
    let mut calls = Vec::new();
    for _ in 0..12 {
        let token = c.visitor().await;
        c.setup.llm.push(Script::tool_calls(&[(
            "cancel_order",
            json!({"order_id": 42}),
        )]));
        let r = c.ask(&token, json!({"message": "Cancel order 42"})).await;
        calls.push(r.event("confirm")["call"].as_str().unwrap().to_string());
    }
    let db = c.setup.db().await;
    // No one answers: the replicas' sweeps (one at a time) expire them.
    for _ in 0..400 {
        let (pending,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM calls WHERE status = 'pending'")
                .fetch_one(&db)
                .await
                .unwrap();
        if pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for call in &calls {
        let events = c.setup.audit(call).await;
        assert_eq!(events, ["requested", "expired"], "{call}");
    }
}

#[tokio::test]
async fn asks_through_the_balancer_wait_for_redis_and_come_back_with_it() {
    let mut redis = RedisChild::start().await;
    let c = Cluster::start(2, Some(redis.url()), "", &[]).await;
    let token = c.visitor().await;
    c.setup.llm.push(Script::text("Hello."));
    let first = c.ask(&token, json!({"message": "Hi"})).await;
    assert_eq!(first.status, 200);
    let conversation = first.conversation();
    redis.stop();
    for _ in 0..2 {
        let r = c
            .ask(
                &token,
                json!({"conversation": conversation, "message": "Still there?"}),
            )
            .await;
        assert_eq!((r.status, r.code()), (503, "service_unavailable"));
        assert!(r.headers.contains_key("retry-after"));
    }
    let history = c.replica(0).history(&token, &conversation).await;
    assert_eq!(
        history["messages"].as_array().unwrap().len(),
        2,
        "history does not need Redis"
    );
    redis.restart().await;
    // Each replica, asked directly, serves asks again on its own.
    for replica in 0..2 {
        let mut back = false;
        for _ in 0..100 {
            c.setup.llm.push(Script::text("Back."));
            let r = c
                .replica(replica)
                .ask(
                    &token,
                    json!({"conversation": conversation, "message": "Now?"}),
                )
                .await;
            if r.status == 200 {
                back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            back,
            "replica {replica} serves asks again without a restart"
        );
    }
}

#[tokio::test]
async fn a_sites_stream_cap_holds_behind_the_balancer() {
    let c = Cluster::start(2, None, "[site.limits]\nconcurrent_streams = 1", &[]).await;
    let token = c.visitor().await;
    c.setup.llm.push(slow(6_000));
    c.replica(0)
        .ask_in_background(&token, json!({"message": "A long one"}));
    while c.setup.llm.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let began = std::time::Instant::now();
    // Round robin sends these to both replicas: neither may open a second stream.
    for _ in 0..4 {
        let r = c.ask(&token, json!({"message": "Me too"})).await;
        assert_eq!((r.status, r.code()), (429, "too_many_streams"));
    }
    // The replicas' lease is 3 s here, and the answer pauses 6 s: past one
    // lease the slot is still held, because the streaming turn renews it.
    tokio::time::sleep(Duration::from_millis(4_500).saturating_sub(began.elapsed())).await;
    for _ in 0..2 {
        let r = c.ask(&token, json!({"message": "Still full?"})).await;
        assert_eq!(
            (r.status, r.code()),
            (429, "too_many_streams"),
            "a streaming turn's slot outlives one lease"
        );
    }
}

#[tokio::test]
async fn knowledge_ingested_by_the_command_line_is_cited_through_every_replica() {
    let (_docs, c) = a_document_added_after_start().await;
    crate::support::succeeded(
        crate::support::deskbell_command()
            .args(["ingest", "--config"])
            .arg(c.setup.replica_config(9))
            .output()
            .unwrap(),
    );
    cited_through_every_replica(&c, "Returns").await;
}

#[tokio::test]
async fn knowledge_ingested_through_one_replica_is_cited_through_every_replica() {
    let (_docs, c) = a_document_added_after_start().await;
    let minted = crate::support::succeeded(
        crate::support::deskbell_command()
            .args(["operator", "token", "--name", "ingest", "--config"])
            .arg(c.setup.replica_config(9))
            .output()
            .unwrap(),
    );
    let stdout = String::from_utf8_lossy(&minted.stdout);
    let token = stdout
        .split_whitespace()
        .find(|w| w.starts_with(deskbell::operator::accounts::TOKEN_PREFIX))
        .unwrap_or_else(|| panic!("an operator token: {stdout}"));
    // The console's "re-ingest" button, on replica 0 alone.
    let r = reqwest::Client::new()
        .post(format!(
            "{}/v1/operator/knowledge/acme/ingest",
            c.replica(0).base
        ))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    cited_through_every_replica(&c, "Returns").await;
}

/// Two replicas whose site's folder gains a document on returns after they
/// started (and ingested the first one); the folder lives as long as the value.
async fn a_document_added_after_start() -> (tempfile::TempDir, Cluster) {
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(
        docs.path().join("shipping.md"),
        "# Shipping\n\nStandard shipping takes 3 to 5 working days.",
    )
    .unwrap();
    let acme = format!("knowledge = [\"{}\"]", docs.path().display());
    let c = Cluster::start(2, None, &acme, &[]).await;
    std::fs::write(
        docs.path().join("returns.md"),
        "# Returns\n\nReturn any kettle within 30 days.",
    )
    .unwrap();
    (docs, c)
}

/// Waits (15 s at most) until four answers in a row through the balancer, which
/// round-robins over the replicas, cite a document titled `title`. A replica
/// that has not caught up yet answers without that citation, or without any.
async fn cited_through_every_replica(c: &Cluster, title: &str) {
    let token = c.visitor().await;
    let began = std::time::Instant::now();
    let mut cited_in_a_row = 0;
    while cited_in_a_row < 4 && began.elapsed() < Duration::from_secs(15) {
        c.setup.llm.push(Script::text("Within 30 days [1]."));
        let r = c
            .ask(&token, json!({"message": "How do I return a kettle?"}))
            .await;
        assert_eq!(r.status, 200, "{:?}", r.json);
        let cited = r
            .events
            .iter()
            .find(|(name, _)| name == "citations")
            .and_then(|(_, v)| v["items"][0]["title"].as_str())
            .is_some_and(|t| t.contains(title));
        cited_in_a_row = if cited { cited_in_a_row + 1 } else { 0 };
        if !cited {
            // Slowly enough that the visitor's limit (20 a minute) is not reached.
            tokio::time::sleep(Duration::from_millis(750)).await;
        }
    }
    assert_eq!(cited_in_a_row, 4, "every replica's index caught up");
}
