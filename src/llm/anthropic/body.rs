//! The Messages API request body, written from the turn's messages without
//! copying them. Anthropic's shape differs from OpenAI's in three ways that
//! matter here: the system prompt is a field, not a message; tool calls and
//! results are content blocks (`tool_use` in the assistant's message,
//! `tool_result` in the next user message); and roles must alternate, so
//! consecutive messages of one role (several tool results) are one message.

use std::sync::Arc;

use serde::Serialize;
use serde::ser::Serializer;
use serde_json::value::RawValue;

use crate::llm::{ChatMessage, ChatRequest, ToolSpec};

#[derive(Serialize)]
pub(super) struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<SystemBlock<'a>>,
    messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty", serialize_with = "tools")]
    tools: &'a [Arc<ToolSpec>],
    stream: bool,
}

#[derive(Serialize)]
struct SystemBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    /// The site's instructions are the same for every turn: marked so that
    /// Anthropic's prompt cache may keep them (it ignores marks on prefixes
    /// shorter than its minimum).
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
    },
    /// A text block whose words this body wrote (`note`).
    #[serde(rename = "text")]
    Note {
        text: String,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Input<'a>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// What a `tool_result` says for a tool that returned nothing: the API refuses
/// empty text.
const EMPTY_RESULT: &str = "(no output)";

impl<'a> Body<'a> {
    pub(super) fn new(model: &'a str, request: &'a ChatRequest) -> Self {
        let mut system = Vec::new();
        let mut messages: Vec<Turn<'a>> = Vec::new();
        for message in &request.messages {
            let (role, blocks) = match message {
                // The first system message is Anthropic's `system`, its stable
                // start marked for the cache; a later one (a note where a
                // person handed the conversation back) keeps its place in the
                // conversation, said as the help desk's, never marked (the API
                // takes at most four marks).
                ChatMessage::System { content } if messages.is_empty() && system.is_empty() => {
                    system.extend(system_blocks(content, request.stable_system));
                    continue;
                }
                ChatMessage::System { content } => ("user", note(content).into_iter().collect()),
                ChatMessage::User { content } => ("user", text(content).into_iter().collect()),
                ChatMessage::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut blocks: Vec<Block<'a>> = text(content).into_iter().collect();
                    blocks.extend(tool_calls.iter().map(|c| Block::ToolUse {
                        id: &c.id,
                        name: &c.name,
                        input: object(&c.arguments),
                    }));
                    ("assistant", blocks)
                }
                ChatMessage::Tool {
                    tool_call_id,
                    content,
                    is_error,
                } => (
                    "user",
                    vec![Block::ToolResult {
                        tool_use_id: tool_call_id,
                        content: if content.is_empty() {
                            EMPTY_RESULT
                        } else {
                            content
                        },
                        is_error: *is_error,
                    }],
                ),
            };
            if blocks.is_empty() {
                continue;
            }
            match messages.last_mut() {
                Some(last) if last.role == role => last.content.extend(blocks),
                _ => messages.push(Turn {
                    role,
                    content: blocks,
                }),
            }
        }
        Body {
            model,
            max_tokens: request.max_tokens,
            system,
            messages,
            tools: &request.tools,
            stream: true,
        }
    }
}

/// A note of the help desk's in the conversation, as a text block the model
/// cannot take for the visitor's words.
fn note(content: &str) -> Option<Block<'static>> {
    (!content.is_empty()).then(|| Block::Note {
        text: format!("[Help desk note, not from the visitor:] {content}"),
    })
}

/// A text block, or none for empty text (which the API refuses).
fn text(content: &str) -> Option<Block<'_>> {
    (!content.is_empty()).then_some(Block::Text { text: content })
}

/// The system prompt as one or two blocks: its stable start (marked for the
/// prompt cache) and the rest (this question's sources).
fn system_blocks(content: &str, stable: usize) -> Vec<SystemBlock<'_>> {
    let block = |text, cache: bool| SystemBlock {
        kind: "text",
        text,
        cache_control: cache.then_some(CacheControl { kind: "ephemeral" }),
    };
    if content.is_empty() {
        return Vec::new();
    }
    if stable == 0 || stable > content.len() || !content.is_char_boundary(stable) {
        return vec![block(content, false)];
    }
    let (head, tail) = content.split_at(stable);
    let mut blocks = vec![block(head, true)];
    if !tail.is_empty() {
        blocks.push(block(tail, false));
    }
    blocks
}

/// A `tool_use` block's input: the arguments as they came when they are one
/// JSON object, else an empty object (a call refused for its arguments; the
/// API accepts objects only, and the refusal that follows tells the model
/// what was wrong).
enum Input<'a> {
    Raw(&'a RawValue),
    Empty,
}

impl Serialize for Input<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Input::Raw(raw) => raw.serialize(s),
            Input::Empty => s.serialize_map(Some(0))?.end(),
        }
    }
}

fn object(arguments: &str) -> Input<'_> {
    match serde_json::from_str::<&RawValue>(arguments) {
        Ok(raw) if raw.get().trim_start().starts_with('{') => Input::Raw(raw),
        _ => Input::Empty,
    }
}

#[derive(Serialize)]
struct Offered<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a serde_json::Value,
}

fn tools<S: Serializer>(tools: &&[Arc<ToolSpec>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(tools.iter().map(|t| Offered {
        name: &t.name,
        description: &t.description,
        input_schema: &t.parameters,
    }))
}
