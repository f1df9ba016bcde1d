//! What the two remote providers (`openai.rs`, `anthropic/`) share: one HTTP
//! client built from `[llm]`, and one way to send a request and open its
//! event stream, so a timeout, a status or a first event is handled alike.

use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use super::retry::{self, Fault};
use super::sse::{self, Decoder};
use super::{ModelStream, ProviderError};
use crate::config::LlmConfig;
use crate::secret::Secret;

/// A model server's endpoint and how it is spoken to.
pub struct Remote {
    pub http: reqwest::Client,
    /// The base URL and the provider's path, parsed once (the base URL was
    /// checked with the configuration).
    pub url: reqwest::Url,
    pub model: String,
    pub api_key: Option<Secret>,
    pub idle: Duration,
    pub retries: u32,
}

impl Remote {
    /// The endpoint `path` (`chat/completions`, `messages`) under `base_url`.
    pub fn new(config: &LlmConfig, path: &str) -> anyhow::Result<Self> {
        Ok(Remote {
            http: client(config)?,
            url: reqwest::Url::parse(&format!("{}/{path}", config.base_url.trim_end_matches('/')))?,
            model: config.model.clone(),
            api_key: config.api_key.clone(),
            idle: Duration::from_secs_f64(config.idle_timeout_s),
            retries: config.max_retries,
        })
    }

    /// A POST of the JSON `body` to the endpoint, before its credentials.
    pub fn post(&self, body: &Bytes) -> reqwest::RequestBuilder {
        self.http
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
    }
}

/// A request's JSON, written once for every attempt. Writing it cannot fail
/// for these shapes (string keys, no custom serializer that errs); if it ever
/// did, retrying would not help, so it is not a transient error.
pub fn json<T: Serialize>(body: &T) -> Result<Bytes, ProviderError> {
    serde_json::to_vec(body)
        .map(Bytes::from)
        .map_err(|e| ProviderError::Protocol(format!("the request could not be written: {e}")))
}

/// The HTTP/2 connection window offered to a model server (how much it may send
/// ahead of what is read), and so h2's budget for unread small frames, half of
/// it. The test stand-in's server offers the same for request bodies.
pub(crate) const H2_CONNECTION_WINDOW: u32 = 64 * 1024 * 1024;

/// The client for a model server: its connect timeout, no redirects (a key
/// must not follow one), and h2c when `http2` asks for it on `http://`.
pub fn client(config: &LlmConfig) -> anyhow::Result<reqwest::Client> {
    let mut http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs_f64(config.connect_timeout_s))
        .redirect(reqwest::redirect::Policy::none());
    if config.http2 && config.base_url.starts_with("http://") {
        http = http.http2_prior_knowledge();
    }
    // h2 closes a connection (GOAWAY ENHANCE_YOUR_CALM "too_many_data_frames")
    // once the small DATA frames it holds unread cost more than half the
    // connection's window. Every streamed token is such a frame, and thousands of
    // turns on one HTTP/2 connection leave thousands unread while the process is
    // busy: with hyper's 5 MiB window, 10,000 turns were cut off (BENCHMARKS.md,
    // issue 42). The window is a ceiling, not memory held.
    http = http.http2_initial_connection_window_size(H2_CONNECTION_WINDOW);
    Ok(http.build()?)
}

/// Sends `request`, and on success decodes its body with `decoder` up to the
/// first event; a status or a fault before it is a `Fault` to retry or report.
pub async fn open<D: Decoder>(
    request: reqwest::RequestBuilder,
    idle: Duration,
    decoder: D,
) -> Result<ModelStream, Fault> {
    let response = tokio::time::timeout(idle, request.send())
        .await
        .map_err(|_| ProviderError::Timeout)?
        .map_err(|e| ProviderError::Connect(without_url(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(Fault {
            error: ProviderError::Status(status.as_u16()),
            retry_after: retry::retry_after(response.headers()),
        });
    }
    Ok(sse::first(sse::decode(response.bytes_stream(), decoder, idle)).await?)
}

/// reqwest's errors name the URL; the base URL is configuration, not a secret, but
/// keeping error text short and uniform keeps logs readable.
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "<provider>");
    }
    text
}

#[cfg(all(test, feature = "testkit"))]
mod tests {
    use super::*;

    /// Many turns on one HTTP/2 connection, each sent a stream of small frames
    /// (as a model streams tokens) that nobody reads for a while: the client must
    /// keep the connection. With hyper's own window h2's budget for unread small
    /// frames ran out and it closed the connection, failing every stream on it.
    #[tokio::test]
    async fn small_frames_left_unread_on_many_streams_do_not_close_the_connection() {
        const STREAMS: usize = 400;
        const CHUNKS: usize = 40;
        let router = axum::Router::new().route(
            "/",
            axum::routing::post(|| async {
                // Each chunk goes out as a DATA frame of its own.
                let chunks = futures_util::stream::iter(
                    (0..CHUNKS)
                        .map(|_| Ok::<_, std::io::Error>(Bytes::from_static(b"data: x\n\n"))),
                );
                axum::body::Body::from_stream(chunks)
            }),
        );
        let base = crate::testkit::serve_on_loopback(router).await.unwrap();
        let config = LlmConfig {
            base_url: base.clone(),
            http2: true,
            ..LlmConfig::default()
        };
        let http = client(&config).unwrap();
        let responses = futures_util::future::join_all(
            (0..STREAMS).map(|_| http.post(&base).body("{}").send()),
        )
        .await;
        // Let the server send every chunk while none is read.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut whole = 0;
        for response in responses {
            let body = response.unwrap().bytes().await;
            if body.is_ok_and(|b| b.len() == CHUNKS * 9) {
                whole += 1;
            }
        }
        assert_eq!(whole, STREAMS, "streams cut off");
    }
}
