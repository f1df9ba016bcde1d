use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::EventDecoder;
use super::body::Body;
use crate::llm::sse::Decoder;
use crate::llm::{ChatMessage, ChatRequest, ModelEvent, ProviderError, ToolCall, ToolSpec};
use crate::wire::Usage;

/// Feeds events to a fresh decoder, returning what it produced or the first
/// error.
fn decode(events: &[Value]) -> Result<Vec<ModelEvent>, ProviderError> {
    let mut d = EventDecoder::default();
    let mut out = Vec::new();
    for e in events {
        out.extend(d.push(&e.to_string())?);
    }
    out.extend(d.finish()?);
    Ok(out)
}

fn start(input: u64) -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "content": [], "model": "claude", "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input, "output_tokens": 1}}})
}

fn tool_start(index: u32, id: &str, name: &str) -> Value {
    json!({"type": "content_block_start", "index": index,
        "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})
}

fn json_delta(index: u32, part: &str) -> Value {
    json!({"type": "content_block_delta", "index": index,
        "delta": {"type": "input_json_delta", "partial_json": part}})
}

fn stop_block(index: u32) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

fn end(reason: &str, output: u64) -> [Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null},
            "usage": {"output_tokens": output}}),
        json!({"type": "message_stop"}),
    ]
}

fn calls(events: &[ModelEvent]) -> Vec<ToolCall> {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCalls(c) => Some(c.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn text_and_a_tool_call_in_many_pieces_decode_to_the_same_events_as_any_provider() {
    let mut events = vec![
        start(25),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "check."}}),
        stop_block(0),
        tool_start(1, "toolu_01", "lookup_order"),
        json_delta(1, ""),
    ];
    for part in ["{\"ord", "er_id\"", ": 4", "2}"] {
        events.push(json_delta(1, part));
    }
    events.push(stop_block(1));
    events.extend(end("tool_use", 89));
    assert_eq!(
        decode(&events).unwrap(),
        vec![
            ModelEvent::Text("Let me ".into()),
            ModelEvent::Text("check.".into()),
            ModelEvent::Usage(Usage {
                input_tokens: 25,
                output_tokens: 89
            }),
            ModelEvent::ToolCalls(vec![ToolCall {
                id: "toolu_01".into(),
                name: "lookup_order".into(),
                arguments: "{\"order_id\": 42}".into(),
            }]),
        ]
    );
}

#[test]
fn cached_prompt_tokens_are_charged_as_input() {
    let mut events = vec![json!({"type": "message_start", "message": {"usage": {
        "input_tokens": 5, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 900, "output_tokens": 1}}})];
    events.extend(end("end_turn", 3));
    let usage = decode(&events).unwrap();
    assert_eq!(
        usage,
        vec![ModelEvent::Usage(Usage {
            input_tokens: 1005,
            output_tokens: 3
        })]
    );
}

#[test]
fn a_tool_call_cut_by_max_tokens_keeps_its_unfinished_input() {
    let mut events = vec![
        start(10),
        tool_start(0, "toolu_1", "refund"),
        json_delta(0, "{\"amount\": 1"),
    ];
    events.push(stop_block(0));
    events.extend(end("max_tokens", 50));
    assert_eq!(
        calls(&decode(&events).unwrap())[0].arguments,
        "{\"amount\": 1"
    );
}

#[test]
fn a_tool_call_cut_by_max_tokens_before_any_input_is_an_object_never_closed() {
    let mut events = vec![start(10), tool_start(0, "toolu_1", "refund")];
    events.extend(end("max_tokens", 50));
    let got = calls(&decode(&events).unwrap());
    assert_eq!(got[0].arguments, "{");
    assert!(crate::tools::arguments::Arguments::from_model(&got[0].arguments).is_err());
}

#[test]
fn a_tool_call_cut_with_only_blank_input_or_by_the_context_window_is_not_empty_arguments() {
    for (input, reason) in [(" \n", "max_tokens"), ("", "model_context_window_exceeded")] {
        let mut events = vec![
            start(10),
            tool_start(0, "toolu_1", "refund"),
            json_delta(0, input),
        ];
        events.extend(end(reason, 50));
        let got = calls(&decode(&events).unwrap());
        assert!(
            crate::tools::arguments::Arguments::from_model(&got[0].arguments).is_err(),
            "{reason}"
        );
    }
}

#[test]
fn a_later_usage_report_without_the_cache_figures_keeps_them() {
    let mut events = vec![json!({"type": "message_start", "message": {"usage": {
        "input_tokens": 5, "cache_read_input_tokens": 900, "output_tokens": 1}}})];
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
        "usage": {"input_tokens": 5, "output_tokens": 7}}),
    );
    events.push(json!({"type": "message_stop"}));
    assert_eq!(
        decode(&events).unwrap(),
        vec![ModelEvent::Usage(Usage {
            input_tokens: 905,
            output_tokens: 7
        })]
    );
}

#[test]
fn a_refused_request_reported_in_the_stream_is_not_retried_and_an_overload_is() {
    let refused = [
        start(1),
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}),
    ];
    assert!(!decode(&refused).unwrap_err().is_transient());
    let busy = [
        start(1),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
    ];
    assert!(decode(&busy).unwrap_err().is_transient());
}

#[test]
fn a_later_system_note_stays_in_its_place_and_is_never_marked_for_the_cache() {
    let body = request(
        vec![
            ChatMessage::System {
                content: "Rules. Sources".into(),
            },
            ChatMessage::User {
                content: "Hi".into(),
            },
            ChatMessage::System {
                content: "A person handled the conversation up to here.".into(),
            },
            ChatMessage::User {
                content: "Thanks".into(),
            },
        ],
        6,
    );
    assert_eq!(body["system"].as_array().unwrap().len(), 2);
    let text = body.to_string();
    assert_eq!(text.matches("cache_control").count(), 1, "{text}");
    let user = &body["messages"][0]["content"];
    assert_eq!(user[0]["text"], "Hi");
    assert!(
        user[1]["text"]
            .as_str()
            .unwrap()
            .contains("A person handled the conversation")
    );
    assert_eq!(user[2]["text"], "Thanks");
}

#[test]
fn a_finished_tool_call_without_input_has_empty_arguments() {
    let mut events = vec![
        start(10),
        tool_start(0, "toolu_1", "list_orders"),
        stop_block(0),
    ];
    events.extend(end("tool_use", 5));
    assert_eq!(calls(&decode(&events).unwrap())[0].arguments, "{}");
}

#[test]
fn a_stream_cut_before_message_stop_is_an_error() {
    let events = [
        start(10),
        tool_start(0, "t", "refund"),
        json_delta(0, "{\"amo"),
    ];
    assert!(matches!(decode(&events), Err(ProviderError::Stream(_))));
}

#[test]
fn an_overloaded_error_event_ends_the_stream_with_its_kind() {
    let events = [
        start(10),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ];
    match decode(&events) {
        Err(ProviderError::Stream(text)) => assert!(text.contains("overloaded_error"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn thinking_blocks_and_unknown_events_are_skipped() {
    let mut events = vec![
        start(10),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
        stop_block(0),
        json!({"type": "something_new", "x": 1}),
    ];
    events.extend(end("end_turn", 2));
    assert_eq!(decode(&events).unwrap().len(), 1, "only the usage");
}

#[test]
fn input_for_a_block_that_is_not_a_tool_call_is_refused() {
    let events = [start(1), json_delta(3, "{}")];
    assert!(matches!(decode(&events), Err(ProviderError::Protocol(_))));
}

proptest! {
    #[test]
    fn a_tool_input_split_anywhere_is_assembled_whole(
        value in prop::collection::btree_map("[a-z]{1,6}", "[ -~é😀]{0,12}", 0..5),
        cuts in prop::collection::vec(0usize..64, 0..10),
    ) {
        let text = serde_json::to_string(&value).unwrap();
        let chars: Vec<char> = text.chars().collect();
        let mut points: Vec<usize> = cuts.into_iter().map(|c| c % (chars.len() + 1)).collect();
        points.sort_unstable();
        let mut events = vec![start(1), tool_start(0, "t", "f")];
        let mut from = 0;
        for p in points.into_iter().chain([chars.len()]) {
            events.push(json_delta(0, &chars[from..p].iter().collect::<String>()));
            from = p;
        }
        events.push(stop_block(0));
        events.extend(end("tool_use", 1));
        prop_assert_eq!(&calls(&decode(&events).unwrap())[0].arguments, &text);
    }
}

fn request(messages: Vec<ChatMessage>, stable: usize) -> Value {
    let request = ChatRequest {
        messages,
        tools: vec![Arc::new(ToolSpec {
            name: "refund".into(),
            description: "Refund a payment".into(),
            parameters: json!({"type": "object"}),
        })],
        max_tokens: 100,
        stable_system: stable,
    };
    serde_json::to_value(Body::new("claude", &request)).unwrap()
}

#[test]
fn the_system_prompt_is_a_field_with_its_stable_start_marked_for_the_cache() {
    let body = request(
        vec![
            ChatMessage::System {
                content: "Rules. Sources".into(),
            },
            ChatMessage::User {
                content: "Hi".into(),
            },
        ],
        6,
    );
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}},
               {"type": "text", "text": " Sources"}])
    );
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}])
    );
    assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["max_tokens"], json!(100));
}

#[test]
fn tool_calls_go_as_tool_use_and_their_results_as_one_user_message() {
    let body = request(
        vec![
            ChatMessage::User {
                content: "Refund twice".into(),
            },
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![
                    ToolCall {
                        id: "t1".into(),
                        name: "refund".into(),
                        arguments: "{\"amount\": 5}".into(),
                    },
                    ToolCall {
                        id: "t2".into(),
                        name: "refund".into(),
                        arguments: "{\"amount\": ".into(),
                    },
                ],
            },
            ChatMessage::Tool {
                tool_call_id: "t1".into(),
                content: "[1] done".into(),
                is_error: false,
            },
            ChatMessage::Tool {
                tool_call_id: "t2".into(),
                content: "Error: not valid JSON".into(),
                is_error: true,
            },
        ],
        0,
    );
    assert_eq!(body.get("system"), None);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Refund twice"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "refund", "input": {"amount": 5}},
                {"type": "tool_use", "id": "t2", "name": "refund", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "[1] done"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "Error: not valid JSON", "is_error": true}]}
        ])
    );
}
