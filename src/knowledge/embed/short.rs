//! The embedding model's encoder (BERT) on Deskbell's kernels
//! (`deskbell-kernels`), with its weights kept in 8 bits and in f32.
//!
//! Where the CPU has AVX-512 VNNI, every text's tokens are rounded to 8 bits too
//! and multiplied in integers (`Q8Wide::product`; where the CPU has AMX-INT8,
//! `Q8Matrix::product` on the tiles, which a chat prompt takes too: the same
//! outputs either way, within a cosine of 0.9997 of f32 on a real passage), and
//! the f32 weights are not kept. A passage is hundreds of tokens, one passage per worker; a question of
//! up to sixteen tokens is one panel, whose rows the product shares among the
//! workers (BENCHMARKS.md, "A question on the 8-bit product").
//!
//! Where the CPU has AVX2 and not VNNI, the tokens are rounded the same way and
//! multiplied by the weights widened to 16 bits (`Q8Widened::product`,
//! `vpmaddwd`: the same outputs as VNNI's product, bit for bit), a passage's
//! and a question's alike, and the f32 weights are not kept either.
//!
//! Elsewhere (no AVX2, or `DESKBELL_EMBED_INT8=off`) a question (a few tokens,
//! where candle's f32 GEMM spent more time packing than multiplying: 12 ms a
//! question) takes `Q8Matrix::matmul_rows_expanded`, which reads each weight
//! once, a quarter of the bytes of f32, expands its row and multiplies it by
//! every token, on both cores; a passage takes the f32 weights on an f32 GEMM
//! (`long.rs`). Attention is f32 everywhere.
//!
//! BERT as in the original (post-norm): embeddings and a layer norm, then per
//! layer self-attention over every token (no mask: one text, no padding), add
//! and norm, a GELU feed-forward, add and norm.

use std::collections::HashMap;

use anyhow::Context;
use candle_core::{Device, Tensor};
use deskbell_kernels::tiles::{self, Bf16Matrix, Lines};
use deskbell_kernels::{Q8Matrix, Q8Wide, Q8Widened, elementwise};

/// Without either 8-bit product (VNNI's, AVX2's widened one), texts up to
/// this many tokens take the 8-bit rows (`matmul_rows_expanded`) on both
/// workers and longer ones the f32 GEMM, on one; attention takes the GEMM
/// past it everywhere.
pub const SHORT_TOKENS: usize = 48;

struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    /// Added to the variance (`config.json`'s `layer_norm_eps`).
    eps: f32,
}

struct Dense {
    weight: Eight,
    /// The same weights in f32, row-major, for many tokens on the f32 GEMM;
    /// empty where the CPU multiplies many tokens in 8 bits (VNNI, or AVX2's
    /// widened product).
    full: Vec<f32>,
    /// The same weights in bf16 for AMX tiles, where the CPU has them: a
    /// passage's products run there (`deskbell_kernels::tiles`).
    tiles: Option<Bf16Matrix>,
    bias: Vec<f32>,
}

/// A layer's 8-bit weights: packed for `Q8Wide::product` where the CPU has
/// AVX-512 VNNI and no AMX-INT8 (the same outputs as `Q8Matrix::product`,
/// 1.10–1.16× as fast on a passage on one worker, 1.08–1.10× on two:
/// BENCHMARKS.md, "A passage's product with the weights across the lanes"),
/// otherwise in blocks (on AMX tiles where the CPU has AMX-INT8); widened to
/// 16 bits for `Q8Widened::product` where the CPU has AVX2 and not VNNI, a
/// passage's products and a question's alike. One copy, never two.
enum Eight {
    Wide(Q8Wide),
    Widened(Q8Widened),
    Blocks(Q8Matrix),
}

impl Eight {
    fn new(m: Q8Matrix) -> Eight {
        if let Some(wide) = int8().then(|| Q8Wide::pack(&m)).flatten() {
            return Eight::Wide(wide);
        }
        match widened().then(|| Q8Widened::pack(&m)).flatten() {
            Some(widened) => Eight::Widened(widened),
            None => Eight::Blocks(m),
        }
    }

    fn rows(&self) -> usize {
        match self {
            Eight::Wide(w) => w.rows(),
            Eight::Widened(w) => w.rows(),
            Eight::Blocks(m) => m.rows(),
        }
    }

    /// Whether every product of any length is in 8 bits here, so the f32
    /// weights are not needed.
    fn all_tokens(&self) -> bool {
        int8() || matches!(self, Eight::Widened(_))
    }

    /// Tokens in 8 bits where `all_tokens`, otherwise each row expanded to f32
    /// (only blocks are kept then: `new` packs none).
    fn product(&self, x: &[f32], n: usize, out: &mut [f32]) -> anyhow::Result<()> {
        let done = match self {
            Eight::Wide(w) => w.product(x, n, out),
            Eight::Widened(w) => w.product(x, n, out),
            Eight::Blocks(m) if int8() => m.product(x, n, out),
            Eight::Blocks(m) => m.matmul_rows_expanded(x, n, out),
        };
        done.map_err(|e| anyhow::anyhow!("{e}"))
    }
}

struct Layer {
    /// Query, key and value stacked: one product for the three.
    qkv: Dense,
    out: Dense,
    norm1: Norm,
    up: Dense,
    down: Dense,
    norm2: Norm,
}

pub struct Short {
    words: Q8Matrix,
    positions: Vec<f32>,
    types: Vec<f32>,
    norm: Norm,
    layers: Vec<Layer>,
    dim: usize,
    heads: usize,
}

fn vector(tensors: &HashMap<String, Tensor>, name: &str) -> anyhow::Result<Vec<f32>> {
    let t = tensors
        .get(name)
        .with_context(|| format!("model.safetensors has no {name}"))?;
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}

/// A matrix's shape and f32 values, row-major.
fn matrix(
    tensors: &HashMap<String, Tensor>,
    name: &str,
) -> anyhow::Result<(usize, usize, Vec<f32>)> {
    let t = tensors
        .get(name)
        .with_context(|| format!("model.safetensors has no {name}"))?;
    let (rows, cols) = t.dims2()?;
    Ok((rows, cols, t.flatten_all()?.to_vec1::<f32>()?))
}

/// Linear layers that read the same input, stacked into one (query, key and
/// value: one product for the three), in each form its products take.
fn dense(tensors: &HashMap<String, Tensor>, names: &[String]) -> anyhow::Result<Dense> {
    let (mut rows, mut cols, mut full, mut bias) = (0, None, Vec::new(), Vec::new());
    for name in names {
        let (r, c, values) = matrix(tensors, &format!("{name}.weight"))?;
        anyhow::ensure!(
            *cols.get_or_insert(c) == c,
            "{name} does not read the width of the layers stacked with it"
        );
        let b = vector(tensors, &format!("{name}.bias"))?;
        anyhow::ensure!(b.len() == r, "{name}'s bias does not fit its weight");
        rows += r;
        full.extend(values);
        bias.extend(b);
    }
    let cols = cols.unwrap_or(0);
    let weight = Q8Matrix::quantize(rows, cols, &full)
        .map_err(|e| anyhow::anyhow!("{} cannot be quantized: {e}", names.join(", ")))?;
    // A shape the tiles do not take leaves the passage to the other products.
    let tiles = tiles::available()
        .then(|| Bf16Matrix::pack(rows, cols, &full).ok())
        .flatten();
    let weight = Eight::new(weight);
    let full = if weight.all_tokens() {
        Vec::new()
    } else {
        full
    };
    Ok(Dense {
        weight,
        full,
        tiles,
        bias,
    })
}

fn norm(tensors: &HashMap<String, Tensor>, name: &str, eps: f32) -> anyhow::Result<Norm> {
    Ok(Norm {
        weight: vector(tensors, &format!("{name}.weight"))?,
        bias: vector(tensors, &format!("{name}.bias"))?,
        eps,
    })
}

impl Short {
    /// Quantizes the encoder's weights from `model.safetensors`' bytes.
    pub fn load(weights: &[u8], layers: usize, heads: usize, eps: f32) -> anyhow::Result<Short> {
        let tensors = candle_core::safetensors::load_buffer(weights, &Device::Cpu)?;
        let mut stack = Vec::with_capacity(layers);
        for i in 0..layers {
            let at = |part: &str| format!("encoder.layer.{i}.{part}");
            let attention = ["query", "key", "value"].map(|p| at(&format!("attention.self.{p}")));
            stack.push(Layer {
                qkv: dense(&tensors, &attention)?,
                out: dense(&tensors, &[at("attention.output.dense")])?,
                norm1: norm(&tensors, &at("attention.output.LayerNorm"), eps)?,
                up: dense(&tensors, &[at("intermediate.dense")])?,
                down: dense(&tensors, &[at("output.dense")])?,
                norm2: norm(&tensors, &at("output.LayerNorm"), eps)?,
            });
        }
        // Only the rows of a text's tokens are read: the 8-bit copy is enough.
        let (rows, dim, words) = matrix(&tensors, "embeddings.word_embeddings.weight")?;
        let words = Q8Matrix::quantize(rows, dim, &words)
            .map_err(|e| anyhow::anyhow!("the word embeddings cannot be quantized: {e}"))?;
        anyhow::ensure!(
            heads > 0 && dim % heads == 0,
            "heads do not divide the width"
        );
        let first = norm(&tensors, "embeddings.LayerNorm", eps)?;
        let norms = std::iter::once(&first).chain(stack.iter().flat_map(|l| [&l.norm1, &l.norm2]));
        for n in norms {
            anyhow::ensure!(
                n.weight.len() == dim && n.bias.len() == dim,
                "a layer norm's width is not the model's"
            );
        }
        Ok(Short {
            words,
            positions: vector(&tensors, "embeddings.position_embeddings.weight")?,
            types: vector(&tensors, "embeddings.token_type_embeddings.weight")?,
            norm: first,
            layers: stack,
            dim,
            heads,
        })
    }

    /// The width of a vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The mean of the last layer's token vectors, normalised.
    pub fn embed(&self, ids: &[u32]) -> anyhow::Result<Vec<f32>> {
        let (n, d) = (ids.len(), self.dim);
        anyhow::ensure!(n > 0 && n * d <= self.positions.len(), "too many tokens");
        let mut x = vec![0f32; n * d];
        for (t, (&id, row)) in ids.iter().zip(x.chunks_exact_mut(d)).enumerate() {
            self.words
                .row(id as usize, row)
                .map_err(|e| anyhow::anyhow!("token {id}: {e}"))?;
            for (j, v) in row.iter_mut().enumerate() {
                *v += self.positions[t * d + j] + self.types[j];
            }
        }
        layer_norm(&mut x, &self.norm);
        for layer in &self.layers {
            self.layer(layer, &mut x, n)?;
        }
        let mut mean = vec![0f32; d];
        for row in x.chunks_exact(d) {
            mean.iter_mut()
                .zip(row)
                .for_each(|(m, v)| *m += v / n as f32);
        }
        let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
        mean.iter_mut().for_each(|v| *v /= norm);
        Ok(mean)
    }

    fn layer(&self, layer: &Layer, x: &mut [f32], n: usize) -> anyhow::Result<()> {
        let d = self.dim;
        let qkv = apply(&layer.qkv, x, n)?;
        let context = if n <= SHORT_TOKENS {
            Floats::Vec(attention(&qkv, n, d, self.heads)?)
        } else {
            // The tiles where the CPU has them; heads they do not take (not
            // a multiple of 32 wide) go to the GEMM, as everywhere else.
            match tiles::available().then(|| tiles::attention(&qkv, n, d, self.heads)) {
                Some(Ok(context)) => Floats::Lines(context),
                _ => Floats::Vec(super::long::attention(&qkv, n, d, self.heads)?),
            }
        };
        let attended = apply(&layer.out, &context, n)?;
        x.iter_mut().zip(attended.iter()).for_each(|(a, b)| *a += b);
        layer_norm(x, &layer.norm1);
        let mut up = apply(&layer.up, x, n)?;
        elementwise::gelu(&mut up);
        let down = apply(&layer.down, &up, n)?;
        x.iter_mut().zip(down.iter()).for_each(|(a, b)| *a += b);
        layer_norm(x, &layer.norm2);
        Ok(())
    }
}

/// Whether products take 8-bit tokens on the VNNI product: where the CPU
/// multiplies 8 bits (`has_int8_product`) and `int8_wanted`.
pub(super) fn int8() -> bool {
    deskbell_kernels::has_int8_product() && int8_wanted()
}

/// Whether products take 8-bit tokens on the widened product: where the CPU
/// has AVX2 and not VNNI (`has_widened_product`), and `int8_wanted`.
fn widened() -> bool {
    deskbell_kernels::has_widened_product() && int8_wanted()
}

/// Whether a passage's products take f32 tokens: neither 8-bit product here.
#[cfg(test)]
pub(super) fn passages_in_f32() -> bool {
    !int8() && !widened()
}

/// Whether 8-bit tokens are wanted at all (VNNI's product or the widened one):
/// yes unless `DESKBELL_EMBED_INT8=off` asks for the f32 products, a switch
/// for measuring what the rounding costs on a labelled set (BENCHMARKS.md);
/// read once, so one process never mixes the two.
fn int8_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| !std::env::var("DESKBELL_EMBED_INT8").is_ok_and(|v| v == "off"))
}

/// A layer's outputs (or attention's): on cache lines (`Lines`) where the
/// tiles made them, since they store fastest there, otherwise as the other
/// products give them, read in place either way.
enum Floats {
    Lines(Lines<f32>),
    Vec(Vec<f32>),
}

impl std::ops::Deref for Floats {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match self {
            Floats::Lines(lines) => lines,
            Floats::Vec(values) => values,
        }
    }
}

impl std::ops::DerefMut for Floats {
    fn deref_mut(&mut self) -> &mut [f32] {
        match self {
            Floats::Lines(lines) => lines,
            Floats::Vec(values) => values,
        }
    }
}

/// The layer's outputs for `n` tokens.
fn apply(dense: &Dense, x: &[f32], n: usize) -> anyhow::Result<Floats> {
    if let (true, Some(tiles)) = (n > SHORT_TOKENS, &dense.tiles) {
        // As attention does, a product the tiles refuse is left to the others.
        if let Ok(out) = tiles.product(x, n, &dense.bias) {
            return Ok(Floats::Lines(out));
        }
    }
    if n > SHORT_TOKENS && !dense.weight.all_tokens() {
        return Ok(Floats::Vec(super::long::linear(
            &dense.full,
            &dense.bias,
            x,
            n,
        )?));
    }
    let rows = dense.weight.rows();
    let mut out = vec![0f32; n * rows];
    dense.weight.product(x, n, &mut out)?;
    add_bias(&mut out, &dense.bias);
    Ok(Floats::Vec(out))
}

/// Each token's outputs (`bias.len()` of them) plus the bias.
fn add_bias(out: &mut [f32], bias: &[f32]) {
    for row in out.chunks_exact_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

/// Every token attends to every token, head by head; `qkv` holds each token's
/// query, key and value one after another (`deskbell_kernels::attention_few`).
pub(super) fn attention(qkv: &[f32], n: usize, d: usize, heads: usize) -> anyhow::Result<Vec<f32>> {
    deskbell_kernels::attention_few(qkv, n, d, heads).map_err(|e| anyhow::anyhow!("{e}"))
}

/// A layer norm over each token's row (the norm's width, checked at load).
fn layer_norm(x: &mut [f32], norm: &Norm) {
    elementwise::layer_norm(x, &norm.weight, &norm.bias, norm.eps);
}
