//! MCP tools as site tools (SPEC §17): their names made unique across the
//! site's sources, their default policy from the server's annotations with the
//! operator's word winning, their labels and descriptions cleaned. What a
//! server lists and answers is read in `listed.rs`.

use std::collections::HashSet;
use std::sync::Arc;

use super::listed::Listed;
use super::{Server, Target};
use crate::config::{Policy, ToolConfig};
use crate::tools::render::{hidden, words};

/// Longest label and description kept from a server (they are untrusted text).
const MAX_LABEL_CHARS: usize = 80;
const MAX_DESCRIPTION_CHARS: usize = 2_000;

/// The site tools of every server, after the file's tools (`taken`). A tool
/// keeps the server's name unless an earlier source — the file's tools, then
/// the servers in the file's order — already has a tool of that name; then it
/// is called `<server>_<name>`. An earlier source's names never move because a
/// later one lists something new, so the console's changes (kept by name) and
/// pending cards stay with their tool.
/// Each comes with where its calls go (`Target`): the configuration stays data,
/// and the catalog keeps the live server beside it.
pub fn site_tools(taken: &HashSet<String>, servers: &[Arc<Server>]) -> Vec<(ToolConfig, Target)> {
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
            let target = Target {
                server: Arc::clone(server),
                tool: t.name.clone(),
            };
            out.push((tool_config(server, t, name), target));
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
        // An MCP tool's gates are its policy's (SPEC §17); the rules, edits and
        // quotas of §20 are for the site's own tools.
        confirm_when: None,
        editable: Vec::new(),
        quota: None,
        approvers: vec![crate::states::OperatorRole::Admin],
        approval_ttl_min: crate::config::default_approval_ttl(),
        secret: None,
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
