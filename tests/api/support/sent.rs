//! Reading what the app sent the model stand-in, whichever protocol it spoke:
//! OpenAI's messages (system, user, assistant and tool roles) or Anthropic's
//! (`system` apart, text, `tool_use` and `tool_result` blocks), as one list of
//! (role, text) pairs in which tool results have the role "tool".

use serde_json::Value;

/// Whether a recorded request is in OpenAI's shape (it asks for streamed usage).
pub fn is_openai(request: &Value) -> bool {
    request.get("stream_options").is_some()
}

/// The request's conversation as (role, text), the system prompt first.
pub fn conversation(request: &Value) -> Vec<(String, String)> {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    if is_openai(request) {
        return messages
            .iter()
            .map(|m| (text(&m["role"]), text(&m["content"])))
            .collect();
    }
    let mut out = Vec::new();
    if let Some(system) = request["system"].as_array() {
        let joined: String = system.iter().map(|b| text(&b["text"])).collect();
        out.push(("system".to_string(), joined));
    }
    for m in &messages {
        let role = text(&m["role"]);
        match &m["content"] {
            Value::String(s) => out.push((role, s.clone())),
            Value::Array(blocks) => {
                for b in blocks {
                    match b["type"].as_str() {
                        Some("text") => out.push((role.clone(), text(&b["text"]))),
                        Some("tool_result") => out.push(("tool".into(), text(&b["content"]))),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The tool results the model was given, in order.
pub fn tool_results(request: &Value) -> Vec<String> {
    conversation(request)
        .into_iter()
        .filter(|(role, _)| role == "tool")
        .map(|(_, text)| text)
        .collect()
}

/// The names of the tools the model was offered.
pub fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().or(t["name"].as_str()))
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}
