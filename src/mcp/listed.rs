//! What an MCP server says, read: a listed tool (`Listed`) and a call's answer
//! as text for the model (`judge`). The supervisor (`server.rs`) reads with
//! these; `tools.rs` makes listed tools site tools.

use rmcp::ServiceError;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

use crate::states::Reason;
use crate::tools::http::MAX_RESULT_BYTES;

/// A tool as a server listed it, with what Deskbell reads of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub schema: Value,
    /// `readOnlyHint`; absent means not read-only.
    pub read_only: bool,
}

impl Listed {
    /// The server's tool, or `None` (logged) when its input schema cannot be
    /// used: one bad tool must not take the server's others down with it.
    pub fn from_mcp(tool: &rmcp::model::Tool) -> Option<Listed> {
        let schema = Value::Object((*tool.input_schema).clone());
        if let Err(why) = crate::tools::schema::check_schema(&schema) {
            tracing::warn!(tool = %tool.name, reason = %why, "an MCP tool with an unusable input schema is not offered");
            return None;
        }
        let annotations = tool.annotations.as_ref();
        Some(Listed {
            name: tool.name.to_string(),
            title: tool
                .title
                .clone()
                .or_else(|| annotations.and_then(|a| a.title.clone())),
            description: tool.description.as_deref().unwrap_or_default().to_string(),
            schema,
            read_only: annotations.and_then(|a| a.read_only_hint) == Some(true),
        })
    }
}

/// What a `tools/call` answer means: the text for the model, or why the call
/// failed and what the model is told; and whether the connection it came on is
/// broken. A server that answered — with a result marked `isError` or with a
/// JSON-RPC error — is still there; only a transport failure breaks it.
pub fn judge(
    answer: Result<CallToolResult, ServiceError>,
) -> (Result<String, (Reason, String)>, bool) {
    match answer {
        Ok(result) => {
            let text = result_text(&result);
            match result.is_error == Some(true) {
                true => (
                    Err((
                        Reason::ToolError,
                        format!("The tool reported an error: {text}"),
                    )),
                    false,
                ),
                false => (Ok(text), false),
            }
        }
        Err(ServiceError::McpError(e)) => (
            Err((
                Reason::ToolError,
                cut(
                    format!("The tool reported an error: {}", e.message),
                    MAX_RESULT_BYTES,
                ),
            )),
            false,
        ),
        Err(_) => (
            Err((
                Reason::Unreachable,
                "The tool's server stopped before it answered.".into(),
            )),
            true,
        ),
    }
}

/// What the model reads of a result: its text content, one block a paragraph
/// (other kinds named), else the structured content; cut at 16 KiB.
pub fn result_text(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(_) => "[an image]".into(),
            ContentBlock::Audio(_) => "[a sound]".into(),
            ContentBlock::Resource(_) => "[an embedded resource]".into(),
            ContentBlock::ResourceLink(link) => format!("[a link to {}]", link.uri),
            _ => "[content of another kind]".into(),
        })
        .collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    cut(parts.join("\n\n"), MAX_RESULT_BYTES)
}

/// Text cut at a character boundary at most `max` bytes in.
pub fn cut(mut text: String, max: usize) -> String {
    text.truncate(text.floor_char_boundary(max));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ErrorData;

    #[test]
    fn an_error_answer_fails_the_call_without_breaking_the_connection() {
        let refused = ServiceError::McpError(ErrorData::invalid_params("no such tool", None));
        let (judged, broken) = judge(Err(refused));
        assert_eq!(
            judged,
            Err((
                Reason::ToolError,
                "The tool reported an error: no such tool".into()
            ))
        );
        assert!(!broken);
        let (judged, broken) = judge(Err(ServiceError::TransportClosed));
        assert_eq!(judged.map_err(|(r, _)| r), Err(Reason::Unreachable));
        assert!(broken, "a closed transport is a broken connection");
        let error = CallToolResult::error(vec![ContentBlock::text("disk full")]);
        let (judged, broken) = judge(Ok(error));
        assert_eq!(
            judged,
            Err((
                Reason::ToolError,
                "The tool reported an error: disk full".into()
            ))
        );
        assert!(!broken);
    }

    #[test]
    fn a_cut_result_stays_valid_text() {
        let text = "é".repeat(10);
        assert_eq!(cut(text, 5), "éé");
    }
}
