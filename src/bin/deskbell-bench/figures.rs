//! Each figure of BENCHMARKS.md, measured against a fresh server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deskbell::testkit::{FakeLlm, Piece, Reply, Webhook};
use futures_util::StreamExt;
use serde_json::json;

use crate::client::Client;
use crate::server;
use crate::stats::{Samples, ms, report};

struct Sizes {
    concurrency: usize,
    asks_per_client: usize,
    throughput_for: Duration,
    confirm_samples: usize,
    open_streams: usize,
    guard_visitors: usize,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Sizes {
                concurrency: 20,
                asks_per_client: 5,
                throughput_for: Duration::from_secs(2),
                confirm_samples: 10,
                open_streams: 200,
                guard_visitors: 10,
            }
        } else {
            Sizes {
                concurrency: 100,
                asks_per_client: 30,
                throughput_for: Duration::from_secs(10),
                confirm_samples: 200,
                // The sandbox caps open files at 20,000 per process and each stream holds
                // two sockets in the server (visitor and model): 9,000 is what fits.
                open_streams: 9_000,
                guard_visitors: 100,
            }
        }
    }
}

pub async fn run_all(quick: bool, only: Option<&str>) -> anyhow::Result<()> {
    let sizes = Sizes::new(quick);
    let wants = |name: &str| only.is_none_or(|o| o == name);
    println!("| figure | measured | goal |");
    println!("|---|---|---|");
    if wants("start") {
        start_and_idle().await?;
    }
    if wants("ttft") {
        added_ttft(&sizes).await?;
    }
    if wants("throughput") {
        throughput(&sizes).await?;
    }
    if wants("confirm") {
        confirm_round_trip(&sizes).await?;
    }
    if wants("guards") {
        guards_under_load(&sizes).await?;
    }
    if wants("knowledge") {
        crate::knowledge::figures(quick).await?;
    }
    if wants("streams") {
        open_streams(&sizes).await?;
    }
    #[cfg(feature = "local-model")]
    if wants("local") {
        crate::local::figures(quick).await?;
    }
    Ok(())
}

async fn fakes() -> anyhow::Result<(FakeLlm, Webhook)> {
    Ok((FakeLlm::start().await?, Webhook::start().await?))
}

async fn start_and_idle() -> anyhow::Result<()> {
    let (llm, hook) = fakes().await?;
    let mut starts = Samples::default();
    let mut rss = 0.0;
    for _ in 0..5 {
        let s = server::start(&llm, &hook).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        rss = s.rss_mib();
        starts.push(s.started_in);
    }
    report(
        "start-up to ready (serve, SQLite, no knowledge), 5 starts",
        &format!(
            "p50 {} (max {})",
            ms(starts.p50()),
            ms(starts.percentile(1.0))
        ),
        "≤ 300 ms",
    );
    report("idle RSS", &format!("{rss:.1} MiB"), "≤ 30 MB");
    let dir = tempfile::tempdir()?;
    let docs = dir.path().join("docs");
    crate::knowledge::synthetic_docs(&docs, 1_000, 3)?;
    let first = server::start_in(dir.path(), Some(&docs), &llm, &hook).await?;
    let building = first.started_in;
    drop(first);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = server::start_in(dir.path(), Some(&docs), &llm, &hook).await?;
    report(
        "start-up to ready with 1,000 documents",
        &format!(
            "{} with the index built; {} when the first start builds it",
            ms(again.started_in),
            ms(building)
        ),
        "≤ 300 ms",
    );
    Ok(())
}

/// The scripted model's own time to first token, asked directly at the same
/// concurrency: the baseline that Deskbell's figure is compared with.
async fn model_ttft(
    llm: &FakeLlm,
    concurrency: usize,
    per_client: usize,
) -> anyhow::Result<Samples> {
    let http = reqwest::Client::new();
    let url = format!("{}/chat/completions", llm.base_url);
    let tasks = (0..concurrency).map(|_| {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            let mut samples = Samples::default();
            for _ in 0..per_client {
                let started = Instant::now();
                let body = json!({"model": "fake", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
                let Ok(response) = http.post(&url).json(&body).send().await else { continue };
                let mut stream = response.bytes_stream();
                let mut seen = String::new();
                while let Some(Ok(chunk)) = stream.next().await {
                    seen.push_str(&String::from_utf8_lossy(&chunk));
                    if seen.contains("\"content\":\"O") {
                        samples.push(started.elapsed());
                        break;
                    }
                }
                while stream.next().await.is_some() {}
            }
            samples
        })
    });
    let mut all = Samples::default();
    for done in futures_util::future::join_all(tasks).await {
        all.extend(done?);
    }
    Ok(all)
}

async fn asks_in_parallel(
    client: &Client,
    site: &str,
    concurrency: usize,
    per_client: usize,
) -> anyhow::Result<(Samples, usize)> {
    let mut tokens = Vec::new();
    for _ in 0..concurrency {
        tokens.push(client.visitor(site).await?);
    }
    let tasks = tokens.into_iter().map(|token| {
        let client = client.clone();
        tokio::spawn(async move {
            let mut samples = Samples::default();
            let mut refused = 0;
            for _ in 0..per_client {
                match client.ask(&token, &json!({"message": "hi"})).await {
                    Ok(a) if a.status == 200 => samples.push(a.first_delta.unwrap_or(a.total)),
                    _ => refused += 1,
                }
            }
            (samples, refused)
        })
    });
    let mut all = Samples::default();
    let mut refused = 0;
    for done in futures_util::future::join_all(tasks).await {
        let (s, r) = done?;
        all.extend(s);
        refused += r;
    }
    Ok((all, refused))
}

async fn added_ttft(sizes: &Sizes) -> anyhow::Result<()> {
    let (llm, hook) = fakes().await?;
    let s = server::start(&llm, &hook).await?;
    let client = Client::new(&s.base);
    // Warm up connections and caches first.
    asks_in_parallel(&client, "bench", sizes.concurrency, 2).await?;
    let (deskbell, _) =
        asks_in_parallel(&client, "bench", sizes.concurrency, sizes.asks_per_client).await?;
    let model = model_ttft(&llm, sizes.concurrency, sizes.asks_per_client).await?;
    let added = |p: f64| deskbell.percentile(p).saturating_sub(model.percentile(p));
    report(
        &format!(
            "time to first token at {} concurrent streams ({} turns)",
            sizes.concurrency,
            deskbell.len()
        ),
        &format!(
            "Deskbell p50 {} p99 {}; model alone p50 {} p99 {}",
            ms(deskbell.p50()),
            ms(deskbell.p99()),
            ms(model.p50()),
            ms(model.p99())
        ),
        "",
    );
    report(
        "added time to first token (server overhead)",
        &format!(
            "p50 {} p99 {} (ratio p50 {:.1}×)",
            ms(added(0.5)),
            ms(added(0.99)),
            deskbell.p50().as_secs_f64() / model.p50().as_secs_f64().max(1e-9)
        ),
        "p50 ≤ 1 ms, p99 ≤ 5 ms",
    );
    Ok(())
}

async fn throughput(sizes: &Sizes) -> anyhow::Result<()> {
    let (llm, hook) = fakes().await?;
    let s = server::start(&llm, &hook).await?;
    let client = Client::new(&s.base);
    let concurrency = 64.min(sizes.concurrency.max(8));
    let mut tokens = Vec::new();
    for _ in 0..concurrency {
        tokens.push(client.visitor("bench").await?);
    }
    let deadline = Instant::now() + sizes.throughput_for;
    let started = Instant::now();
    let tasks = tokens.into_iter().map(|token| {
        let client = client.clone();
        tokio::spawn(async move {
            let mut done = 0usize;
            while Instant::now() < deadline {
                if matches!(client.ask(&token, &json!({"message": "hi"})).await, Ok(a) if a.status == 200) {
                    done += 1;
                }
            }
            done
        })
    });
    let mut turns = 0;
    for done in futures_util::future::join_all(tasks).await {
        turns += done?;
    }
    let rate = turns as f64 / started.elapsed().as_secs_f64();
    report(
        &format!("short question turns per second (SQLite, {concurrency} clients)"),
        &format!("{rate:.0} turns/s"),
        "≥ 2,000",
    );
    Ok(())
}

async fn confirm_round_trip(sizes: &Sizes) -> anyhow::Result<()> {
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
    let model = model_ttft(&llm, 1, sizes.confirm_samples).await?;
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

/// Rate limits hold under many clients, and refused requests do not slow accepted
/// ones: accepted asks are timed alone, then again beside a flood of refused ones.
async fn guards_under_load(sizes: &Sizes) -> anyhow::Result<()> {
    let (llm, hook) = fakes().await?;
    let s = server::start(&llm, &hook).await?;
    let client = Client::new(&s.base);
    let visitors = sizes.guard_visitors;
    // Each visitor fires 30 asks at a limit of 20 per minute: a burst of 20 passes,
    // then one more for every 3 seconds the load lasts (the bucket refills).
    let started = Instant::now();
    let (accepted, refused) = asks_in_parallel(&client, "limited", visitors, 30).await?;
    let refills = (started.elapsed().as_secs_f64() / 3.0).ceil() as usize;
    let bound = visitors * (20 + refills);
    let held = accepted.len() >= visitors * 20
        && accepted.len() <= bound
        && accepted.len() + refused == visitors * 30;
    report(
        &format!("rate limit under load ({visitors} visitors × 30 asks, limit 20/min)"),
        &format!(
            "{} accepted, {} refused in {:.1} s (bucket allows {}..={}) — {}",
            accepted.len(),
            refused,
            started.elapsed().as_secs_f64(),
            visitors * 20,
            bound,
            if held { "held" } else { "BROKEN" }
        ),
        "20 per visitor plus refills",
    );
    anyhow::ensure!(held, "the rate limit did not hold under load");
    let quiet = asks_in_parallel(&client, "bench", 20, sizes.asks_per_client)
        .await?
        .0;
    let flooders: Vec<String> =
        futures_util::future::join_all((0..visitors).map(|_| client.visitor("limited")))
            .await
            .into_iter()
            .collect::<Result<_, _>>()?;
    for token in &flooders {
        for _ in 0..20 {
            client.ask(token, &json!({"message": "spend"})).await?;
        }
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = flooders.into_iter().map(|token| {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            // Each flooder asks 20 times a second: with 100 of them, 2,000 refusals a
            // second, a heavy abuse rate that leaves the two cores room to serve.
            let mut refused = 0usize;
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                tick.tick().await;
                if matches!(client.ask(&token, &json!({"message": "again"})).await, Ok(a) if a.status == 429) {
                    refused += 1;
                }
            }
            refused
        })
    });
    let flood: Vec<_> = flood.collect();
    let busy = asks_in_parallel(&client, "bench", 20, sizes.asks_per_client)
        .await?
        .0;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut refused = 0;
    for f in flood {
        refused += f.await?;
    }
    report(
        "accepted asks alone vs. beside a flood of refused ones (TTFT)",
        &format!(
            "alone p50 {} p99 {}; beside {refused} refusals p50 {} p99 {}",
            ms(quiet.p50()),
            ms(quiet.p99()),
            ms(busy.p50()),
            ms(busy.p99())
        ),
        "no material slow-down",
    );
    Ok(())
}

/// Many answers held open at once while the model trickles a token a second.
async fn open_streams(sizes: &Sizes) -> anyhow::Result<()> {
    let (llm, hook) = fakes().await?;
    let s = server::start(&llm, &hook).await?;
    let client = Client::new(&s.base);
    let idle = s.rss_mib();
    let n = sizes.open_streams;
    let seconds = if n > 1000 { 40 } else { 5 };
    for _ in 0..n {
        let mut pieces = Vec::new();
        for _ in 0..seconds {
            pieces.push(Piece::Text("a".into()));
            pieces.push(Piece::Pause(Duration::from_secs(1)));
        }
        llm.push(Reply::Stream(pieces));
    }
    let tokens =
        futures_util::future::join_all((0..n.div_ceil(1000)).map(|_| client.visitor("bench")))
            .await;
    let tokens: Vec<String> = tokens.into_iter().collect::<Result<_, _>>()?;
    let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..n {
        let (client, token, opened) = (
            client.clone(),
            tokens[i % tokens.len()].clone(),
            opened.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let response = client
                .http
                .post(format!("{}/v1/ask", client.base))
                .header("origin", server::ORIGIN)
                .bearer_auth(&token)
                .json(&json!({"message": "trickle"}))
                .send()
                .await;
            if let Ok(r) = response
                && r.status().is_success()
            {
                opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut body = r.bytes_stream();
                while body.next().await.is_some() {}
            }
        }));
    }
    let started = Instant::now();
    while opened.load(std::sync::atomic::Ordering::Relaxed) < n
        && started.elapsed() < Duration::from_secs(seconds as u64 - 2)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss = s.rss_mib();
    let open = opened.load(std::sync::atomic::Ordering::Relaxed);
    report(
        &format!("open streams held at once (model trickling 1 token/s), {n} asked"),
        &format!(
            "{open} open after {:.1} s; RSS {rss:.0} MiB (idle {idle:.0} MiB, {:.1} KiB per stream)",
            started.elapsed().as_secs_f64(),
            (rss - idle) * 1024.0 / open.max(1) as f64
        ),
        "10,000 with RSS ≤ 300 MB",
    );
    for t in tasks {
        t.abort();
    }
    Ok(())
}
