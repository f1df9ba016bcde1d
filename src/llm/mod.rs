//! The model provider interface and its implementations: OpenAI-compatible
//! servers (`openai.rs`), Anthropic's Messages API (`anthropic/`) and the
//! embedded model (`local/`).
//!
//! The turn engine sees only `Provider`: a request goes in, a stream of text deltas,
//! assembled tool calls and usage comes out. Anything that speaks that interface
//! (a remote API today, an embedded model later) plugs in the same way.

pub mod anthropic;
mod body;
pub mod chunks;
#[cfg(feature = "local-model")]
pub mod local;
pub(crate) mod openai;
mod remote;
#[cfg(feature = "testkit")]
pub(crate) use remote::H2_CONNECTION_WINDOW;
mod retry;
pub mod sse;

pub use anthropic::AnthropicProvider;
#[cfg(feature = "local-model")]
pub use local::LocalProvider;
pub use openai::OpenAiProvider;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};

use crate::wire::Usage;

/// One message of the model transcript. Stored with a pending call so the turn can
/// be resumed after the visitor answers the card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        content: String,
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
        /// The call did not run or failed: Anthropic's `tool_result` says so
        /// with `is_error`; OpenAI's shape has no such field.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// A tool call as the model made it: the arguments are its raw JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<std::sync::Arc<ToolSpec>>,
    pub max_tokens: u32,
    /// How many bytes at the start of the first (system) message are the same for
    /// every turn of the site: its instructions and rules, before the question's
    /// sources. A provider that keeps a computed prompt prefix may keep that much.
    pub stable_system: usize,
}

/// What a model stream yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelEvent {
    Text(String),
    /// The complete tool calls of the response, once all their deltas arrived.
    ToolCalls(Vec<ToolCall>),
    Usage(Usage),
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("the provider could not be reached: {0}")]
    Connect(String),
    #[error("the provider answered with status {0}")]
    Status(u16),
    #[error("the provider sent nothing for too long")]
    Timeout,
    #[error("the provider's stream broke off: {0}")]
    Stream(String),
    #[error("the provider sent something unreadable: {0}")]
    Protocol(String),
    /// The embedded model's queue of waiting turns is full.
    #[error("the local model is busy")]
    Busy,
    /// The turn reached `[llm] turn_timeout_s` while waiting for the model.
    #[error("the turn ran out of time")]
    TurnTimeout,
}

impl ProviderError {
    /// A word for the metrics' `kind` label.
    pub fn kind(&self) -> &'static str {
        match self {
            ProviderError::Connect(_) => "connect",
            ProviderError::Status(_) => "status",
            ProviderError::Timeout => "timeout",
            ProviderError::Stream(_) => "stream",
            ProviderError::Protocol(_) => "protocol",
            ProviderError::Busy => "busy",
            ProviderError::TurnTimeout => "turn_timeout",
        }
    }

    /// Worth retrying before the first token: connection faults, 429 and 5xx.
    pub fn is_transient(&self) -> bool {
        match self {
            ProviderError::Connect(_) | ProviderError::Timeout | ProviderError::Stream(_) => true,
            ProviderError::Status(s) => *s == 429 || *s >= 500,
            ProviderError::Protocol(_) | ProviderError::Busy | ProviderError::TurnTimeout => false,
        }
    }
}

pub type ModelStream = BoxStream<'static, Result<ModelEvent, ProviderError>>;

pub trait Provider: Send + Sync + 'static {
    /// Starts a streamed completion. It resolves once the first piece of the answer
    /// has arrived, so a failure here means nothing was streamed yet.
    fn stream(&self, request: ChatRequest) -> BoxFuture<'_, Result<ModelStream, ProviderError>>;
}

/// A rough token count for text a provider reported no usage for (about four
/// characters a token for English), so a budget is charged something.
pub fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}
