//! A visitor's side of the API, timing what a visitor would notice.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::server::ORIGIN;

#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub base: String,
    /// The page the visitor's requests come from.
    pub origin: String,
}

/// What one ask showed: status, time to the first `delta`, and the events.
pub struct Asked {
    pub status: u16,
    pub first_delta: Option<Duration>,
    pub total: Duration,
    pub events: Vec<(String, Value)>,
}

impl Client {
    pub fn new(base: &str) -> Self {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(4096)
            .build()
            .unwrap_or_default();
        Self {
            http,
            base: base.to_string(),
            origin: ORIGIN.to_string(),
        }
    }

    /// A client whose requests come from `origin`.
    pub fn with_origin(base: &str, origin: &str) -> Self {
        Self {
            origin: origin.to_string(),
            ..Self::new(base)
        }
    }

    pub async fn visitor(&self, site: &str) -> anyhow::Result<String> {
        let r: Value = self
            .http
            .post(format!("{}/v1/visitors", self.base))
            .header("origin", &self.origin)
            .json(&json!({"site": site}))
            .send()
            .await?
            .json()
            .await?;
        r["token"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("no token: {r}"))
    }

    pub async fn ask(&self, token: &str, body: &Value) -> anyhow::Result<Asked> {
        let started = Instant::now();
        let response = self
            .http
            .post(format!("{}/v1/ask", self.base))
            .header("origin", &self.origin)
            .bearer_auth(token)
            .json(body)
            .send()
            .await?;
        let status = response.status().as_u16();
        let mut first_delta = None;
        let mut buffer = String::new();
        let mut events = Vec::new();
        let mut bytes = response.bytes_stream();
        while let Some(chunk) = bytes.next().await {
            buffer.push_str(&String::from_utf8_lossy(&chunk?));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                if let Some(event) = parse(&block) {
                    if event.0 == "delta" && first_delta.is_none() {
                        first_delta = Some(started.elapsed());
                    }
                    events.push(event);
                }
            }
        }
        Ok(Asked {
            status,
            first_delta,
            total: started.elapsed(),
            events,
        })
    }
}

fn parse(block: &str) -> Option<(String, Value)> {
    let mut name = None;
    let mut data = None;
    for line in block.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = Some(n.to_string());
        } else if let Some(d) = line.strip_prefix("data: ") {
            data = serde_json::from_str(d).ok();
        }
    }
    Some((name?, data?))
}
