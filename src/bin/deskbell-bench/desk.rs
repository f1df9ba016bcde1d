//! The visitor's live channel (SPEC §19) under load: many channels held open
//! at once, the server's memory per channel, and how long an operator's reply
//! takes from the start of its POST to the event arriving on every channel of
//! its conversation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deskbell::testkit::Reply;
use futures_util::StreamExt;
use serde_json::json;

use crate::client::Client;
use crate::figures::fakes;
use crate::server;
use crate::stats::{Samples, ms, report};

/// Channels each visitor holds (the server's cap per visitor is 8).
const PER_VISITOR: usize = 8;
/// Replies timed, one at a time, each to a different conversation.
const REPLIES: usize = 200;

/// When each reply's text arrived on each channel.
type Arrivals = Arc<Mutex<HashMap<String, Vec<Instant>>>>;

pub async fn figures(channels: usize) -> anyhow::Result<()> {
    crate::load::raise_open_files();
    let (llm, hook) = fakes().await?;
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let s = server::start_on(dir.path(), None, &llm, &hook, &[], &url).await?;
    let client = Client::new(&s.base);
    let visitors = channels.div_ceil(PER_VISITOR);
    // Each visitor's conversation, made by one answered question.
    let mut conversations = Vec::with_capacity(visitors);
    for _ in 0..visitors {
        llm.push(Reply::text("Hello."));
    }
    let made = futures_util::stream::iter(0..visitors)
        .map(|_| {
            let client = client.clone();
            async move {
                let token = client.visitor("desk").await?;
                let asked = client.ask(&token, &json!({"message": "Hi"})).await?;
                let conversation = asked
                    .events
                    .iter()
                    .find(|(name, _)| name == "turn")
                    .and_then(|(_, v)| v["conversation"].as_str().map(str::to_string))
                    .ok_or_else(|| anyhow::anyhow!("no conversation"))?;
                anyhow::Ok((token, conversation))
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    for m in made {
        conversations.push(m?);
    }
    let idle = s.rss_mib();
    let arrivals: Arrivals = Arc::default();
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for i in 0..channels {
        let (token, conversation) = conversations[i / PER_VISITOR].clone();
        let (client, arrivals, open) = (client.clone(), arrivals.clone(), open.clone());
        tokio::spawn(async move { listen(client, token, conversation, arrivals, open).await });
    }
    let started = Instant::now();
    while open.load(std::sync::atomic::Ordering::Relaxed) < channels
        && started.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let opened = open.load(std::sync::atomic::Ordering::Relaxed);
    let mut rss = 0.0_f64;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        rss = rss.max(s.rss_mib());
    }
    report(
        &format!("visitor live channels held at once, {channels} asked"),
        &format!(
            "{opened} open in {:.1} s; RSS {idle:.0} MiB idle (with {visitors} conversations), {rss:.0} MiB open: {:.1} KiB per channel",
            started.elapsed().as_secs_f64(),
            (rss - idle).max(0.0) * 1024.0 / opened.max(1) as f64
        ),
        "",
    );
    let operator = Operator::signed_in(&url, &s.base).await?;
    let mut samples = Samples::default();
    for (r, (_, conversation)) in conversations.iter().take(REPLIES).enumerate() {
        let desk = format!("{}/v1/operator/conversations/{conversation}", s.base);
        operator
            .post(&format!("{desk}/takeover"), json!({}))
            .await?;
        let text = format!("reply {r}");
        let sent = Instant::now();
        operator
            .post(&format!("{desk}/messages"), json!({ "text": text }))
            .await?;
        let listeners = PER_VISITOR.min(channels - r * PER_VISITOR);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = arrivals.lock().ok().and_then(|a| a.get(&text).cloned());
            if let Some(times) = got.filter(|t| t.len() >= listeners) {
                for t in times {
                    samples.push(t.duration_since(sent));
                }
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{text} did not reach its channels"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    report(
        &format!("operator reply to the visitor's channels, with {opened} channels open"),
        &format!(
            "p50 {} p99 {} ({} arrivals of {} replies)",
            ms(samples.p50()),
            ms(samples.p99()),
            samples.len(),
            REPLIES.min(conversations.len())
        ),
        "",
    );
    Ok(())
}

/// Holds one channel open, noting when each reply arrives.
async fn listen(
    client: Client,
    token: String,
    conversation: String,
    arrivals: Arrivals,
    open: Arc<std::sync::atomic::AtomicUsize>,
) {
    let response = client
        .http
        .get(format!(
            "{}/v1/conversations/{conversation}/events",
            client.base
        ))
        .header("origin", server::ORIGIN)
        .bearer_auth(&token)
        .send()
        .await;
    let Ok(response) = response.and_then(|r| r.error_for_status()) else {
        return;
    };
    open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    while let Some(Ok(chunk)) = body.next().await {
        let now = Instant::now();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let Some(data) = block.lines().find_map(|l| l.strip_prefix("data:")) else {
                continue;
            };
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(data.trim())
                && let Some(text) = v["text"].as_str()
                && let Ok(mut a) = arrivals.lock()
            {
                a.entry(text.to_string()).or_default().push(now);
            }
        }
    }
}

/// An operator signed in to the console: its cookie and CSRF token.
struct Operator {
    http: reqwest::Client,
    cookie: String,
    csrf: String,
}

impl Operator {
    async fn signed_in(database_url: &str, base: &str) -> anyhow::Result<Operator> {
        const PASSWORD: &str = "bench-operator-password";
        let store = deskbell::store::Store::connect(database_url, Default::default()).await?;
        deskbell::operator::accounts::add_operator(
            &store,
            "desk@example.test",
            deskbell::states::OperatorRole::Agent,
            PASSWORD,
            0,
        )
        .await?;
        drop(store);
        let http = reqwest::Client::new();
        let r = http
            .post(format!("{base}/v1/operator/session"))
            .json(&json!({"email": "desk@example.test", "password": PASSWORD}))
            .send()
            .await?;
        let cookie = r
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("no session cookie"))?;
        let body: serde_json::Value = r.json().await?;
        let csrf = body["csrf"].as_str().unwrap_or_default().to_string();
        Ok(Operator { http, cookie, csrf })
    }

    async fn post(&self, url: &str, body: serde_json::Value) -> anyhow::Result<()> {
        let r = self
            .http
            .post(url)
            .header("cookie", &self.cookie)
            .header("x-deskbell-csrf", &self.csrf)
            .json(&body)
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "{url}: {}", r.status());
        Ok(())
    }
}
