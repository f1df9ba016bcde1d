//! Each figure of BENCHMARKS.md, measured against a fresh server.

use std::time::{Duration, Instant};

use deskbell::testkit::{FakeLlm, Webhook};
use futures_util::StreamExt;
use serde_json::json;

use crate::client::Client;
use crate::server;
use crate::stats::{Round, Samples, ms, report};

pub struct Sizes {
    pub concurrency: usize,
    pub asks_per_client: usize,
    pub throughput_for: Duration,
    pub confirm_samples: usize,
    pub open_streams: usize,
    pub guard_visitors: usize,
    /// Distinct visitors arriving over `churn_span` for the rate-limit memory figure.
    pub churn_visitors: usize,
    pub churn_span: Duration,
}

impl Sizes {
    /// The sizes for a run; `BENCH_CONCURRENCY=N` sets the concurrent visitors
    /// (of the time-to-first-token figures, to see how the added time grows with
    /// load; the figures that use this size, throughput and replicas among them,
    /// change with it).
    fn new(quick: bool) -> Self {
        let mut sizes = Self::preset(quick);
        if let Some(n) = std::env::var("BENCH_CONCURRENCY")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            sizes.concurrency = n;
        }
        sizes
    }

    fn preset(quick: bool) -> Self {
        if quick {
            Sizes {
                concurrency: 20,
                asks_per_client: 5,
                throughput_for: Duration::from_secs(2),
                confirm_samples: 10,
                open_streams: 200,
                guard_visitors: 10,
                churn_visitors: 2_000,
                churn_span: Duration::from_secs(5),
            }
        } else {
            Sizes {
                concurrency: 100,
                asks_per_client: 30,
                throughput_for: Duration::from_secs(10),
                confirm_samples: 200,
                // Over HTTP/1.1 to the model each stream holds two sockets in the server,
                // so the open-file limit (20,000 here) caps that run lower.
                open_streams: 10_000,
                guard_visitors: 100,
                churn_visitors: 200_000,
                churn_span: Duration::from_secs(600),
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
    if wants("latency") {
        crate::latency::figures(&sizes, quick).await?;
    }
    if wants("throughput") {
        throughput(&sizes).await?;
    }
    if wants("commit-floor") {
        crate::floor::commit_floor(&sizes).await?;
    }
    if wants("metrics") {
        metrics_on_and_off(&sizes).await?;
    }
    // PostgreSQL, Redis and HAProxy: only when asked for by name.
    if only == Some("replicas") {
        crate::replicas::figures(&sizes).await?;
    }
    if wants("confirm") {
        crate::confirm::confirm_round_trip(&sizes).await?;
    }
    if wants("guards") {
        crate::load::guards_under_load(&sizes).await?;
    }
    // Ten minutes in full: only when asked for by name.
    if wants("visitors") && (quick || only == Some("visitors")) {
        crate::load::many_visitors(&sizes).await?;
    }
    if wants("knowledge") {
        crate::knowledge::figures(quick).await?;
    }
    // Minutes of embedding in full: only when asked for by name.
    if wants("retrieval-quality") && (quick || only == Some("retrieval-quality")) {
        crate::retrieval::figures(quick).await?;
    }
    if wants("retrieval-speed") {
        crate::retrieval_speed::figures(quick).await?;
    }
    // A minute of graph building in full: only when asked for by name.
    if wants("retrieval-graph") && (quick || only == Some("retrieval-graph")) {
        crate::retrieval_graph::figures(quick);
    }
    #[cfg(feature = "local-model")]
    if wants("encoder-product") {
        crate::encoder_product::figures(quick)?;
    }
    // Minutes of embedding: only when asked for by name.
    if only == Some("retrieval-ingest") {
        crate::retrieval_speed::ingest(quick).await?;
    }
    if wants("console") {
        crate::console::figures(quick).await?;
    }
    if wants("streams") {
        crate::load::open_streams(&sizes).await?;
    }
    if wants("desk") {
        crate::desk::figures(sizes.open_streams).await?;
    }
    // Minutes on a CPU model: only when asked for by name.
    if only == Some("quality") {
        crate::quality::figures().await?;
    }
    #[cfg(feature = "local-model")]
    if wants("local") {
        crate::local::figures(quick).await?;
    }
    #[cfg(feature = "local-model")]
    if only == Some("local-vs-llamacpp") {
        crate::local_vs::figures(quick).await?;
    }
    Ok(())
}

pub async fn fakes() -> anyhow::Result<(FakeLlm, Webhook)> {
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
pub async fn model_ttft(
    llm: &FakeLlm,
    concurrency: usize,
    per_client: usize,
) -> anyhow::Result<Round> {
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
    let mut round = Round::default();
    for done in futures_util::future::join_all(tasks).await {
        round.add_client(done?);
    }
    Ok(round)
}

pub async fn asks_in_parallel(
    client: &Client,
    site: &str,
    concurrency: usize,
    per_client: usize,
) -> anyhow::Result<(Samples, usize)> {
    let mut tokens = Vec::new();
    for _ in 0..concurrency {
        tokens.push(client.visitor(site).await?);
    }
    let (round, refused) = ask_each(client, &tokens, &vec!["hi".to_string(); per_client]).await?;
    Ok((round.all(), refused))
}

/// Every visitor asks the questions one after another, all visitors at once;
/// returns the times to the first `delta` (or to the end, for an answer without
/// text) and how many asks were refused or failed.
pub async fn ask_each(
    client: &Client,
    tokens: &[String],
    questions: &[String],
) -> anyhow::Result<(Round, usize)> {
    let tasks = tokens.iter().cloned().map(|token| {
        let client = client.clone();
        let questions = questions.to_vec();
        tokio::spawn(async move {
            let mut samples = Samples::default();
            let mut refused = 0;
            for q in questions {
                match client.ask(&token, &json!({"message": q})).await {
                    Ok(a) if a.status == 200 => samples.push(a.first_delta.unwrap_or(a.total)),
                    _ => refused += 1,
                }
            }
            (samples, refused)
        })
    });
    let mut round = Round::default();
    let mut refused = 0;
    for done in futures_util::future::join_all(tasks).await {
        let (s, r) = done?;
        round.add_client(s);
        refused += r;
    }
    Ok((round, refused))
}

/// Times to first token of short questions at `base` (after a warm-up), and of
/// the model stand-in alone, measured one after the other.
pub async fn ttft_at(
    base: &str,
    llm: &FakeLlm,
    sizes: &Sizes,
) -> anyhow::Result<(Samples, Samples)> {
    let client = Client::new(base);
    // Warm up connections and caches first.
    asks_in_parallel(&client, "bench", sizes.concurrency, 2).await?;
    let (deskbell, _) =
        asks_in_parallel(&client, "bench", sizes.concurrency, sizes.asks_per_client).await?;
    let model = model_ttft(llm, sizes.concurrency, sizes.asks_per_client)
        .await?
        .all();
    Ok((deskbell, model))
}

async fn added_ttft(sizes: &Sizes) -> anyhow::Result<()> {
    let (llm, hook) = fakes().await?;
    let s = server::start(&llm, &hook).await?;
    let (deskbell, model) = ttft_at(&s.base, &llm, sizes).await?;
    let added = |p: f64| deskbell.percentile(p).saturating_sub(model.percentile(p));
    report(
        &format!(
            "time to first token at {} concurrent streams ({} turns)",
            sizes.concurrency,
            deskbell.len()
        ),
        &crate::stats::beside_model(&deskbell, &model),
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

/// The added time to first token with metrics off and on, alternating in one
/// run (off, on, off, on) so the machine's drift falls on both; while metrics
/// are on, `/metrics` is scraped every second as Prometheus would.
async fn metrics_on_and_off(sizes: &Sizes) -> anyhow::Result<()> {
    let (llm, hook) = fakes().await?;
    let mut added = [Samples::default(), Samples::default()];
    let mut model_all = Samples::default();
    for round in 0..4 {
        let on = round % 2 == 1;
        let mut scraper = None;
        let s = match on {
            false => server::start(&llm, &hook).await?,
            true => {
                let port = server::free_port()?;
                let addr = format!("127.0.0.1:{port}");
                let s = server::start_with_metrics(&llm, &hook, &addr).await?;
                let url = format!("http://{addr}/metrics");
                scraper = Some(tokio::spawn(async move {
                    let http = reqwest::Client::new();
                    loop {
                        if let Ok(r) = http.get(&url).send().await {
                            let _ = r.bytes().await;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }));
                s
            }
        };
        let (deskbell, model) = ttft_at(&s.base, &llm, sizes).await?;
        added[on as usize].extend(deskbell);
        model_all.extend(model);
        if let Some(scraper) = scraper {
            scraper.abort();
        }
    }
    let over = |d: &Samples, p: f64| d.percentile(p).saturating_sub(model_all.percentile(p));
    for (on, label) in [(false, "off"), (true, "on (scraped every second)")] {
        let d = &added[on as usize];
        report(
            &format!("added time to first token, metrics {label}"),
            &format!(
                "p50 {} p99 {} ({} turns)",
                ms(over(d, 0.5)),
                ms(over(d, 0.99)),
                d.len()
            ),
            "on ≈ off",
        );
    }
    Ok(())
}

async fn throughput(sizes: &Sizes) -> anyhow::Result<()> {
    let (llm, hook) = fakes().await?;
    let s = server::start(&llm, &hook).await?;
    let concurrency = 64.min(sizes.concurrency.max(8));
    let cpu = crate::stats::CpuShare::start(s.child.id());
    let rate = turns_per_second(&s.base, concurrency, sizes.throughput_for).await?;
    let database = match std::env::var("BENCH_POSTGRES") {
        Ok(_) => "PostgreSQL",
        Err(_) => "SQLite",
    };
    report(
        &format!("short question turns per second ({database}, {concurrency} clients)"),
        &format!("{rate:.0} turns/s ({})", cpu.finish()),
        "≥ 2,000",
    );
    Ok(())
}

/// Short question turns per second at `base` with `concurrency` visitors asking
/// one after another for `run`.
pub async fn turns_per_second(
    base: &str,
    concurrency: usize,
    run: Duration,
) -> anyhow::Result<f64> {
    let client = Client::new(base);
    let mut tokens = Vec::new();
    for _ in 0..concurrency {
        tokens.push(client.visitor("bench").await?);
    }
    let deadline = Instant::now() + run;
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
    Ok(turns as f64 / started.elapsed().as_secs_f64())
}
