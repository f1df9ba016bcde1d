//! Guards shared through Redis (SPEC §16): two replicas on one database and one
//! Redis count one visitor's asks and one site's streams together, and asks wait
//! for Redis (503) while history keeps working.

use std::time::Duration;

use deskbell::states::OperatorRole;
use deskbell::testkit::{Piece, Reply as Script};
use serde_json::json;

use crate::support::{ORIGIN, RedisChild, TestApp, redis_url};

fn slow(ms: u64) -> Script {
    Script::Stream(vec![
        Piece::Text("Working".into()),
        Piece::Pause(Duration::from_millis(ms)),
        Piece::Text(" on it.".into()),
    ])
}

#[tokio::test]
async fn a_visitors_per_minute_limit_holds_exactly_across_replicas() {
    let shared = redis_url();
    let a = TestApp::with(|c| {
        c.server.redis_url = Some(shared.clone());
        c.sites[0].limits.requests_per_minute = 5;
    })
    .await;
    let b = a
        .replica(|c| {
            c.server.redis_url = Some(shared.clone());
            c.sites[0].limits.requests_per_minute = 5;
        })
        .await;
    let visitor = a.visitor().await;
    let mut accepted = 0;
    let mut limited = 0;
    for i in 0..8 {
        let replica = if i % 2 == 0 { &a } else { &b };
        replica.llm.push(Script::text("Hello."));
        let r = replica.question(&visitor, None, "Hi").await;
        match r.status {
            200 => accepted += 1,
            429 => {
                assert_eq!(r.code(), "rate_limited");
                assert!(r.headers.contains_key("retry-after"));
                limited += 1;
            }
            other => panic!("unexpected {other}: {:?}", r.json),
        }
    }
    // Minting the visitor took nothing from the per-visitor bucket.
    assert_eq!(
        (accepted, limited),
        (5, 3),
        "exactly the limit, counted across both"
    );
}

#[tokio::test]
async fn a_sites_stream_cap_holds_across_replicas() {
    let shared = redis_url();
    let cap = |c: &mut deskbell::config::Config| {
        c.server.redis_url = Some(shared.clone());
        c.sites[0].limits.concurrent_streams = 1;
    };
    let a = TestApp::with(cap).await;
    let b = a.replica(cap).await;
    let (one, two) = (a.visitor().await, b.visitor().await);
    a.llm.push(slow(800));
    let streaming = {
        let (base, http) = (a.base.clone(), a.http.clone());
        tokio::spawn(async move {
            let req = http
                .post(format!("{base}/v1/ask"))
                .header("origin", ORIGIN)
                .bearer_auth(one)
                .json(&json!({"message": "a long one"}));
            crate::support::read(req.send().await.unwrap()).await
        })
    };
    while a.llm.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = b.question(&two, None, "me too").await;
    assert_eq!((r.status, r.code()), (429, "too_many_streams"));
    assert_eq!(streaming.await.unwrap().status, 200);
    a.settle().await;
    // The slot is given back in the background once its turn ends.
    let mut open = u32::MAX;
    for _ in 0..100 {
        open = a.app.counters.open_streams("s|acme").await.unwrap();
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(open, 0, "the slot was given back");
    b.llm.push(Script::text("Now there is room."));
    assert_eq!(b.question(&two, None, "me too").await.status, 200);
}

#[tokio::test]
async fn without_redis_asks_wait_with_503_history_still_works_and_asks_come_back() {
    let mut redis = RedisChild::start().await;
    let url = redis.url();
    let t = TestApp::with(|c| c.server.redis_url = Some(url.clone())).await;
    let visitor = t.visitor().await;
    t.llm.push(Script::text("Hello."));
    let first = t.question(&visitor, None, "Hi").await;
    assert_eq!(first.status, 200);
    let conversation = first.conversation();

    redis.stop();
    let r = t
        .question(&visitor, Some(&conversation), "Still there?")
        .await;
    assert_eq!((r.status, r.code()), (503, "service_unavailable"));
    let wait: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "Retry-After {wait}");
    let history = t.history(&visitor, &conversation).await;
    assert_eq!(history.status, 200, "history does not need Redis");
    let minted = t
        .post("/v1/visitors", None, ORIGIN, json!({"site": "acme"}))
        .await;
    assert_eq!(minted.status, 200, "nor does minting a visitor");
    // Nor does the operator API, from signing in to reading the conversation.
    let console = t.console(OperatorRole::Agent).await;
    let listed = console.get("/v1/operator/conversations").await;
    assert_eq!(listed.status, 200, "{:?}", listed.json);
    let items = listed.json["items"].as_array().cloned().unwrap_or_default();
    assert!(
        items.iter().any(|c| c["id"] == conversation.as_str()),
        "{:?}",
        listed.json
    );
    let read = console
        .get(&format!("/v1/operator/conversations/{conversation}"))
        .await;
    assert_eq!(read.status, 200, "{:?}", read.json);
    assert_eq!(read.json["id"], conversation.as_str(), "{:?}", read.json);

    redis.restart().await;
    let mut back = None;
    for _ in 0..50 {
        t.llm.push(Script::text("Back."));
        let r = t.question(&visitor, Some(&conversation), "Now?").await;
        if r.status == 200 {
            back = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        back.is_some(),
        "asks are served again without restarting Deskbell"
    );
}

#[tokio::test]
async fn a_stream_slot_whose_replica_stopped_renewing_lapses_with_its_lease() {
    let shared = redis_url();
    let t = TestApp::with(|c| {
        c.server.redis_url = Some(shared.clone());
        c.server.lease_s = 3.0;
    })
    .await;
    let limits = [("s|acme".to_string(), 1)];
    // Another replica takes the site's one slot, then dies: its runtime ends, so
    // it neither renews the slot nor gives it back.
    let installation = t.app.store.installation().await.unwrap();
    let (url, held) = (shared.clone(), limits.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let counters =
                deskbell::RedisCounters::connect(&url, &installation, Duration::from_secs(3))
                    .unwrap();
            let slot = deskbell::Counters::acquire(&counters, &held).await.unwrap();
            std::mem::forget(slot.expect("a slot"));
        });
    })
    .join()
    .unwrap();
    assert!(
        t.app.counters.acquire(&limits).await.unwrap().is_none(),
        "still held"
    );
    tokio::time::sleep(Duration::from_millis(3300)).await;
    assert!(
        t.app.counters.acquire(&limits).await.unwrap().is_some(),
        "lapsed after the lease"
    );
}

/// A slot script that Redis runs after its client stopped waiting (Redis
/// paused for longer than the answer's timeout) takes a slot nobody holds: it
/// is given back as soon as Redis runs what was sent, not kept for a lease.
/// (Its own Redis: a pause would stall every other test's.)
#[tokio::test]
async fn a_stream_slot_taken_after_its_client_gave_up_is_given_back() {
    let redis = RedisChild::start().await;
    let installation = deskbell::ids::new_id("i");
    let lease = Duration::from_secs(30);
    let counters = deskbell::RedisCounters::connect(&redis.url(), &installation, lease).unwrap();
    let limits = [("s|acme".to_string(), 1)];
    // A first slot, given back: the connection is up before Redis is paused.
    let warm = deskbell::Counters::acquire(&counters, &limits)
        .await
        .unwrap();
    drop(warm.expect("a slot"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut admin = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(2_500)
        .arg("WRITE")
        .query_async(&mut admin)
        .await
        .unwrap();
    let refused = deskbell::Counters::acquire(&counters, &limits).await;
    assert!(refused.is_err(), "no answer in time is a refusal");
    // The pause ends; Redis runs the script, then what followed it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let other = deskbell::RedisCounters::connect(&redis.url(), &installation, lease).unwrap();
    let slot = deskbell::Counters::acquire(&other, &limits).await.unwrap();
    assert!(slot.is_some(), "the slot taken too late was given back");
}
