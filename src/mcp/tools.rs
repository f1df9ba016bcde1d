//! MCP tools as site tools (SPEC §17): their names made unique across the
//! site's sources, their default policy from the server's annotations with the
//! operator's word winning, their labels and descriptions cleaned, and a call's
//! result read as text for the model.

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::ServiceError;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

use super::{Server, Target};
use crate::config::{Policy, ToolConfig};
use crate::states::Reason;
use crate::tools::http::MAX_RESULT_BYTES;
use crate::tools::render::{hidden, words};

/// Longest label and description kept from a server (they are untrusted text).
const MAX_LABEL_CHARS: usize = 80;
const MAX_DESCRIPTION_CHARS: usize = 2_000;

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

/// The site tools of every server, after the file's tools (`taken`). A tool
/// keeps the server's name unless an earlier source — the file's tools, then
/// the servers in the file's order — already has a tool of that name; then it
/// is called `<server>_<name>`. An earlier source's names never move because a
/// later one lists something new, so the console's changes (kept by name) and
/// pending cards stay with their tool.
pub fn site_tools(taken: &HashSet<String>, servers: &[Arc<Server>]) -> Vec<ToolConfig> {
    let mut used = taken.clone();
    let mut out = Vec::new();
    for server in servers {
        for t in server.listed().iter() {
            let plain = model_name(&t.name);
            let name = match used.contains(&plain) {
                true => model_name(&format!("{}_{}", server.name(), t.name)),
                false => plain,
            };
            if !used.insert(name.clone()) {
                tracing::warn!(server = %server.name(), tool = %t.name, "an MCP tool whose name clashes even with its server's prefix is not offered");
                continue;
            }
            out.push(tool_config(server, t, name));
        }
    }
    out
}

fn tool_config(server: &Arc<Server>, t: &Listed, name: String) -> ToolConfig {
    let config = server.config();
    let word = config.tools.get(&t.name).cloned().unwrap_or_default();
    // The operator's word first; the server's annotation only picks the default,
    // and only "read-only" can make that default automatic.
    let policy = word.policy.unwrap_or(match t.read_only {
        true => Policy::Auto,
        false => Policy::Confirm,
    });
    let label = word.label.unwrap_or_else(|| {
        let title = t.title.as_deref().map(|s| clean(s, MAX_LABEL_CHARS));
        match title {
            Some(title) if !title.is_empty() => title,
            _ => clean(&words(&t.name), MAX_LABEL_CHARS),
        }
    });
    let description = word
        .description
        .unwrap_or_else(|| clean(&t.description, MAX_DESCRIPTION_CHARS));
    ToolConfig {
        name,
        label,
        description,
        policy,
        url: format!("mcp://{}/{}", server.name(), t.name),
        timeout_s: config.timeout_s,
        secret_env: None,
        input_schema: t.schema.clone(),
        secret: None,
        mcp: Some(Target {
            server: Arc::clone(server),
            tool: t.name.clone(),
        }),
    }
}

/// A name the model's API accepts: letters, digits, `_` and `-`, at most 64.
fn model_name(name: &str) -> String {
    name.chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                true => c,
                false => '_',
            },
        )
        .take(64)
        .collect()
}

/// Untrusted text on one line: invisible and control characters dropped,
/// white space folded, cut at `max` characters.
fn clean(text: &str, max: usize) -> String {
    let mut out = String::new();
    for word in text
        .split(|c: char| c.is_whitespace())
        .map(|w| {
            w.chars()
                .filter(|&c| !hidden(c) && !c.is_control())
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&word);
    }
    match out.chars().count() > max {
        true => out.chars().take(max - 1).chain(['…']).collect(),
        false => out,
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
    fn names_the_model_api_refuses_are_made_safe() {
        assert_eq!(model_name("read_text_file"), "read_text_file");
        assert_eq!(model_name("files.read"), "files_read");
        assert_eq!(model_name(&"x".repeat(80)).len(), 64);
    }

    #[test]
    fn untrusted_text_loses_hidden_characters_and_is_cut() {
        assert_eq!(clean("Save\u{202E} a\n\nfile\u{200B}", 80), "Save a file");
        assert_eq!(clean(&"a".repeat(100), 10).chars().count(), 10);
    }

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
