//! Decoding of the Messages API's streamed events: `message_start` (input
//! usage), `content_block_start` / `content_block_delta` (`text_delta`,
//! `input_json_delta`) / `content_block_stop`, `message_delta` (stop reason and
//! output usage), `message_stop`, `ping` and `error`. Unknown event and block
//! types (thinking, citations, later additions) are skipped, as the API asks
//! of clients.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::llm::sse::Decoder;
use crate::llm::{ModelEvent, ProviderError, ToolCall};
use crate::wire::Usage;

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u32,
        content_block: BlockStart,
    },
    ContentBlockDelta {
        index: u32,
        delta: Delta,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        usage: Option<RawUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: ErrorBody,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
struct StartMessage {
    usage: Option<RawUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStart {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Default, Deserialize)]
struct MessageDeltaBody {
    stop_reason: Option<String>,
}

/// Usage as the API reports it. Cached prompt tokens are counted apart from
/// `input_tokens`; the budget is charged for all of them.
#[derive(Debug, Deserialize)]
struct RawUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    input: String,
}

/// The state of one streamed message: its tool calls as their input arrives,
/// and its usage until `message_stop` reports it once.
#[derive(Debug, Default)]
pub struct EventDecoder {
    open: BTreeMap<u32, PartialCall>,
    closed: Vec<(u32, PartialCall)>,
    /// Each usage figure as last reported: a later event that leaves one out
    /// (a gateway's `message_delta` without the cache figures) keeps it.
    input_tokens: Option<u64>,
    cache_creation_tokens: Option<u64>,
    cache_read_tokens: Option<u64>,
    output_tokens: Option<u64>,
    stop_reason: Option<String>,
    done: bool,
}

impl Decoder for EventDecoder {
    fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ProviderError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let event: Event = serde_json::from_str(data)
            .map_err(|e| ProviderError::Protocol(format!("bad event: {e}")))?;
        Ok(match event {
            Event::MessageStart { message } => {
                if let Some(usage) = message.usage {
                    self.count(&usage);
                }
                Vec::new()
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => match content_block {
                BlockStart::Text { text } => text_event(text),
                BlockStart::ToolUse { id, name } => {
                    self.open.insert(
                        index,
                        PartialCall {
                            id,
                            name,
                            input: String::new(),
                        },
                    );
                    Vec::new()
                }
                BlockStart::Unknown => Vec::new(),
            },
            Event::ContentBlockDelta { index, delta } => match delta {
                Delta::Text { text } => text_event(text),
                Delta::InputJson { partial_json } => {
                    let Some(call) = self.open.get_mut(&index) else {
                        return Err(ProviderError::Protocol(format!(
                            "input for block {index}, which is not an open tool call"
                        )));
                    };
                    call.input.push_str(&partial_json);
                    Vec::new()
                }
                Delta::Unknown => Vec::new(),
            },
            Event::ContentBlockStop { index } => {
                if let Some(call) = self.open.remove(&index) {
                    self.closed.push((index, call));
                }
                Vec::new()
            }
            Event::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                if let Some(usage) = usage {
                    self.count(&usage);
                }
                Vec::new()
            }
            Event::MessageStop => {
                self.done = true;
                self.flush()
            }
            Event::Ping | Event::Unknown => Vec::new(),
            Event::Error { error } => {
                let text = format!("{}: {}", error.kind, error.message);
                // Overloaded, rate-limited or failing on its side: worth another
                // try before the first token. A request it refuses is not.
                return Err(match error.kind.as_str() {
                    "overloaded_error" | "api_error" | "rate_limit_error" | "timeout_error" => {
                        ProviderError::Stream(text)
                    }
                    _ => ProviderError::Protocol(text),
                });
            }
        })
    }

    /// A stream that ended without `message_stop` was cut off.
    fn finish(&mut self) -> Result<Vec<ModelEvent>, ProviderError> {
        if self.done {
            return Ok(Vec::new());
        }
        Err(ProviderError::Stream(
            "the response ended before message_stop".into(),
        ))
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

impl EventDecoder {
    /// Usage figures are totals so far: a later report replaces an earlier one.
    fn count(&mut self, usage: &RawUsage) {
        let fields = [
            (&mut self.input_tokens, usage.input_tokens),
            (
                &mut self.cache_creation_tokens,
                usage.cache_creation_input_tokens,
            ),
            (&mut self.cache_read_tokens, usage.cache_read_input_tokens),
            (&mut self.output_tokens, usage.output_tokens),
        ];
        for (slot, reported) in fields {
            if reported.is_some() {
                *slot = reported;
            }
        }
    }

    /// The message's usage, then its tool calls in block order. A response
    /// stopped by `max_tokens` cut its last tool call short: that call's input
    /// is passed as far as it came, and one with no input at all as an object
    /// never closed (`{`), so the argument check refuses it instead of reading
    /// nothing as `{}` and running a call the model never finished.
    fn flush(&mut self) -> Vec<ModelEvent> {
        let mut out = Vec::new();
        let inputs = [
            self.input_tokens,
            self.cache_creation_tokens,
            self.cache_read_tokens,
        ];
        if inputs.iter().any(Option::is_some) || self.output_tokens.is_some() {
            out.push(ModelEvent::Usage(Usage {
                input_tokens: inputs.iter().flatten().sum(),
                output_tokens: self.output_tokens.unwrap_or(0),
            }));
        }
        let mut calls: Vec<(u32, PartialCall)> = std::mem::take(&mut self.closed);
        calls.extend(std::mem::take(&mut self.open));
        calls.sort_by_key(|(index, _)| *index);
        let cut = matches!(
            self.stop_reason.as_deref(),
            Some("max_tokens" | "model_context_window_exceeded")
        );
        let last = calls.len().saturating_sub(1);
        let calls: Vec<ToolCall> = calls
            .into_iter()
            .enumerate()
            .map(|(n, (_, call))| {
                // Blank input reads as `{}` to the argument check, as empty does.
                let arguments = match call.input.trim().is_empty() {
                    true if cut && n == last => "{".to_string(),
                    true => "{}".to_string(),
                    false => call.input,
                };
                ToolCall {
                    id: call.id,
                    name: call.name,
                    arguments,
                }
            })
            .collect();
        if !calls.is_empty() {
            out.push(ModelEvent::ToolCalls(calls));
        }
        out
    }
}

fn text_event(text: String) -> Vec<ModelEvent> {
    match text.is_empty() {
        true => Vec::new(),
        false => vec![ModelEvent::Text(text)],
    }
}
