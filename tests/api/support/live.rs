//! A visitor's live channel as a test reads it: `GET /v1/conversations/{id}/events`
//! held open, its events taken as they arrive.

use std::time::Duration;

use serde_json::Value;

use super::{ORIGIN, TestApp, parse_sse_with_ids};

/// An open live channel.
pub struct Channel {
    pub status: u16,
    response: Option<reqwest::Response>,
    buffer: String,
}

/// One event: its id, name and data.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    pub id: i64,
    pub name: String,
    pub data: Value,
}

impl TestApp {
    /// Opens the visitor's live channel, resuming after `last` when given.
    pub async fn channel(&self, token: &str, conversation: &str, last: Option<&str>) -> Channel {
        Channel::open(&self.base, token, conversation, last).await
    }
}

impl Channel {
    /// Opens a visitor's live channel on the server at `base`.
    pub async fn open(base: &str, token: &str, conversation: &str, last: Option<&str>) -> Channel {
        let mut req = reqwest::Client::new()
            .get(format!("{base}/v1/conversations/{conversation}/events"))
            .header("origin", ORIGIN)
            .bearer_auth(token);
        if let Some(last) = last {
            req = req.header("last-event-id", last);
        }
        let response = req.send().await.unwrap();
        let status = response.status().as_u16();
        let is_stream = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap_or("").starts_with("text/event-stream"));
        Channel {
            status,
            response: is_stream.then_some(response),
            buffer: String::new(),
        }
    }

    /// The next `n` events, failing the test if they do not come within `wait`.
    pub async fn take(&mut self, n: usize, wait: Duration) -> Vec<LiveEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut out = Vec::new();
        while out.len() < n {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                out.extend(
                    parse_sse_with_ids(&block)
                        .into_iter()
                        .map(|(id, name, data)| LiveEvent { id, name, data }),
                );
                continue;
            }
            let response = self.response.as_mut().expect("an open event stream");
            let chunk = tokio::time::timeout_at(deadline, response.chunk())
                .await
                .unwrap_or_else(|_| panic!("only {} of {n} events came: {out:?}", out.len()))
                .unwrap()
                .expect("the stream stayed open");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
        out
    }

    /// Whether another event comes within `wait` (keep-alive comments aside).
    pub async fn quiet_for(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if self.buffer.contains("\ndata:") || self.buffer.starts_with("id:") {
                return false;
            }
            let response = self.response.as_mut().expect("an open event stream");
            match tokio::time::timeout_at(deadline, response.chunk()).await {
                Err(_) => return true,
                Ok(chunk) => {
                    let chunk = chunk.unwrap().expect("the stream stayed open");
                    self.buffer.push_str(&String::from_utf8_lossy(&chunk));
                }
            }
        }
    }
}
