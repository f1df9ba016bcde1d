//! The shapes of JSON the database keeps: a turn's model transcript (to resume it
//! after a card or a crash), a message's citations and a card's argument lines.
//!
//! They are storage's own versioned structs, not the `llm` or `wire` types, so that
//! renaming a field there can never silently drop citations or break a pending
//! card: a row is written as `{"v": 1, …}` and read back through these types only,
//! and a row that does not parse is an error, never an empty default. Rows written
//! before the versioned form (a bare array) are still read.

use serde::{Deserialize, Serialize};

use crate::llm::{ChatMessage, ToolCall};
use crate::wire::{ArgLine, Citation};

const VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
#[error("a stored {what} does not parse: {source}")]
pub struct StoredError {
    what: &'static str,
    source: serde_json::Error,
}

#[derive(Serialize, Deserialize)]
struct Versioned<T> {
    v: u32,
    items: Vec<T>,
}

/// Reads `{"v": 1, "items": [...]}`, or the bare array written before versions.
fn decode<T: for<'de> Deserialize<'de>>(
    what: &'static str,
    text: &str,
) -> Result<Vec<T>, StoredError> {
    let error = |source| StoredError { what, source };
    match text.trim_start().starts_with('[') {
        true => serde_json::from_str(text).map_err(error),
        false => {
            let versioned: Versioned<T> = serde_json::from_str(text).map_err(error)?;
            if versioned.v != VERSION {
                return Err(error(serde::de::Error::custom(format!(
                    "version {} is newer than this server knows",
                    versioned.v
                ))));
            }
            Ok(versioned.items)
        }
    }
}

fn encode<T: Serialize>(items: Vec<T>) -> String {
    // Plain structs of strings and numbers always serialise.
    serde_json::to_string(&Versioned { v: VERSION, items }).unwrap_or_default()
}

/// One message of a stored transcript. The system message is never stored: it is
/// rebuilt from the site's configuration when the turn resumes.
#[derive(Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum StoredMessage {
    User {
        content: String,
    },
    Assistant {
        content: String,
        #[serde(default)]
        tool_calls: Vec<StoredToolCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
        /// Absent in transcripts written before providers were told of errors.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

#[derive(Serialize, Deserialize)]
struct StoredToolCall {
    id: String,
    name: String,
    arguments: String,
}

pub fn encode_transcript(messages: &[ChatMessage]) -> String {
    let items: Vec<StoredMessage> = messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::System { .. } => None,
            ChatMessage::User { content } => Some(StoredMessage::User {
                content: content.clone(),
            }),
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => Some(StoredMessage::Assistant {
                content: content.clone(),
                tool_calls: tool_calls
                    .iter()
                    .map(|c| StoredToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
            }),
            ChatMessage::Tool {
                tool_call_id,
                content,
                is_error,
            } => Some(StoredMessage::Tool {
                tool_call_id: tool_call_id.clone(),
                content: content.clone(),
                is_error: *is_error,
            }),
        })
        .collect();
    encode(items)
}

pub fn decode_transcript(text: &str) -> Result<Vec<ChatMessage>, StoredError> {
    Ok(decode::<StoredMessage>("transcript", text)?
        .into_iter()
        .map(|m| match m {
            StoredMessage::User { content } => ChatMessage::User { content },
            StoredMessage::Assistant {
                content,
                tool_calls,
            } => ChatMessage::Assistant {
                content,
                tool_calls: tool_calls
                    .into_iter()
                    .map(|c| ToolCall {
                        id: c.id,
                        name: c.name,
                        arguments: c.arguments,
                    })
                    .collect(),
            },
            StoredMessage::Tool {
                tool_call_id,
                content,
                is_error,
            } => ChatMessage::Tool {
                tool_call_id,
                content,
                is_error,
            },
        })
        .collect())
}

#[derive(Serialize, Deserialize)]
struct StoredCitation {
    n: u32,
    title: String,
    url: Option<String>,
    snippet: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    found_by: Vec<String>,
}

pub fn encode_citations(citations: &[Citation]) -> String {
    encode(
        citations
            .iter()
            .map(|c| StoredCitation {
                n: c.n,
                title: c.title.clone(),
                url: c.url.clone(),
                snippet: c.snippet.clone(),
                found_by: c.found_by.clone(),
            })
            .collect(),
    )
}

pub fn decode_citations(text: &str) -> Result<Vec<Citation>, StoredError> {
    Ok(decode::<StoredCitation>("citation list", text)?
        .into_iter()
        .map(|c| Citation {
            n: c.n,
            title: c.title,
            url: c.url,
            snippet: c.snippet,
            found_by: c.found_by,
        })
        .collect())
}

#[derive(Serialize, Deserialize)]
struct StoredLine {
    name: String,
    value: String,
}

pub fn encode_lines(lines: &[ArgLine]) -> String {
    encode(
        lines
            .iter()
            .map(|l| StoredLine {
                name: l.name.clone(),
                value: l.value.clone(),
            })
            .collect(),
    )
}

pub fn decode_lines(text: &str) -> Result<Vec<ArgLine>, StoredError> {
    Ok(decode::<StoredLine>("argument line list", text)?
        .into_iter()
        .map(|l| ArgLine {
            name: l.name,
            value: l.value,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_survives_the_round_trip_without_its_system_message() {
        let messages = vec![
            ChatMessage::System {
                content: "rules".into(),
            },
            ChatMessage::User {
                content: "Cancel 42".into(),
            },
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "cancel_order".into(),
                    arguments: r#"{"order_id":42}"#.into(),
                }],
            },
            ChatMessage::Tool {
                tool_call_id: "c0".into(),
                content: "ok".into(),
                is_error: false,
            },
        ];
        let text = encode_transcript(&messages);
        assert!(text.starts_with(r#"{"v":1,"#), "{text}");
        assert_eq!(decode_transcript(&text).unwrap(), messages[1..]);
    }

    #[test]
    fn rows_written_before_versions_are_still_read() {
        let legacy = r#"[{"role":"user","content":"hi"}]"#;
        assert_eq!(
            decode_transcript(legacy).unwrap(),
            [ChatMessage::User {
                content: "hi".into()
            }]
        );
        let citations = r#"[{"n":1,"title":"Shipping","url":null,"snippet":"s"}]"#;
        assert_eq!(decode_citations(citations).unwrap()[0].title, "Shipping");
    }

    #[test]
    fn a_row_that_does_not_parse_is_an_error_not_an_empty_list() {
        assert!(decode_citations(r#"{"v":1,"items":[{"number":1}]}"#).is_err());
        assert!(decode_transcript(r#"[{"role":"wizard"}]"#).is_err());
        assert!(decode_lines(r#"{"v":2,"items":[]}"#).is_err());
    }
}
