//! `[llm]`: which model provider answers, and how it is reached (SPEC §12, §22).

use serde::Deserialize;

use crate::secret::Secret;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    pub provider: String,
    pub base_url: String,
    pub model: String,
    pub api_key_env: String,
    pub max_output_tokens: u32,
    /// Seconds to wait for the provider to accept a connection (an extension of §12).
    pub connect_timeout_s: f64,
    /// Seconds to wait for the next streamed chunk before the stream counts as stalled.
    pub idle_timeout_s: f64,
    /// How often a transient failure is retried before the first token.
    pub max_retries: u32,
    /// Speak HTTP/2 to an `http://` model server without negotiating it first
    /// (h2c, "prior knowledge"), so one connection carries every turn's stream
    /// instead of one socket each. Only for servers known to speak it; over
    /// `https://` HTTP/2 is negotiated anyway.
    pub http2: bool,
    /// Seconds a whole turn may take, model rounds and tools included; past this it
    /// ends as failed with an error event (SPEC §5, §12).
    pub turn_timeout_s: f64,
    /// For `provider = "local"`: the GGUF model file (`DESKBELL_LOCAL_MODEL`); when
    /// unset, the default model is downloaded once into the model cache.
    pub local_model: Option<String>,
    /// For `provider = "local"`: a `tokenizer.json` to use instead of the one the
    /// GGUF file carries (`DESKBELL_LOCAL_TOKENIZER`).
    pub local_tokenizer: Option<String>,
    /// For `provider = "local"`: how many turns may wait for the model; one more
    /// is answered 503 `provider_unavailable`.
    pub local_queue: usize,
    /// Where the default local model is kept once downloaded (from the environment).
    #[serde(skip)]
    pub local_cache: std::path::PathBuf,
    /// The Hub to download it from, when not huggingface.co (`HF_ENDPOINT`).
    #[serde(skip)]
    pub hub_endpoint: Option<String>,
    #[serde(skip)]
    pub api_key: Option<Secret>,
}

impl LlmConfig {
    /// With `provider = "anthropic"`, the base URL, key variable and model
    /// default to Anthropic's own where the file left OpenAI's defaults (SPEC §22).
    pub(super) fn provider_defaults(&mut self) {
        if self.provider != "anthropic" {
            return;
        }
        let openai = LlmConfig::default();
        if self.base_url == openai.base_url {
            self.base_url = "https://api.anthropic.com/v1".into();
        }
        if self.api_key_env == openai.api_key_env {
            self.api_key_env = "ANTHROPIC_API_KEY".into();
        }
        if self.model == openai.model {
            self.model = "claude-haiku-4-5".into();
        }
    }
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            provider: "openai".into(),
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            max_output_tokens: 1024,
            connect_timeout_s: 10.0,
            idle_timeout_s: 60.0,
            max_retries: 2,
            http2: false,
            turn_timeout_s: 120.0,
            local_model: None,
            local_tokenizer: None,
            local_queue: 4,
            local_cache: std::path::PathBuf::new(),
            hub_endpoint: None,
            api_key: None,
        }
    }
}
