//! The borrowed body must be the very JSON that the `serde_json::Value` it
//! replaced wrote, byte for byte: compared here over generated transcripts and
//! toolboxes.

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::Body;
use crate::llm::{ChatMessage, ChatRequest, ToolCall, ToolSpec};

/// The body as it was built before, kept as the reference.
fn reference(model: &str, request: &ChatRequest) -> Value {
    let mut body = json!({
        "model": model,
        "messages": request.messages.iter().map(reference_message).collect::<Vec<_>>(),
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": request.max_tokens,
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
    }
    body
}

fn reference_message(message: &ChatMessage) -> Value {
    match message {
        ChatMessage::System { content } => json!({"role": "system", "content": content}),
        ChatMessage::User { content } => json!({"role": "user", "content": content}),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } if tool_calls.is_empty() => json!({"role": "assistant", "content": content}),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => json!({
            "role": "assistant",
            "content": if content.is_empty() { Value::Null } else { Value::String(content.clone()) },
            "tool_calls": tool_calls.iter().map(|c| json!({
                "id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}
            })).collect::<Vec<_>>(),
        }),
        ChatMessage::Tool {
            tool_call_id,
            content,
            ..
        } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
    }
}

/// Text that is sometimes empty and sometimes needs escaping.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z \"\\\\\n\u{e9}\u{1F600}]{0,12}"]
}

fn call() -> impl Strategy<Value = ToolCall> {
    (text(), text(), text()).prop_map(|(id, name, arguments)| ToolCall {
        id,
        name,
        arguments,
    })
}

fn message() -> impl Strategy<Value = ChatMessage> {
    prop_oneof![
        text().prop_map(|content| ChatMessage::System { content }),
        text().prop_map(|content| ChatMessage::User { content }),
        (text(), proptest::collection::vec(call(), 0..3)).prop_map(|(content, tool_calls)| {
            ChatMessage::Assistant {
                content,
                tool_calls,
            }
        }),
        (text(), text(), any::<bool>()).prop_map(|(tool_call_id, content, is_error)| {
            ChatMessage::Tool {
                tool_call_id,
                content,
                is_error,
            }
        }),
    ]
}

fn tool() -> impl Strategy<Value = Arc<ToolSpec>> {
    (text(), text(), any::<bool>()).prop_map(|(name, description, required)| {
        let parameters = json!({"type": "object", "properties": {"order": {"type": "string"}},
                                "required": if required { json!(["order"]) } else { json!([]) }});
        Arc::new(ToolSpec {
            name,
            description,
            parameters,
        })
    })
}

proptest! {
    #[test]
    fn the_body_is_the_json_the_value_tree_was(
        model in text(),
        messages in proptest::collection::vec(message(), 0..6),
        tools in proptest::collection::vec(tool(), 0..3),
        max_tokens in any::<u32>(),
    ) {
        let request = ChatRequest { messages, tools, max_tokens, stable_system: 0 };
        let written = serde_json::to_vec(&Body::new(&model, &request)).unwrap();
        // The same bytes, keys in the same order (serde_json keeps a map's order
        // here), not only the same value.
        let expected = serde_json::to_vec(&reference(&model, &request)).unwrap();
        prop_assert_eq!(String::from_utf8_lossy(&written), String::from_utf8_lossy(&expected));
    }
}

#[test]
fn a_round_without_tools_sends_no_tools_key() {
    let request = ChatRequest {
        messages: vec![ChatMessage::User {
            content: "hi".into(),
        }],
        ..ChatRequest::default()
    };
    let body = serde_json::to_value(Body::new("m", &request)).unwrap();
    assert_eq!(body.get("tools"), None);
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": "hi"})
    );
}
