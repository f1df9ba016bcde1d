//! Decoding of OpenAI Chat Completions stream chunks. The types are lenient on
//! purpose: compatible servers (Ollama, llama.cpp, vLLM) omit or add fields, and a
//! missing `id` or an unknown `finish_reason` must not break a turn.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ModelEvent, ProviderError, ToolCall};
use crate::wire::Usage;

#[derive(Debug, Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<RawUsage>,
    error: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta {
    index: Option<u32>,
    id: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Debug, Deserialize)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Turns the `data:` payloads of one streamed response into model events, gathering
/// tool calls whose id, name and arguments arrive in pieces.
#[derive(Debug, Default)]
pub struct ChunkDecoder {
    calls: BTreeMap<u32, PartialCall>,
    finished: bool,
    /// The response stopped at its token limit (`finish_reason: "length"`).
    cut: bool,
    done: bool,
}

impl super::sse::Decoder for ChunkDecoder {
    /// Decodes one `data:` payload. `[DONE]` ends the response.
    fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ProviderError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(self.flush_calls());
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|e| ProviderError::Protocol(format!("bad chunk: {e}")))?;
        if let Some(error) = chunk.error {
            return Err(ProviderError::Stream(error.to_string()));
        }
        let mut out = Vec::new();
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    out.push(ModelEvent::Text(text));
                }
                for call in delta.tool_calls.unwrap_or_default() {
                    self.absorb(call);
                }
            }
            if let Some(reason) = &choice.finish_reason {
                self.finished = true;
                self.cut |= reason == "length";
            }
        }
        if let Some(u) = chunk.usage {
            out.push(ModelEvent::Usage(Usage {
                input_tokens: u.prompt_tokens,
                output_tokens: u.completion_tokens,
            }));
        }
        Ok(out)
    }

    /// Called when the byte stream ends. A response that ended without `[DONE]` or a
    /// finish reason was cut off.
    fn finish(&mut self) -> Result<Vec<ModelEvent>, ProviderError> {
        if self.done {
            return Ok(Vec::new());
        }
        if !self.finished {
            return Err(ProviderError::Stream(
                "the response ended before it finished".into(),
            ));
        }
        self.done = true;
        Ok(self.flush_calls())
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

impl ChunkDecoder {
    fn absorb(&mut self, delta: ToolCallDelta) {
        // Servers that omit `index` send one call at a time: a new id starts a new call.
        let index = match delta.index {
            Some(i) => i,
            None => {
                let last = self.calls.keys().next_back().copied();
                match (&delta.id, last) {
                    (Some(id), Some(i))
                        if !self.calls[&i].id.is_empty() && self.calls[&i].id != *id =>
                    {
                        i + 1
                    }
                    (_, Some(i)) => i,
                    (_, None) => 0,
                }
            }
        };
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = delta.id.filter(|id| !id.is_empty()) {
            entry.id = id;
        }
        if let Some(f) = delta.function {
            if let Some(name) = f.name {
                entry.name.push_str(&name);
            }
            if let Some(args) = f.arguments {
                entry.arguments.push_str(&args);
            }
        }
    }

    fn flush_calls(&mut self) -> Vec<ModelEvent> {
        if self.calls.is_empty() {
            return Vec::new();
        }
        let last = self.calls.keys().next_back().copied();
        let cut = self.cut;
        let calls = std::mem::take(&mut self.calls)
            .into_iter()
            .map(|(i, c)| ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{i}")
                } else {
                    c.id
                },
                name: c.name,
                // The token limit cut the last call before any arguments came:
                // an object never closed, so the argument check refuses it
                // instead of reading nothing as `{}` and running it.
                arguments: match cut && Some(i) == last && c.arguments.trim().is_empty() {
                    true => "{".to_string(),
                    false => c.arguments,
                },
            })
            .collect();
        vec![ModelEvent::ToolCalls(calls)]
    }
}

#[cfg(test)]
mod tests;
