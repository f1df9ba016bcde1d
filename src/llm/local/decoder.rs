//! The decoder of the llama and qwen2 architectures (SmolLM2, Llama, Qwen2.5),
//! adapted from candle-transformers 0.11.1 (MIT OR Apache-2.0),
//! `models/quantized_qwen2.rs` and `models/quantized_llama.rs`. What differs:
//!
//! - the weight matrices and the embedding table are [`Linear`]s on Deskbell's own
//!   kernels, q/k/v and gate/up each fused into one matrix, and a tied output head
//!   shares the embedding table's memory;
//! - rotary embeddings, and attention for steps of a few tokens, are Deskbell's
//!   own (`deskbell_kernels::attention`); the cache of keys and values is plain
//!   memory appended in place, copied only when a clone that shares it appends;
//!   a step of many tokens (a prompt) attends with candle's matrix products;
//! - the hidden state is a plain vector between layers: the RMS norms and the
//!   residual additions are loops here, not candle tensor operations, so a
//!   generated token makes no tensor allocations around them;
//! - one model serves both architectures: they differ only in metadata prefix,
//!   the q/k/v biases (qwen2 has them) and the rotary embedding's layout (qwen2
//!   rotates the two halves of a head, llama interleaved pairs, as llama.cpp);
//! - `ModelWeights` is `Clone` (the cache is `cache.rs`): a clone shares every weight and the cached keys so
//!   far, which is what makes the prompt-prefix cache cheap.

use std::sync::Arc;

use candle_core::quantized::gguf_file;
use candle_core::{Device, Result, Tensor, bail};
use candle_transformers::utils::build_causal_mask;
use deskbell_kernels::attention::{Heads, attend, rope};

use super::cache::Cache;
use super::linear::{BATCH_FROM_TOKENS, Linear};

#[derive(Debug, Clone)]
struct Layer {
    /// The query, key and value projections, in that order.
    qkv: Linear,
    /// Their biases, in the same order (qwen2 only).
    qkv_bias: Option<Arc<Vec<f32>>>,
    wo: Linear,
    attention_norm: Norm,
    /// The gate and up projections, in that order.
    gate_up: Linear,
    down: Linear,
    ffn_norm: Norm,
    cache: Cache,
}

/// What every layer shares: the shape of attention and the rotary tables
/// (`positions × dim/2`).
#[derive(Debug, Clone)]
struct Attention {
    heads: Heads,
    rope_halves: bool,
    cos: Arc<Vec<f32>>,
    sin: Arc<Vec<f32>>,
    positions: usize,
}

impl Layer {
    /// Attention for the normalised `x` (`tokens × embedding`).
    fn attend(
        &mut self,
        shape: &Attention,
        x: &[f32],
        tokens: usize,
        mask: Option<&Tensor>,
        position: usize,
    ) -> Result<Vec<f32>> {
        let Heads {
            heads,
            kv_heads,
            dim,
        } = shape.heads;
        let (q_width, kv_width) = (heads * dim, kv_heads * dim);
        let mut qkv = self.qkv.apply(x, tokens)?;
        if let Some(bias) = &self.qkv_bias {
            for row in qkv.chunks_exact_mut(bias.len()) {
                row.iter_mut().zip(bias.iter()).for_each(|(v, b)| *v += b);
            }
        }
        let (mut q, mut k, mut v) = (
            Vec::with_capacity(tokens * q_width),
            Vec::with_capacity(tokens * kv_width),
            Vec::with_capacity(tokens * kv_width),
        );
        for row in qkv.chunks_exact(q_width + 2 * kv_width) {
            let (rq, rest) = row.split_at(q_width);
            let (rk, rv) = rest.split_at(kv_width);
            q.extend_from_slice(rq);
            k.extend_from_slice(rk);
            v.extend_from_slice(rv);
        }
        let turn = |x: &mut [f32], n| {
            rope(
                x,
                n,
                dim,
                position,
                &shape.cos,
                &shape.sin,
                shape.rope_halves,
            )
            .map_err(candle_core::Error::wrap)
        };
        turn(&mut q, heads)?;
        turn(&mut k, kv_heads)?;
        self.cache.append(position, kv_width, &k, &v)?;
        let (keys, values) = (&self.cache.keys, &self.cache.values);
        // The forward pass builds a mask exactly for the batched steps.
        let y = match mask {
            Some(mask) => batched(shape.heads, &q, keys, values, tokens, mask)?,
            None => {
                let mut y = vec![0f32; q.len()];
                attend(&q, keys, values, shape.heads, position, &mut y)
                    .map_err(candle_core::Error::wrap)?;
                y
            }
        };
        self.wo.apply(&y, tokens)
    }

    /// The feed-forward block for the normalised `x`: down(silu(gate) × up).
    fn feed_forward(&self, x: &[f32], tokens: usize) -> Result<Vec<f32>> {
        let gate_up = self.gate_up.apply(x, tokens)?;
        let width = gate_up.len() / tokens.max(1);
        let mut hidden = Vec::with_capacity(gate_up.len() / 2);
        for row in gate_up.chunks_exact(width) {
            let (gate, up) = row.split_at(width / 2);
            hidden.extend(gate.iter().zip(up).map(|(g, u)| g / (1.0 + (-g).exp()) * u));
        }
        self.down.apply(&hidden, tokens)
    }
}

/// Attention of a step of many tokens with candle's matrix products: the query
/// heads that share a key head are multiplied as one group.
fn batched(
    shape: Heads,
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    tokens: usize,
    mask: &Tensor,
) -> Result<Vec<f32>> {
    let Heads {
        heads,
        kv_heads,
        dim,
    } = shape;
    let positions = keys.len() / (kv_heads * dim);
    let group = heads / kv_heads;
    let cpu = &Device::Cpu;
    let q = Tensor::from_slice(q, (tokens, heads, dim), cpu)?
        .transpose(0, 1)?
        .contiguous()?
        .reshape((kv_heads, group * tokens, dim))?;
    let cached = |data: &[f32]| {
        Tensor::from_slice(data, (positions, kv_heads, dim), cpu)?
            .transpose(0, 1)?
            .contiguous()
    };
    let (k, v) = (cached(keys)?, cached(values)?);
    let att = (q.matmul(&k.t()?)? / (dim as f64).sqrt())?.reshape((heads, tokens, positions))?;
    let neg_inf = Tensor::new(f32::NEG_INFINITY, cpu)?.broadcast_as(att.shape())?;
    let att = mask.broadcast_as(att.shape())?.where_cond(&neg_inf, &att)?;
    let att =
        candle_nn::ops::softmax_last_dim(&att)?.reshape((kv_heads, group * tokens, positions))?;
    att.matmul(&v)?
        .reshape((heads, tokens, dim))?
        .transpose(0, 1)?
        .contiguous()?
        .flatten_all()?
        .to_vec1::<f32>()
}

#[derive(Debug, Clone)]
pub struct ModelWeights {
    embeddings: Linear,
    attention: Attention,
    layers: Vec<Layer>,
    norm: Norm,
    output: Linear,
}

/// An RMS norm: each token's vector over the root of its mean square (plus `eps`),
/// times the weights, computed as candle's `rms_norm` does. Plain loops over the
/// hidden state rather than candle tensor operations, which allocated a tensor
/// for each and spread a long step's rows over the thread pool.
#[derive(Debug, Clone)]
struct Norm {
    weight: Arc<Vec<f32>>,
    eps: f32,
}

impl Norm {
    /// `x` holds whole vectors of the weights' width.
    fn apply(&self, x: &[f32]) -> Vec<f32> {
        let width = self.weight.len();
        let mut out = Vec::with_capacity(x.len());
        for row in x.chunks_exact(width) {
            let sum2: f32 = row.iter().map(|v| v * v).sum();
            let m = (sum2 / width as f32 + self.eps).sqrt();
            out.extend(row.iter().zip(self.weight.iter()).map(|(v, w)| v / m * w));
        }
        out
    }
}

/// `x += y`, element by element (a residual connection).
fn add_into(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
}

/// The rotary angles' cosines and sines, `positions × dim/2`.
fn rotary_tables(dim: usize, freq_base: f32, positions: usize) -> (Vec<f32>, Vec<f32>) {
    let theta: Vec<f32> = (0..dim)
        .step_by(2)
        .map(|i| 1f32 / freq_base.powf(i as f32 / dim as f32))
        .collect();
    let angles = (0..positions).flat_map(|p| theta.iter().map(move |t| p as f32 * t));
    angles.map(|a| (a.cos(), a.sin())).unzip()
}

/// The tensors of a GGUF file, read one at a time.
struct File<'a, R> {
    ct: &'a gguf_file::Content,
    reader: &'a mut R,
}

impl<R: std::io::Seek + std::io::Read> File<'_, R> {
    fn has(&self, name: &str) -> bool {
        self.ct.tensor_infos.contains_key(name)
    }

    fn linear(&mut self, name: &str) -> Result<Linear> {
        Linear::from_qtensor(self.ct.tensor(self.reader, name, &Device::Cpu)?)
    }

    fn f32(&mut self, name: &str) -> Result<Tensor> {
        self.ct
            .tensor(self.reader, name, &Device::Cpu)?
            .dequantize(&Device::Cpu)
    }

    fn norm(&mut self, name: &str, eps: f64, width: usize) -> Result<Norm> {
        let weight = self.f32(name)?.flatten_all()?.to_vec1::<f32>()?;
        if weight.len() != width {
            bail!("{name} has {} values for a width of {width}", weight.len());
        }
        Ok(Norm {
            weight: Arc::new(weight),
            eps: eps as f32,
        })
    }
}

impl ModelWeights {
    /// Loads a model of architecture `arch` ("llama" or "qwen2") for `context`
    /// positions.
    pub fn from_gguf<R: std::io::Seek + std::io::Read>(
        arch: &str,
        context: usize,
        ct: gguf_file::Content,
        reader: &mut R,
    ) -> Result<Self> {
        let md = |key: &str| {
            let key = format!("{arch}.{key}");
            match ct.metadata.get(&key) {
                None => bail!("the model's metadata has no {key}"),
                Some(v) => Ok(v),
            }
        };
        let head_count = md("attention.head_count")?.to_u32()? as usize;
        let head_count_kv = md("attention.head_count_kv")?.to_u32()? as usize;
        let embedding_length = md("embedding_length")?.to_u32()? as usize;
        let block_count = md("block_count")?.to_u32()? as usize;
        let rms_norm_eps = md("attention.layer_norm_rms_epsilon")?.to_f32()? as f64;
        let rope_freq_base = md("rope.freq_base")
            .and_then(|v| v.to_f32())
            .unwrap_or(10000f32);
        if head_count == 0 || head_count_kv == 0 || !head_count.is_multiple_of(head_count_kv) {
            bail!(
                "the model's {head_count} attention heads cannot share {head_count_kv} key heads"
            );
        }
        let head_dim = embedding_length / head_count;
        if head_dim == 0 || !head_dim.is_multiple_of(2) || head_dim * head_count != embedding_length
        {
            bail!(
                "the model's {embedding_length} wide embedding does not split into {head_count} even heads"
            );
        }
        if let Ok(rope) = md("rope.dimension_count")
            && rope.to_u32()? as usize != head_dim
        {
            bail!("rotary embeddings over part of a head are not supported");
        }
        let (cos, sin) = rotary_tables(head_dim, rope_freq_base, context);
        let attention = Attention {
            heads: Heads {
                heads: head_count,
                kv_heads: head_count_kv,
                dim: head_dim,
            },
            rope_halves: arch == "qwen2",
            cos: Arc::new(cos),
            sin: Arc::new(sin),
            positions: context,
        };

        let mut file = File { ct: &ct, reader };
        let embeddings = file.linear("token_embd.weight")?;
        let norm = file.norm("output_norm.weight", rms_norm_eps, embedding_length)?;
        let output = if file.has("output.weight") {
            file.linear("output.weight")?
        } else {
            embeddings.clone()
        };
        let mut layers = Vec::new();
        for index in 0..block_count {
            let name = |part: &str| format!("blk.{index}.{part}");
            let qkv_bias = if file.has(&name("attn_q.bias")) {
                let mut bias = Vec::new();
                for part in ["attn_q.bias", "attn_k.bias", "attn_v.bias"] {
                    bias.extend(file.f32(&name(part))?.flatten_all()?.to_vec1::<f32>()?);
                }
                Some(Arc::new(bias))
            } else {
                None
            };
            let mut stack = |parts: &[&str]| {
                let parts: Vec<Linear> = parts
                    .iter()
                    .map(|p| file.linear(&name(p)))
                    .collect::<Result<_>>()?;
                Linear::stack(&parts.iter().collect::<Vec<_>>())
            };
            let qkv = stack(&["attn_q.weight", "attn_k.weight", "attn_v.weight"])?;
            let gate = file.linear(&name("ffn_gate.weight"))?;
            let up = file.linear(&name("ffn_up.weight"))?;
            if gate.rows() == 0 || gate.rows() != up.rows() {
                bail!("layer {index}'s gate and up projections differ in size");
            }
            let gate_up = Linear::stack(&[&gate, &up])?;
            let expected = (head_count + 2 * head_count_kv) * head_dim;
            if qkv.rows() != expected || qkv_bias.as_ref().is_some_and(|b| b.len() != expected) {
                bail!("layer {index}'s attention projections do not fit its heads");
            }
            layers.push(Layer {
                qkv,
                qkv_bias,
                wo: file.linear(&name("attn_output.weight"))?,
                attention_norm: file.norm(
                    &name("attn_norm.weight"),
                    rms_norm_eps,
                    embedding_length,
                )?,
                gate_up,
                down: file.linear(&name("ffn_down.weight"))?,
                ffn_norm: file.norm(&name("ffn_norm.weight"), rms_norm_eps, embedding_length)?,
                cache: Cache::default(),
            });
        }
        Ok(Self {
            embeddings,
            attention,
            layers,
            norm,
            output,
        })
    }

    /// Forgets the cached keys, keeping the weights.
    pub fn clear_kv_cache(&mut self) {
        for layer in self.layers.iter_mut() {
            layer.cache = Cache::default();
        }
    }

    /// Gives back each layer's spare cache room.
    pub fn shrink_cache(&mut self) {
        for layer in self.layers.iter_mut() {
            layer.cache.shrink();
        }
    }

    /// The memory the weights take (a tied output head counted once).
    pub fn weight_bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .flat_map(|l| [&l.qkv, &l.wo, &l.gate_up, &l.down])
            .map(Linear::bytes)
            .sum();
        let tied = matches!((&self.embeddings, &self.output),
            (Linear::Quantized(a), Linear::Quantized(b)) if Arc::ptr_eq(a, b))
            || matches!((&self.embeddings, &self.output),
            (Linear::Q4(a), Linear::Q4(b)) if Arc::ptr_eq(a, b));
        let output = if tied { 0 } else { self.output.bytes() };
        layers + self.embeddings.bytes() + output
    }

    /// Reads the tokens `x` (1, seq_len) at positions `index_pos..`; returns the
    /// logits of the last one.
    pub fn forward(&mut self, x: &Tensor, index_pos: usize) -> Result<Tensor> {
        let (batch, tokens) = x.dims2()?;
        if batch != 1 {
            bail!("a step reads one sequence, not {batch}");
        }
        if tokens == 0 {
            bail!("a step needs at least one token");
        }
        if index_pos + tokens > self.attention.positions {
            bail!("the prompt is longer than the model's context");
        }
        // A mask only for a batched step; it is cheap next to the step, so not kept.
        let mask = if tokens >= BATCH_FROM_TOKENS {
            Some(build_causal_mask(tokens, index_pos, &Device::Cpu)?)
        } else {
            None
        };
        let mut hidden = self.embeddings.embed(&x.flatten_all()?.to_vec1::<u32>()?)?;
        for layer in self.layers.iter_mut() {
            let normed = layer.attention_norm.apply(&hidden);
            let attn = layer.attend(&self.attention, &normed, tokens, mask.as_ref(), index_pos)?;
            add_into(&mut hidden, &attn);
            let normed = layer.ffn_norm.apply(&hidden);
            let mlp = layer.feed_forward(&normed, tokens)?;
            add_into(&mut hidden, &mlp);
        }
        let width = hidden.len() / tokens;
        let last = self.norm.apply(&hidden[(tokens - 1) * width..]);
        let logits = self.output.apply(&last, 1)?;
        let rows = logits.len();
        Tensor::from_vec(logits, (1, rows), &Device::Cpu)
    }
}
