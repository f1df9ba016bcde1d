//! What the scripted model server is told to say: a reply per request, made
//! of pieces that either protocol (`fake_llm.rs` for OpenAI's,
//! `fake_anthropic.rs` for Anthropic's) plays in its own shape.

use std::time::Duration;

use serde_json::Value;

#[derive(Debug, Clone)]
pub enum Piece {
    Text(String),
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    Usage {
        input: u64,
        output: u64,
    },
    Pause(Duration),
    /// Sends no usage chunk, as some servers do (and streams cut short).
    NoUsage,
    /// Text sent as one delta, however long.
    Chunk(String),
    /// Breaks the connection off here.
    Cut,
    /// Ends the response with this stop reason instead of the natural one
    /// (`"max_tokens"`, which OpenAI calls `"length"`).
    Stop(String),
    /// Sends an error event of this kind (`"overloaded_error"`) and ends.
    Error(String),
}

/// Which provider's wire protocol the stand-in speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Anthropic,
}

impl Dialect {
    /// The `[llm] provider` that speaks it.
    pub fn provider(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Anthropic => "anthropic",
        }
    }
}

#[derive(Debug, Clone)]
pub enum Reply {
    Stream(Vec<Piece>),
    Status(u16),
    /// An error status with a `retry-after` header of this many seconds.
    Busy {
        status: u16,
        retry_after_s: u32,
    },
    /// Never answers (until the client gives up).
    Stall,
}

impl Reply {
    pub fn text(text: &str) -> Reply {
        Reply::Stream(vec![Piece::Text(text.into())])
    }

    /// One response with these tool calls, named with their arguments.
    pub fn tool_calls(calls: &[(&str, Value)]) -> Reply {
        Reply::Stream(
            calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| Piece::ToolCall {
                    id: format!("call_fake_{i}"),
                    name: name.to_string(),
                    arguments: args.to_string(),
                })
                .collect(),
        )
    }
}

/// Splits text into pieces of at most `n` characters.
pub(super) fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}
