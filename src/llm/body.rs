//! The Chat Completions request body, serialized straight from the turn's
//! messages and tools. Built as a `serde_json::Value` first, every request
//! copied its whole prompt (the system message with the question's sources)
//! into a tree of maps and strings, serialized that, and freed it: a few
//! percent of a pinned server's core under a hundred streams (BENCHMARKS.md).
//! These borrowed shapes write the same JSON with no copy in between.

use serde::Serialize;
use serde::ser::Serializer;

use super::{ChatMessage, ChatRequest, ToolCall, ToolSpec};

/// The body of one streamed completion request.
#[derive(Serialize)]
pub(super) struct Body<'a> {
    pub model: &'a str,
    #[serde(serialize_with = "messages")]
    pub messages: &'a [ChatMessage],
    pub stream: bool,
    pub stream_options: StreamOptions,
    pub max_tokens: u32,
    /// Left out when the round offers no tools (the last round must answer in
    /// words, and some providers refuse an empty list).
    #[serde(skip_serializing_if = "<[_]>::is_empty", serialize_with = "tools")]
    pub tools: &'a [std::sync::Arc<ToolSpec>],
}

#[derive(Serialize)]
pub(super) struct StreamOptions {
    pub include_usage: bool,
}

impl<'a> Body<'a> {
    pub(super) fn new(model: &'a str, request: &'a ChatRequest) -> Self {
        Body {
            model,
            messages: &request.messages,
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            max_tokens: request.max_tokens,
            tools: &request.tools,
        }
    }
}

/// One message as the provider reads it.
#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Message<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    /// `content` is null beside tool calls when the model said nothing, as the
    /// API writes it; an answer in words always has its text.
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "<[_]>::is_empty", serialize_with = "calls")]
        tool_calls: &'a [ToolCall],
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

impl<'a> From<&'a ChatMessage> for Message<'a> {
    fn from(message: &'a ChatMessage) -> Self {
        match message {
            ChatMessage::System { content } => Message::System { content },
            ChatMessage::User { content } => Message::User { content },
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => Message::Assistant {
                content: (tool_calls.is_empty() || !content.is_empty()).then_some(content),
                tool_calls,
            },
            ChatMessage::Tool {
                tool_call_id,
                content,
                ..
            } => Message::Tool {
                tool_call_id,
                content,
            },
        }
    }
}

/// `{"type": "function", "function": …}`, the shape of both a tool offered and
/// a call made.
#[derive(Serialize)]
struct Function<T> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: T,
}

fn function<T>(function: T) -> Function<T> {
    Function {
        kind: "function",
        function,
    }
}

#[derive(Serialize)]
struct Offered<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: Named<'a>,
}

#[derive(Serialize)]
struct Named<'a> {
    name: &'a str,
    arguments: &'a str,
}

fn messages<S: Serializer>(messages: &&[ChatMessage], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(messages.iter().map(Message::from))
}

fn tools<S: Serializer>(tools: &&[std::sync::Arc<ToolSpec>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(tools.iter().map(|t| {
        function(Offered {
            name: &t.name,
            description: &t.description,
            parameters: &t.parameters,
        })
    }))
}

fn calls<S: Serializer>(calls: &&[ToolCall], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(calls.iter().map(|c| Call {
        id: &c.id,
        kind: "function",
        function: Named {
            name: &c.name,
            arguments: &c.arguments,
        },
    }))
}

#[cfg(test)]
mod tests;
