//! The scripted model server's Anthropic dialect: the same scripts played as
//! the Messages API streams them (`message_start`, content blocks with
//! `text_delta` and `input_json_delta`, `message_delta` with usage and stop
//! reason, `message_stop`, a `ping` early on), and the request checked against
//! the rules the real API enforces, so a body it would refuse fails here too.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::script::{Piece, pieces};

/// Why the real API would answer this request 400, if it would.
pub(super) fn check(headers: &HeaderMap, body: &Value) -> Result<(), String> {
    for name in ["anthropic-version", "x-api-key"] {
        if !headers.contains_key(name) {
            return Err(format!("missing header {name}"));
        }
    }
    for field in ["model", "max_tokens", "messages"] {
        if body.get(field).is_none() {
            return Err(format!("{field}: field required"));
        }
    }
    let marks = body.to_string().matches("\"cache_control\"").count();
    if marks > 4 {
        return Err(format!(
            "a maximum of 4 blocks with cache_control may be provided; found {marks}"
        ));
    }
    let messages = body["messages"].as_array().ok_or("messages: not a list")?;
    let mut previous: Option<&Value> = None;
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        match (i, previous.map(|p| p["role"].as_str().unwrap_or(""))) {
            (0, _) if role != "user" => {
                return Err("messages: the first message must use the user role".into());
            }
            (_, Some(p)) if p == role => return Err(format!("messages.{i}: roles must alternate")),
            _ => {}
        }
        let blocks = match &m["content"] {
            Value::String(s) if !s.is_empty() => Vec::new(),
            Value::Array(b) if !b.is_empty() => b.clone(),
            _ => return Err(format!("messages.{i}: content must be non-empty")),
        };
        for b in &blocks {
            if b["type"] == "text" && b["text"].as_str().is_none_or(str::is_empty) {
                return Err(format!(
                    "messages.{i}: text content blocks must be non-empty"
                ));
            }
            if b["type"] == "tool_use" && !b["input"].is_object() {
                return Err(format!("messages.{i}: tool_use.input must be an object"));
            }
        }
        // Every tool_use must be answered by a tool_result in the next message,
        // and every tool_result must answer one.
        let uses = |m: Option<&Value>| -> Vec<String> {
            m.and_then(|m| m["content"].as_array())
                .map(|b| {
                    b.iter()
                        .filter(|b| b["type"] == "tool_use")
                        .filter_map(|b| b["id"].as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let results: Vec<String> = blocks
            .iter()
            .filter(|b| b["type"] == "tool_result")
            .filter_map(|b| b["tool_use_id"].as_str().map(String::from))
            .collect();
        let asked = uses(previous);
        if results.iter().any(|r| !asked.contains(r)) {
            return Err(format!(
                "messages.{i}: tool_result for an unknown tool_use id"
            ));
        }
        if !asked.is_empty() && asked.iter().any(|a| !results.contains(a)) {
            return Err(format!(
                "messages.{i}: tool_use ids were found without tool_result blocks immediately after"
            ));
        }
        previous = Some(m);
    }
    Ok(())
}

/// The body of an error answer, as the API writes it.
pub(super) fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

struct Writer {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
}

impl Writer {
    async fn send(&self, value: Value) -> bool {
        let kind = value["type"].as_str().unwrap_or("").to_string();
        self.tx
            .send(Ok(Bytes::from(format!("event: {kind}\ndata: {value}\n\n"))))
            .await
            .is_ok()
    }
}

/// Plays a script as one streamed message.
pub(super) async fn play(script: Vec<Piece>, tx: mpsc::Sender<Result<Bytes, std::io::Error>>) {
    let w = Writer { tx };
    let usage_piece = script.iter().find_map(|p| match p {
        Piece::Usage { input, output } => Some((*input, *output)),
        _ => None,
    });
    let reported = !script.iter().any(|p| matches!(p, Piece::NoUsage));
    let input = usage_piece.map_or(10, |u| u.0);
    let start_usage = match reported {
        true => json!({"input_tokens": input, "output_tokens": 1}),
        false => json!({}),
    };
    let start = json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message", "role": "assistant",
        "content": [], "model": "fake", "stop_reason": null, "stop_sequence": null, "usage": start_usage}});
    if !w.send(start).await || !w.send(json!({"type": "ping"})).await {
        return;
    }
    let mut index = 0u32;
    let mut text_open = false;
    let mut output = 0u64;
    let mut tools = 0;
    let mut stop_reason: Option<String> = None;
    for piece in script {
        let text = match &piece {
            Piece::Text(t) => Some(pieces(t, 3)),
            Piece::Chunk(t) => Some(vec![t.clone()]),
            _ => None,
        };
        if let Some(parts) = text {
            if !text_open {
                w.send(json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})).await;
                text_open = true;
            }
            for part in parts {
                output += 1;
                if !w.send(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": part}})).await {
                    return;
                }
            }
            continue;
        }
        match piece {
            Piece::ToolCall {
                id,
                name,
                arguments,
            } => {
                if text_open {
                    w.send(json!({"type": "content_block_stop", "index": index}))
                        .await;
                    index += 1;
                    text_open = false;
                }
                w.send(json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}))
                    .await;
                w.send(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": ""}})).await;
                for part in pieces(&arguments, 5) {
                    output += 1;
                    w.send(json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": part}})).await;
                }
                w.send(json!({"type": "content_block_stop", "index": index}))
                    .await;
                index += 1;
                tools += 1;
            }
            Piece::Pause(d) => tokio::time::sleep(d).await,
            Piece::Stop(reason) => stop_reason = Some(reason),
            Piece::Error(kind) => {
                w.send(error_body(&kind, "scripted error")).await;
                return;
            }
            Piece::Cut => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = w.tx.send(Err(std::io::Error::other("cut"))).await;
                return;
            }
            _ => {}
        }
    }
    if text_open {
        w.send(json!({"type": "content_block_stop", "index": index}))
            .await;
    }
    let reason =
        stop_reason.unwrap_or_else(|| if tools > 0 { "tool_use" } else { "end_turn" }.into());
    let mut delta =
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null}});
    if reported {
        delta["usage"] = json!({"output_tokens": usage_piece.map_or(output, |u| u.1)});
    }
    w.send(delta).await;
    w.send(json!({"type": "message_stop"})).await;
}
