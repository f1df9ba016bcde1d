//! The confirmation round trip: an answer to a card until the continuation's
//! first token, less the model's and the tool's own time.

use std::time::Instant;

use deskbell::testkit::{Reply, Webhook};
use serde_json::json;

use crate::client::Client;
use crate::figures::{Sizes, fakes, model_ttft};
use crate::server;
use crate::stats::{Samples, ms, report};

pub async fn confirm_round_trip(sizes: &Sizes) -> anyhow::Result<()> {
    let (llm, hook) = fakes().await?;
    let s = server::start(&llm, &hook).await?;
    let client = Client::new(&s.base);
    let token = client.visitor("bench").await?;
    let mut round_trips = Samples::default();
    for _ in 0..sizes.confirm_samples {
        llm.push(Reply::tool_calls(&[(
            "cancel_order",
            json!({"order_id": 42}),
        )]));
        let asked = client.ask(&token, &json!({"message": "cancel 42"})).await?;
        let card = asked
            .events
            .iter()
            .find(|(n, _)| n == "confirm")
            .map(|(_, v)| v.clone());
        let turn = asked
            .events
            .iter()
            .find(|(n, _)| n == "turn")
            .map(|(_, v)| v.clone());
        let (Some(card), Some(turn)) = (card, turn) else {
            anyhow::bail!("no card was raised")
        };
        let answer = json!({"conversation": turn["conversation"], "call": card["call"], "decision": "confirm", "signature": card["signature"]});
        llm.push(Reply::text("Done."));
        let answered = client.ask(&token, &answer).await?;
        if let Some(first) = answered.first_delta {
            round_trips.push(first);
        }
    }
    let model = model_ttft(&llm, 1, sizes.confirm_samples).await?.all();
    let hook_time = webhook_time(&hook, sizes.confirm_samples).await?;
    let overhead = |p: f64| {
        round_trips
            .percentile(p)
            .saturating_sub(model.percentile(p) + hook_time.percentile(p))
    };
    report(
        "confirmation round trip (answer → webhook → first continuation token)",
        &format!(
            "p50 {} p99 {}; of which model p50 {}, webhook p50 {}",
            ms(round_trips.p50()),
            ms(round_trips.p99()),
            ms(model.p50()),
            ms(hook_time.p50())
        ),
        "",
    );
    report(
        "confirmation round trip overhead",
        &format!("p50 {} p99 {}", ms(overhead(0.5)), ms(overhead(0.99))),
        "p50 ≤ 2 ms",
    );
    Ok(())
}

/// The tool endpoint's own response time, called directly.
async fn webhook_time(hook: &Webhook, n: usize) -> anyhow::Result<Samples> {
    let http = reqwest::Client::new();
    let mut samples = Samples::default();
    for _ in 0..n {
        let started = Instant::now();
        http.post(hook.url("/direct"))
            .json(&json!({}))
            .send()
            .await?
            .bytes()
            .await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}
