//! A scripted model server. Each request takes the next scripted reply (or a short
//! default answer) and streams it the way OpenAI does: a role chunk, content and
//! tool-call deltas split into small pieces, a finish chunk, a usage chunk, `[DONE]`;
//! or, started as `Dialect::Anthropic`, the way Anthropic's Messages API does
//! (`fake_anthropic.rs`). It can also misbehave: answer 429/500/529, stall, send
//! an error event, stop for `max_tokens`, or cut the stream.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::script::{Dialect, Piece, Reply, pieces};

struct Script {
    dialect: Dialect,
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Value>>,
    /// The HTTP version of each request, in order.
    versions: Mutex<Vec<axum::http::Version>>,
    /// How long every stream waits before its first chunk, in microseconds: a
    /// model's own latency, for the benchmark that measures what Deskbell adds.
    first_token_delay_us: AtomicU64,
    /// How long every response waits before its head (status and headers), in
    /// microseconds: a model server that answers nothing until its first token.
    head_delay_us: AtomicU64,
}

#[derive(Clone)]
pub struct FakeLlm {
    /// The base URL to configure (`…/v1`).
    pub base_url: String,
    script: Arc<Script>,
}

impl FakeLlm {
    /// A stand-in speaking OpenAI's Chat Completions.
    pub async fn start() -> std::io::Result<FakeLlm> {
        Self::start_as(Dialect::OpenAi).await
    }

    pub async fn start_as(dialect: Dialect) -> std::io::Result<FakeLlm> {
        let script = Arc::new(Script {
            dialect,
            replies: Default::default(),
            requests: Default::default(),
            versions: Default::default(),
            first_token_delay_us: Default::default(),
            head_delay_us: Default::default(),
        });
        let path = match dialect {
            Dialect::OpenAi => "/v1/chat/completions",
            Dialect::Anthropic => "/v1/messages",
        };
        let router = axum::Router::new()
            .route(path, post(complete))
            .with_state(script.clone());
        let base = super::serve_on_loopback(router).await?;
        Ok(FakeLlm {
            base_url: format!("{base}/v1"),
            script,
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.script.dialect
    }

    pub fn push(&self, reply: Reply) {
        lock(&self.script.replies).push_back(reply);
    }

    /// Makes every later stream wait `delay` before its first chunk, as a real
    /// model's time to first token.
    pub fn set_first_token_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.script
            .first_token_delay_us
            .store(us, Ordering::Relaxed);
    }

    /// Makes every later response wait `delay` before its head, as a model
    /// server that sends nothing until its first token is ready.
    pub fn set_head_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.script.head_delay_us.store(us, Ordering::Relaxed);
    }

    /// The request bodies received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.script.requests).clone()
    }

    /// The HTTP versions the requests so far came in, in order.
    pub fn versions(&self) -> Vec<axum::http::Version> {
        lock(&self.script.versions).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn complete(
    State(script): State<Arc<Script>>,
    version: axum::http::Version,
    headers: axum::http::HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let dialect = script.dialect;
    if dialect == Dialect::Anthropic
        && let Err(why) = super::fake_anthropic::check(&headers, &body)
    {
        lock(&script.requests).push(body);
        let error = super::fake_anthropic::error_body("invalid_request_error", &why);
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    lock(&script.requests).push(body);
    lock(&script.versions).push(version);
    let reply = lock(&script.replies)
        .pop_front()
        .unwrap_or_else(|| Reply::text("OK."));
    let head_delay = Duration::from_micros(script.head_delay_us.load(Ordering::Relaxed));
    if !head_delay.is_zero() {
        tokio::time::sleep(head_delay).await;
    }
    match reply {
        Reply::Status(code) => failure(dialect, code),
        Reply::Busy {
            status,
            retry_after_s,
        } => {
            let mut response = failure(dialect, status);
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from(retry_after_s));
            response
        }
        Reply::Stall => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        Reply::Stream(pieces) => {
            let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
            let delay = Duration::from_micros(script.first_token_delay_us.load(Ordering::Relaxed));
            let deadline = std::time::Instant::now() + delay;
            tokio::spawn(async move {
                if !delay.is_zero() {
                    sleep_until(deadline).await;
                }
                match dialect {
                    Dialect::OpenAi => play(pieces, tx).await,
                    Dialect::Anthropic => super::fake_anthropic::play(pieces, tx).await,
                }
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(
                    tokio_stream::wrappers::ReceiverStream::new(rx),
                ))
                .unwrap_or_default()
        }
    }
}

/// Waits until `deadline`, to within the kernel's timer slack (tens of
/// microseconds). tokio's timer fires on whole milliseconds, so its 50 ms sleep
/// ends 50 to 52 ms later depending on where in a millisecond it began; requests
/// that reach the stand-in by different paths begin at different points, so the
/// latency benchmark, which subtracts the stand-in's own time, could measure
/// that phase beside Deskbell. The last stretch is slept on a blocking thread.
async fn sleep_until(deadline: std::time::Instant) {
    const COARSE_MARGIN: Duration = Duration::from_millis(2);
    if let Some(coarse) = deadline.checked_sub(COARSE_MARGIN)
        && coarse > std::time::Instant::now()
    {
        tokio::time::sleep_until(coarse.into()).await;
    }
    let fine = tokio::task::spawn_blocking(move || {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if !left.is_zero() {
            std::thread::sleep(left);
        }
    });
    // A blocking pool that cannot take the task (the runtime shutting down)
    // ends the wait early rather than never.
    let _ = fine.await;
}

/// An error answer in the dialect's shape.
fn failure(dialect: Dialect, code: u16) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match dialect {
        Dialect::OpenAi => json!({"error": {"message": "scripted failure"}}),
        Dialect::Anthropic => {
            let kind = match code {
                429 => "rate_limit_error",
                529 => "overloaded_error",
                _ => "api_error",
            };
            super::fake_anthropic::error_body(kind, "scripted failure")
        }
    };
    (status, Json(body)).into_response()
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

async fn play(script: Vec<Piece>, tx: mpsc::Sender<Result<Bytes, std::io::Error>>) {
    let send = |value: Value| {
        let tx = tx.clone();
        async move {
            tx.send(Ok(Bytes::from(format!("data: {value}\n\n"))))
                .await
                .is_ok()
        }
    };
    if !send(chunk(json!({"role": "assistant", "content": ""}), None)).await {
        return;
    }
    let mut output_tokens = 0;
    let mut usage = None;
    let mut tool_index = 0;
    let mut report_usage = true;
    let mut stop = None;
    for piece in script {
        match piece {
            Piece::Text(text) => {
                for part in pieces(&text, 3) {
                    output_tokens += 1;
                    send(chunk(json!({"content": part}), None)).await;
                }
            }
            Piece::ToolCall {
                id,
                name,
                arguments,
            } => {
                let (head, tail) = name.split_at(name.len() / 2);
                send(chunk(json!({"tool_calls": [{"index": tool_index, "id": id, "type": "function", "function": {"name": head, "arguments": ""}}]}), None)).await;
                send(chunk(
                    json!({"tool_calls": [{"index": tool_index, "function": {"name": tail}}]}),
                    None,
                ))
                .await;
                for part in pieces(&arguments, 5) {
                    output_tokens += 1;
                    send(chunk(json!({"tool_calls": [{"index": tool_index, "function": {"arguments": part}}]}), None)).await;
                }
                tool_index += 1;
            }
            Piece::Usage { input, output } => usage = Some((input, output)),
            Piece::Pause(d) => tokio::time::sleep(d).await,
            Piece::NoUsage => report_usage = false,
            Piece::Chunk(text) => {
                output_tokens += 1;
                if !send(chunk(json!({"content": text}), None)).await {
                    return;
                }
            }
            Piece::Stop(reason) => stop = Some(reason),
            Piece::Error(kind) => {
                send(json!({"error": {"type": kind, "message": "scripted error"}})).await;
                return;
            }
            Piece::Cut => {
                // Give the server time to flush what was sent: an error aborts the
                // connection and would discard buffered chunks.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = tx.send(Err(std::io::Error::other("cut"))).await;
                return;
            }
        }
    }
    let finish = match stop.as_deref() {
        Some("max_tokens") => "length",
        Some(other) => other,
        None if tool_index > 0 => "tool_calls",
        None => "stop",
    };
    send(chunk(json!({}), Some(finish))).await;
    let (input, output) = usage.unwrap_or((10, output_tokens));
    if report_usage {
        send(json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": "fake", "choices": [],
                "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}}))
        .await;
    }
    let _ = tx.send(Ok(Bytes::from_static(b"data: [DONE]\n\n"))).await;
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    /// The stand-in's latency is a floor the benchmark subtracts: whether the
    /// wait is mostly tokio's, all on the blocking thread (under the coarse
    /// margin) or already over, it never ends before its deadline.
    #[tokio::test]
    async fn the_first_token_wait_never_ends_before_its_deadline() {
        for wait in [
            Duration::ZERO,
            Duration::from_micros(700),
            Duration::from_millis(12),
        ] {
            let began = Instant::now();
            let deadline = began + wait;
            super::sleep_until(deadline).await;
            assert!(Instant::now() >= deadline, "a wait of {wait:?} ended early");
        }
        let past = Instant::now();
        tokio::time::sleep(Duration::from_millis(1)).await;
        super::sleep_until(past).await;
    }
}
