//! The qwen2 architecture (the default model's) without the default model, which
//! this machine cannot download: a tiny Qwen2 with random weights, written as GGUF
//! with the test model's vocabulary, must load, stream, and start its second turn
//! from the cached prefix with the same answer. Random weights say nothing about
//! quality; they do run every tensor of the decoder. `tiny_model` writes such a
//! model for llama too (`local_decoder.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use deskbell::llm::{ChatMessage, ChatRequest, LocalProvider, ToolSpec};
use serde_json::json;

use crate::local::{collect, test_model};

const HIDDEN: usize = 64;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const FFN: usize = 128;
const LAYERS: usize = 2;

pub fn tiny_qwen2(path: &std::path::Path, context: u32) {
    tiny_model("qwen2", path, context);
}

/// The shape of a tiny model, where a test wants another than the usual one.
pub struct Tiny {
    pub hidden: usize,
    pub heads: usize,
    /// Rows of the up projection (the gate has `FFN`).
    pub up: usize,
    /// An output head of its own instead of the embedding table's.
    pub own_output: bool,
}

impl Default for Tiny {
    fn default() -> Self {
        Self {
            hidden: HIDDEN,
            heads: HEADS,
            up: FFN,
            own_output: false,
        }
    }
}

/// A tiny model of architecture `arch` ("qwen2", with q/k/v biases, or "llama")
/// with random f32 weights and the test model's vocabulary.
pub fn tiny_model(arch: &str, path: &std::path::Path, context: u32) {
    tiny_model_shaped(arch, path, context, &Tiny::default());
}

pub fn tiny_model_shaped(arch: &str, path: &std::path::Path, context: u32, tiny: &Tiny) {
    let &Tiny {
        hidden,
        heads,
        up,
        own_output,
    } = tiny;
    let mut source = std::fs::File::open(test_model()).unwrap();
    let vocab = gguf_file::Content::read(&mut source).unwrap();
    let words = vocab.metadata["tokenizer.ggml.tokens"]
        .to_vec()
        .unwrap()
        .len();
    let mut metadata: Vec<(String, gguf_file::Value)> = vocab
        .metadata
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    use gguf_file::Value::{F32, String as S, U32};
    metadata.push(("general.architecture".into(), S(arch.into())));
    for (key, value) in [
        ("attention.head_count", U32(heads as u32)),
        ("attention.head_count_kv", U32(KV_HEADS as u32)),
        ("embedding_length", U32(hidden as u32)),
        ("context_length", U32(context)),
        ("block_count", U32(LAYERS as u32)),
        ("attention.layer_norm_rms_epsilon", F32(1e-6)),
        ("rope.freq_base", F32(10000.0)),
        ("rope.dimension_count", U32((hidden / heads) as u32)),
    ] {
        metadata.push((format!("{arch}.{key}"), value));
    }
    let kv = hidden / heads * KV_HEADS;
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("token_embd.weight".into(), vec![words, hidden]),
        ("output_norm.weight".into(), vec![hidden]),
    ];
    if own_output {
        shapes.push(("output.weight".into(), vec![words, hidden]));
    }
    for l in 0..LAYERS {
        for (name, shape) in [
            ("attn_q.weight", vec![hidden, hidden]),
            ("attn_q.bias", vec![hidden]),
            ("attn_k.weight", vec![kv, hidden]),
            ("attn_k.bias", vec![kv]),
            ("attn_v.weight", vec![kv, hidden]),
            ("attn_v.bias", vec![kv]),
            ("attn_output.weight", vec![hidden, hidden]),
            ("ffn_gate.weight", vec![FFN, hidden]),
            ("ffn_up.weight", vec![up, hidden]),
            ("ffn_down.weight", vec![hidden, FFN]),
            ("attn_norm.weight", vec![hidden]),
            ("ffn_norm.weight", vec![hidden]),
        ] {
            if arch == "qwen2" || !name.ends_with(".bias") {
                shapes.push((format!("blk.{l}.{name}"), shape));
            }
        }
    }
    let tensors: Vec<(String, QTensor)> = shapes
        .into_iter()
        .map(|(name, shape)| {
            let t = normal_weights(&name, shape);
            (name, QTensor::quantize(&t, GgmlDType::F32).unwrap())
        })
        .collect();
    let metadata: Vec<(&str, &gguf_file::Value)> =
        metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut out = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut out, &metadata, &tensors).unwrap();
}

/// Weights drawn from N(0, 0.2²), the same on every run for the same name: the
/// comparisons against candle allow the 8-bit kernels' rounding, which on fresh
/// random draws passed its bound in about one run in ten.
fn normal_weights(name: &str, shape: Vec<usize>) -> Tensor {
    let mut state = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut uniform = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        // 53 high bits in (0, 1]: never 0, whose logarithm Box-Muller takes.
        ((state >> 11) + 1) as f64 / (1u64 << 53) as f64
    };
    let count: usize = shape.iter().product();
    let values: Vec<f32> = (0..count)
        .map(|_| {
            let (u, v) = (uniform(), uniform());
            let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            (0.2 * z) as f32
        })
        .collect();
    Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
}

#[tokio::test]
async fn a_qwen2_model_loads_streams_and_reuses_its_prompt_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-qwen2.gguf");
    tiny_qwen2(&path, 2048);
    let (provider, info) = LocalProvider::start(path, None, 2).unwrap();
    assert_eq!(info.architecture, "qwen2");
    let tools = vec![Arc::new(ToolSpec {
        name: "lookup_order".into(),
        description: "Look up an order.".into(),
        parameters: json!({"type": "object"}),
    })];
    let mut answers = Vec::new();
    for _ in 0..2 {
        let request = ChatRequest {
            messages: vec![ChatMessage::User {
                content: "Hello".into(),
            }],
            tools: tools.clone(),
            max_tokens: 12,
            stable_system: 0,
        };
        let (text, usage) = collect(&provider, request).await;
        assert!(usage.output_tokens > 0);
        answers.push(text);
    }
    assert_eq!(provider.stats.prefix_hits.load(Ordering::Relaxed), 1);
    assert_eq!(answers[0], answers[1]);
}

#[tokio::test]
async fn a_conversation_longer_than_the_context_is_answered_from_its_latest_messages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-qwen2.gguf");
    tiny_qwen2(&path, 200);
    let (provider, _) = LocalProvider::start(path, None, 2).unwrap();
    let mut messages = vec![ChatMessage::System {
        content: "Be brief.".into(),
    }];
    for i in 0..40 {
        messages.push(ChatMessage::User {
            content: format!("Question number {i}: where is my parcel?"),
        });
        messages.push(ChatMessage::Assistant {
            content: format!("Answer number {i}: on its way."),
            tool_calls: Vec::new(),
        });
    }
    messages.push(ChatMessage::User {
        content: "And now?".into(),
    });
    let request = ChatRequest {
        messages,
        max_tokens: 40,
        ..Default::default()
    };
    let (_, usage) = collect(&provider, request).await;
    assert!(usage.input_tokens <= 180, "{usage:?}");
    assert!(usage.input_tokens + usage.output_tokens <= 200, "{usage:?}");
    assert!(usage.output_tokens > 0);
}
