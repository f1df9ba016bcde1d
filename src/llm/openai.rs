//! A client for OpenAI-compatible Chat Completions with streaming (SSE), tool-call
//! deltas and usage. Retries transient faults before the first token only, since a
//! retry after text was shown would repeat it.

use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use futures_util::future::BoxFuture;
use reqwest::header::CONTENT_TYPE;

use super::body::Body;
use super::chunks::ChunkDecoder;
use super::retry::{self, Fault};
use super::sse;
use super::{ChatRequest, ModelStream, Provider, ProviderError};
use crate::config::LlmConfig;
use crate::secret::Secret;

pub struct OpenAiProvider {
    http: reqwest::Client,
    /// `…/chat/completions`, parsed once (the base URL was checked with the
    /// configuration).
    url: reqwest::Url,
    model: String,
    api_key: Option<Secret>,
    idle: Duration,
    retries: u32,
}

impl OpenAiProvider {
    pub fn new(config: &LlmConfig) -> anyhow::Result<Self> {
        let mut http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs_f64(config.connect_timeout_s))
            .redirect(reqwest::redirect::Policy::none());
        if config.http2 && config.base_url.starts_with("http://") {
            http = http.http2_prior_knowledge();
        }
        let http = http.build()?;
        Ok(Self {
            http,
            url: reqwest::Url::parse(&format!(
                "{}/chat/completions",
                config.base_url.trim_end_matches('/')
            ))?,
            model: config.model.clone(),
            api_key: config.api_key.clone(),
            idle: Duration::from_secs_f64(config.idle_timeout_s),
            retries: config.max_retries,
        })
    }

    /// The request's JSON, written once for every attempt. Writing it cannot
    /// fail for these shapes (string keys, no custom serializer that errs); if
    /// it ever did, retrying would not help, so it is not a transient error.
    fn body(&self, request: &ChatRequest) -> Result<Bytes, ProviderError> {
        serde_json::to_vec(&Body::new(&self.model, request))
            .map(Bytes::from)
            .map_err(|e| ProviderError::Protocol(format!("the request could not be written: {e}")))
    }

    async fn attempt(&self, body: &Bytes) -> Result<ModelStream, Fault> {
        let mut post = self
            .http
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body.clone());
        if let Some(key) = &self.api_key {
            post = post.bearer_auth(String::from_utf8_lossy(key.expose()));
        }
        let response = tokio::time::timeout(self.idle, post.send())
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
        Ok(sse::first(decode_sse(response.bytes_stream(), self.idle)).await?)
    }
}

impl Provider for OpenAiProvider {
    fn stream(&self, request: ChatRequest) -> BoxFuture<'_, Result<ModelStream, ProviderError>> {
        Box::pin(async move {
            let body = self.body(&request)?;
            retry::with_retries(self.retries, || self.attempt(&body)).await
        })
    }
}

/// reqwest's errors name the URL; the base URL is configuration, not a secret, but
/// keeping error text short and uniform keeps logs readable.
pub(super) fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "<provider>");
    }
    text
}

/// Decodes an SSE byte stream of chat completion chunks into model events, with a
/// timeout between chunks.
pub fn decode_sse<S, E>(bytes: S, idle: Duration) -> ModelStream
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    sse::decode(bytes, ChunkDecoder::default(), idle)
}
