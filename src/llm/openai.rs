//! A client for OpenAI-compatible Chat Completions with streaming (SSE), tool-call
//! deltas and usage. Retries transient faults before the first token only, since a
//! retry after text was shown would repeat it.

use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::body::Body;
use super::chunks::ChunkDecoder;
use super::remote::{self, Remote};
use super::retry::{self, Fault};
use super::{ChatRequest, ModelStream, Provider, ProviderError};
use crate::config::LlmConfig;

pub struct OpenAiProvider {
    /// `…/chat/completions`.
    remote: Remote,
}

impl OpenAiProvider {
    pub fn new(config: &LlmConfig) -> anyhow::Result<Self> {
        Ok(Self {
            remote: Remote::new(config, "chat/completions")?,
        })
    }

    async fn attempt(&self, body: &Bytes) -> Result<ModelStream, Fault> {
        let r = &self.remote;
        let mut post = r.post(body);
        if let Some(key) = &r.api_key {
            post = post.bearer_auth(String::from_utf8_lossy(key.expose()));
        }
        remote::open(post, r.idle, ChunkDecoder::default()).await
    }
}

impl Provider for OpenAiProvider {
    fn stream(&self, request: ChatRequest) -> BoxFuture<'_, Result<ModelStream, ProviderError>> {
        Box::pin(async move {
            let body = remote::json(&Body::new(&self.remote.model, &request))?;
            retry::with_retries(self.remote.retries, || self.attempt(&body)).await
        })
    }
}
