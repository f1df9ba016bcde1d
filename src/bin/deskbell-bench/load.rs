//! The load figures: guards refusing a flood while accepted asks go on, and how
//! many answers can stream at once in how much memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use deskbell::testkit::{Piece, Reply};
use futures_util::StreamExt;
use serde_json::json;

use crate::client::Client;
use crate::server;
use crate::stats::{ms, report};

use crate::figures::{Sizes, asks_in_parallel, fakes};

/// Rate limits hold under many clients, and refused requests do not slow accepted
/// ones: accepted asks are timed alone, then again beside a flood of refused ones.
pub async fn guards_under_load(sizes: &Sizes) -> anyhow::Result<()> {
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
/// Open streams held at once, with the model trickling a token a second: once
/// over HTTP/1.1 to the model (a socket per stream, so the server holds two per
/// stream and the open-file limit caps the count), once over HTTP/2 (one
/// connection for all, as to a hosted model over TLS).
pub async fn open_streams(sizes: &Sizes) -> anyhow::Result<()> {
    let (soft, hard) = raise_open_files();
    println!("| open-file limit (soft, hard) | {soft}, {hard} | |");
    // Each HTTP/1.1 stream holds two sockets in the server; leave room for the rest.
    let h1 = sizes
        .open_streams
        .min((soft.saturating_sub(1_000) / 2) as usize);
    held_streams(h1, false).await?;
    held_streams(sizes.open_streams, true).await
}

async fn held_streams(n: usize, http2: bool) -> anyhow::Result<()> {
    let (llm, hook) = fakes().await?;
    server::MODEL_HTTP2.store(http2, std::sync::atomic::Ordering::Relaxed);
    let started = server::start(&llm, &hook).await;
    server::MODEL_HTTP2.store(false, std::sync::atomic::Ordering::Relaxed);
    let s = started?;
    let client = Client::new(&s.base);
    let idle = s.rss_mib();
    // Long enough that no stream ends before the last reading (the wait for the
    // streams to open stops two seconds before this, and five seconds of readings
    // follow).
    let seconds = if n > 1000 { 60 } else { 10 };
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
        && started.elapsed() < Duration::from_secs(seconds as u64 - 8)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The largest of the resident sizes read over five seconds once the streams
    // are open: one reading could fall just after the allocator gave pages back.
    let open_after = started.elapsed();
    let mut rss = 0.0_f64;
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        rss = rss.max(s.rss_mib());
    }
    let open = opened.load(std::sync::atomic::Ordering::Relaxed);
    report(
        &format!(
            "open streams held at once (model trickling 1 token/s, {} to the model), {n} asked",
            if http2 { "HTTP/2" } else { "HTTP/1.1" }
        ),
        &format!(
            "{open} open after {:.1} s; RSS at most {rss:.0} MiB = {:.0} MB over the next 5 s (idle {idle:.0} MiB, {:.1} KiB per stream)",
            open_after.as_secs_f64(),
            rss * 1.048_576,
            (rss - idle) * 1024.0 / open.max(1) as f64
        ),
        "10,000 with RSS ≤ 300 MB",
    );
    for t in tasks {
        t.abort();
    }
    Ok(())
}

/// Raises this process's open-file limit to its hard limit (the server it
/// starts inherits it), with util-linux's `prlimit`; returns (soft, hard) after.
pub(crate) fn raise_open_files() -> (u64, u64) {
    let read = || {
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap_or_default()
            .to_string();
        let mut numbers = line
            .split_whitespace()
            .filter_map(|w| w.parse::<u64>().ok());
        (
            numbers.next().unwrap_or(1024),
            numbers.next().unwrap_or(1024),
        )
    };
    let (soft, hard) = read();
    if soft < hard {
        let _ = std::process::Command::new("prlimit")
            .arg("--pid")
            .arg(std::process::id().to_string())
            .arg(format!("--nofile={hard}:{hard}"))
            .status();
    }
    read()
}

/// Rate-limit memory (issue 14): distinct visitors arrive at an even rate, each
/// minting a token and making one request (a history read, so no model turn) — a
/// fresh per-visitor bucket each. RSS before and after, and accepted asks' time to
/// first token alone and while the visitors arrive, in one run.
pub async fn many_visitors(sizes: &Sizes) -> anyhow::Result<()> {
    let (llm, hook) = fakes().await?;
    let s = server::start(&llm, &hook).await?;
    let client = Client::new(&s.base);
    let alone = asks_in_parallel(&client, "bench", 20, sizes.asks_per_client)
        .await?
        .0;
    let before = s.rss_mib();
    let n = sizes.churn_visitors;
    let every = sizes.churn_span.div_f64(n as f64);
    let arrivals = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut running = Vec::new();
            for _ in 0..n {
                tick.tick().await;
                let client = client.clone();
                running.push(tokio::spawn(async move {
                    let token = client.visitor("bench").await?;
                    let missing = "c_0123456789abcdef0123456789abcdef";
                    client
                        .http
                        .get(format!("{}/v1/conversations/{missing}", client.base))
                        .header("origin", crate::server::ORIGIN)
                        .bearer_auth(token)
                        .send()
                        .await?;
                    anyhow::Ok(())
                }));
                if running.len() >= 512 {
                    for r in running.drain(..) {
                        r.await??;
                    }
                }
            }
            for r in running {
                r.await??;
            }
            anyhow::Ok(())
        })
    };
    let started = Instant::now();
    let mut during = crate::stats::Samples::default();
    while !arrivals.is_finished() {
        during.extend(
            asks_in_parallel(&client, "bench", 20, sizes.asks_per_client)
                .await?
                .0,
        );
    }
    arrivals.await??;
    let elapsed = started.elapsed();
    let after = s.rss_mib();
    report(
        &format!(
            "rate-limit memory: {n} distinct visitors over {:.0} s",
            elapsed.as_secs_f64()
        ),
        &format!(
            "RSS {before:.0} MiB before, {after:.0} MiB after; accepted asks' TTFT p99 alone {}, during {} (ratio {:.2})",
            ms(alone.p99()),
            ms(during.p99()),
            during.p99().as_secs_f64() / alone.p99().as_secs_f64().max(1e-9)
        ),
        "bounded RSS; p99 ratio near 1",
    );
    Ok(())
}
