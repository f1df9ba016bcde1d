//! A tool endpoint that records every call (headers and body) and answers with
//! scripted replies.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;

#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: serde_json::Value,
    pub raw: String,
}

#[derive(Debug, Clone)]
pub struct HookReply {
    pub status: u16,
    pub body: String,
    pub delay: Duration,
}

impl HookReply {
    pub fn ok(body: &str) -> Self {
        Self {
            status: 200,
            body: body.into(),
            delay: Duration::ZERO,
        }
    }
}

#[derive(Default)]
struct Hooks {
    calls: Mutex<Vec<Recorded>>,
    replies: Mutex<VecDeque<HookReply>>,
}

#[derive(Clone)]
pub struct Webhook {
    pub base_url: String,
    hooks: Arc<Hooks>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Webhook {
    pub async fn start() -> std::io::Result<Webhook> {
        let hooks = Arc::new(Hooks::default());
        let router = axum::Router::new()
            .fallback(record)
            .with_state(hooks.clone());
        let base_url = super::serve_on_loopback(router).await?;
        Ok(Webhook { base_url, hooks })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    pub fn push(&self, reply: HookReply) {
        lock(&self.hooks.replies).push_back(reply);
    }

    pub fn calls(&self) -> Vec<Recorded> {
        lock(&self.hooks.calls).clone()
    }
}

async fn record(
    State(hooks): State<Arc<Hooks>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let raw = String::from_utf8_lossy(&body).into_owned();
    lock(&hooks.calls).push(Recorded {
        path: uri.path().to_string(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    v.to_str().unwrap_or_default().to_string(),
                )
            })
            .collect(),
        body: serde_json::from_str(&raw).unwrap_or(serde_json::Value::Null),
        raw,
    });
    let reply = lock(&hooks.replies)
        .pop_front()
        .unwrap_or_else(|| HookReply::ok("{\"ok\":true}"));
    tokio::time::sleep(reply.delay).await;
    (
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK),
        reply.body,
    )
}
