//! A client for Anthropic's Messages API with streaming (SPEC §22): the
//! request in Anthropic's own shape (`body.rs`), its event stream decoded into
//! the same model events as every provider (`events.rs`), retried before the
//! first token on 429 and 529 as `retry-after` says (`../retry.rs`).

mod body;
mod events;

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use reqwest::header::CONTENT_TYPE;

pub use events::EventDecoder;

use super::openai::without_url;
use super::retry::{self, Fault};
use super::{ChatRequest, ModelStream, Provider, ProviderError, sse};
use crate::config::LlmConfig;
use crate::secret::Secret;

/// The API version this client speaks; Anthropic pins behaviour to it.
const API_VERSION: &str = "2023-06-01";

pub struct AnthropicProvider {
    http: reqwest::Client,
    /// `…/messages` (the base URL is `https://api.anthropic.com/v1` by default).
    url: reqwest::Url,
    model: String,
    api_key: Option<Secret>,
    idle: Duration,
    retries: u32,
}

impl AnthropicProvider {
    pub fn new(config: &LlmConfig) -> anyhow::Result<Self> {
        if config.api_key.is_none() {
            tracing::warn!(
                variable = %config.api_key_env,
                "no Anthropic API key is set: requests go without x-api-key"
            );
        }
        let mut http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs_f64(config.connect_timeout_s))
            .redirect(reqwest::redirect::Policy::none());
        // A local gateway in front of the API may speak h2c, as for OpenAI's.
        if config.http2 && config.base_url.starts_with("http://") {
            http = http.http2_prior_knowledge();
        }
        let http = http.build()?;
        Ok(Self {
            http,
            url: reqwest::Url::parse(&format!(
                "{}/messages",
                config.base_url.trim_end_matches('/')
            ))?,
            model: config.model.clone(),
            api_key: config.api_key.clone(),
            idle: Duration::from_secs_f64(config.idle_timeout_s),
            retries: config.max_retries,
        })
    }

    fn body(&self, request: &ChatRequest) -> Result<Bytes, ProviderError> {
        serde_json::to_vec(&body::Body::new(&self.model, request))
            .map(Bytes::from)
            .map_err(|e| ProviderError::Protocol(format!("the request could not be written: {e}")))
    }

    async fn attempt(&self, body: &Bytes) -> Result<ModelStream, Fault> {
        let mut post = self
            .http
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header("anthropic-version", API_VERSION)
            .body(body.clone());
        if let Some(key) = &self.api_key {
            let mut value =
                reqwest::header::HeaderValue::from_bytes(key.expose()).map_err(|_| {
                    ProviderError::Protocol("the API key is not a valid header value".into())
                })?;
            value.set_sensitive(true);
            post = post.header("x-api-key", value);
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
        let events = sse::decode(response.bytes_stream(), EventDecoder::default(), self.idle);
        Ok(sse::first(events).await?)
    }
}

impl Provider for AnthropicProvider {
    fn stream(&self, request: ChatRequest) -> BoxFuture<'_, Result<ModelStream, ProviderError>> {
        Box::pin(async move {
            let body = self.body(&request)?;
            retry::with_retries(self.retries, || self.attempt(&body)).await
        })
    }
}

#[cfg(test)]
mod tests;
