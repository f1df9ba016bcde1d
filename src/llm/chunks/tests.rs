use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use proptest::prelude::*;
use serde_json::json;

use super::ChunkDecoder;
use crate::llm::sse::Decoder;
use crate::llm::{ModelEvent, ProviderError, ToolCall};
use crate::wire::Usage;

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).to_string()
}

/// An SSE body as OpenAI would send it: text in pieces, tool calls whose name and
/// arguments are split, a finish chunk, a usage chunk, `[DONE]`.
fn body(text_pieces: &[String], calls: &[(String, Vec<String>)]) -> String {
    let mut out = String::new();
    let mut push = |data: String| out.push_str(&format!("data: {data}\n\n"));
    push(chunk(json!({"role": "assistant", "content": ""}), None));
    for piece in text_pieces {
        push(chunk(json!({"content": piece}), None));
    }
    for (i, (name, arg_pieces)) in calls.iter().enumerate() {
        let (head, tail) = name.split_at(name.len() / 2);
        push(chunk(
            json!({"tool_calls": [{"index": i, "id": format!("id{i}"), "function": {"name": head, "arguments": ""}}]}),
            None,
        ));
        push(chunk(
            json!({"tool_calls": [{"index": i, "function": {"name": tail}}]}),
            None,
        ));
        for a in arg_pieces {
            push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": a}}]}),
                None,
            ));
        }
    }
    push(chunk(
        json!({}),
        Some(if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }),
    ));
    push(json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}).to_string());
    out.push_str("data: [DONE]\n\n");
    out
}

async fn decode_in_pieces(body: &str, cuts: &[usize]) -> Vec<Result<ModelEvent, String>> {
    let bytes = body.as_bytes();
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.push(0);
    points.push(bytes.len());
    points.sort_unstable();
    points.dedup();
    let pieces: Vec<Result<Bytes, std::io::Error>> = points
        .windows(2)
        .map(|w| Ok(Bytes::copy_from_slice(&bytes[w[0]..w[1]])))
        .collect();
    crate::llm::sse::decode(
        futures_util::stream::iter(pieces),
        ChunkDecoder::default(),
        Duration::from_secs(5),
    )
    .map(|r| r.map_err(|e: ProviderError| e.to_string()))
    .collect()
    .await
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn text_and_tool_calls_survive_any_chunking(
        text in proptest::collection::vec("[a-zA-Z0-9 .,é]{0,8}", 0..6),
        args in proptest::collection::vec("[a-z0-9\":{} ]{1,6}", 1..5),
        cuts in proptest::collection::vec(0usize..4000, 0..20),
    ) {
        let sse = body(&text, &[("cancel_order".into(), args.clone())]);
        let events = runtime().block_on(decode_in_pieces(&sse, &cuts));
        let mut got_text = String::new();
        let mut got_calls = Vec::new();
        let mut usage = None;
        for e in events {
            match e.unwrap() {
                ModelEvent::Text(t) => got_text.push_str(&t),
                ModelEvent::ToolCalls(c) => got_calls = c,
                ModelEvent::Usage(u) => usage = Some(u),
            }
        }
        prop_assert_eq!(got_text, text.concat());
        prop_assert_eq!(got_calls, vec![ToolCall { id: "id0".into(), name: "cancel_order".into(), arguments: args.concat() }]);
        prop_assert_eq!(usage, Some(Usage { input_tokens: 3, output_tokens: 4 }));
    }

    #[test]
    fn arbitrary_data_never_panics_the_decoder(data in "\\PC{0,200}") {
        let mut d = ChunkDecoder::default();
        let _ = d.push(&data);
        let _ = d.finish();
    }
}

#[test]
fn a_response_cut_before_it_finished_is_an_error() {
    let mut d = ChunkDecoder::default();
    d.push(&chunk(json!({"content": "Hel"}), None)).unwrap();
    assert!(d.finish().is_err());
}

#[test]
fn calls_without_an_index_are_told_apart_by_their_id() {
    let mut d = ChunkDecoder::default();
    for c in [
        json!({"tool_calls": [{"id": "a", "function": {"name": "one", "arguments": "{}"}}]}),
        json!({"tool_calls": [{"id": "b", "function": {"name": "two", "arguments": "{\"x\""}}]}),
        json!({"tool_calls": [{"function": {"arguments": ":1}"}}]}),
    ] {
        d.push(&chunk(c, None)).unwrap();
    }
    let events = d.push("[DONE]").unwrap();
    let ModelEvent::ToolCalls(calls) = &events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].arguments, "{\"x\":1}");
}

#[test]
fn an_error_object_in_the_stream_is_an_error() {
    let mut d = ChunkDecoder::default();
    assert!(d.push(r#"{"error": {"message": "overloaded"}}"#).is_err());
}

#[test]
fn a_call_the_token_limit_cut_before_its_arguments_is_not_read_as_empty_arguments() {
    let mut d = ChunkDecoder::default();
    let head = json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "refund", "arguments": ""}}]}}]});
    d.push(&head.to_string()).unwrap();
    d.push(&json!({"choices": [{"delta": {}, "finish_reason": "length"}]}).to_string())
        .unwrap();
    let events = d.push("[DONE]").unwrap();
    let ModelEvent::ToolCalls(calls) = &events[0] else {
        panic!("{events:?}")
    };
    assert!(crate::tools::arguments::Arguments::from_model(&calls[0].arguments).is_err());
}
