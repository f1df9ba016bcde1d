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

/// The client for a model server: its connect timeout, no redirects (a key
/// must not follow one), and h2c when `http2` asks for it on `http://`.
pub fn client(config: &LlmConfig) -> anyhow::Result<reqwest::Client> {
    let mut http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs_f64(config.connect_timeout_s))
        .redirect(reqwest::redirect::Policy::none());
    if config.http2 && config.base_url.starts_with("http://") {
        http = http.http2_prior_knowledge();
    }
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
