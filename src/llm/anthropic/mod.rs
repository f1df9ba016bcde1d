//! A client for Anthropic's Messages API with streaming (SPEC §22): the
//! request in Anthropic's own shape (`body.rs`), its event stream decoded into
//! the same model events as every provider (`events.rs`), retried before the
//! first token on 429 and 529 as `retry-after` says (`../retry.rs`).

mod body;
mod events;

use bytes::Bytes;
use futures_util::future::BoxFuture;

pub use events::EventDecoder;

use super::remote::{self, Remote};
use super::retry::{self, Fault};
use super::{ChatRequest, ModelStream, Provider, ProviderError};
use crate::config::LlmConfig;

/// The API version this client speaks; Anthropic pins behaviour to it.
const API_VERSION: &str = "2023-06-01";

pub struct AnthropicProvider {
    /// `…/messages` (the base URL is `https://api.anthropic.com/v1` by default).
    remote: Remote,
}

impl AnthropicProvider {
    pub fn new(config: &LlmConfig) -> anyhow::Result<Self> {
        if config.api_key.is_none() {
            tracing::warn!(
                variable = %config.api_key_env,
                "no Anthropic API key is set: requests go without x-api-key"
            );
        }
        Ok(Self {
            remote: Remote::new(config, "messages")?,
        })
    }

    async fn attempt(&self, body: &Bytes) -> Result<ModelStream, Fault> {
        let r = &self.remote;
        let mut post = r.post(body).header("anthropic-version", API_VERSION);
        if let Some(key) = &r.api_key {
            let mut value =
                reqwest::header::HeaderValue::from_bytes(key.expose()).map_err(|_| {
                    ProviderError::Protocol("the API key is not a valid header value".into())
                })?;
            value.set_sensitive(true);
            post = post.header("x-api-key", value);
        }
        remote::open(post, r.idle, EventDecoder::default()).await
    }
}

impl Provider for AnthropicProvider {
    fn stream(&self, request: ChatRequest) -> BoxFuture<'_, Result<ModelStream, ProviderError>> {
        Box::pin(async move {
            let body = remote::json(&body::Body::new(&self.remote.model, &request))?;
            retry::with_retries(self.remote.retries, || self.attempt(&body)).await
        })
    }
}

#[cfg(test)]
mod tests;
