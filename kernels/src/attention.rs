//! Rotary embeddings and causal attention over a key/value cache, for steps of a
//! few tokens (generating). Written out here because candle's path for one token
//! costs more around the arithmetic than in it: repeating the shared key heads,
//! copying the cache to append to it, and a matrix multiplication call per head
//! group that each asks the operating system how many CPUs it has.
//!
//! Layouts, all row-major: queries and outputs are `tokens × heads × dim`; the
//! cache is `positions × kv_heads × dim`; query head `h` reads key head
//! `h / (heads / kv_heads)`, as candle's `repeat_kv` arranges it.

use multiversion::multiversion;
use rayon::prelude::*;

use crate::ShapeError;

/// The shape of one attention step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    pub heads: usize,
    pub kv_heads: usize,
    pub dim: usize,
}

impl Heads {
    fn check(&self) -> Result<(), ShapeError> {
        let ok = self.heads > 0
            && self.kv_heads > 0
            && self.heads.is_multiple_of(self.kv_heads)
            && self.dim > 0
            && self.dim.is_multiple_of(2);
        if ok { Ok(()) } else { Err(ShapeError::Heads) }
    }
}

/// Rotates each head of `x` (`tokens × heads × dim`, the first token at position
/// `first`) by the angles `cos`/`sin` (`positions × dim/2`). `halves` pairs value
/// `i` with `i + dim/2` (qwen2, GPT-NeoX); otherwise pairs are neighbours
/// `2i, 2i+1` (llama as GGUF stores it).
pub fn rope(
    x: &mut [f32],
    heads: usize,
    dim: usize,
    first: usize,
    cos: &[f32],
    sin: &[f32],
    halves: bool,
) -> Result<(), ShapeError> {
    let half = dim / 2;
    if heads == 0 || dim == 0 || !dim.is_multiple_of(2) || !x.len().is_multiple_of(heads * dim) {
        return Err(ShapeError::Heads);
    }
    let tokens = x.len() / (heads * dim);
    if cos.len() != sin.len() || cos.len() < (first + tokens) * half {
        return Err(ShapeError::Length {
            expected: (first + tokens) * half,
            got: cos.len().min(sin.len()),
        });
    }
    for (t, token) in x.chunks_exact_mut(heads * dim).enumerate() {
        let at = (first + t) * half;
        let (cos, sin) = (&cos[at..at + half], &sin[at..at + half]);
        for head in token.chunks_exact_mut(dim) {
            if halves {
                let (a, b) = head.split_at_mut(half);
                for (((a, b), c), s) in a.iter_mut().zip(b).zip(cos).zip(sin) {
                    (*a, *b) = (*a * c - *b * s, *a * s + *b * c);
                }
            } else {
                for ((pair, c), s) in head.as_chunks_mut::<2>().0.iter_mut().zip(cos).zip(sin) {
                    let [a, b] = *pair;
                    *pair = [a * c - b * s, a * s + b * c];
                }
            }
        }
    }
    Ok(())
}

/// Causal attention of `queries` (`tokens × heads × dim`; token `t` sits at
/// position `first + t`) over `keys` and `values` (`positions × kv_heads × dim`,
/// holding at least `first + tokens` positions). Token `t` attends to positions
/// `0..=first + t`. Writes `tokens × heads × dim` into `out`.
pub fn attend(
    queries: &[f32],
    keys: &[f32],
    values: &[f32],
    shape: Heads,
    first: usize,
    out: &mut [f32],
) -> Result<(), ShapeError> {
    shape.check()?;
    let Heads {
        heads,
        kv_heads,
        dim,
    } = shape;
    if !queries.len().is_multiple_of(heads * dim) {
        return Err(ShapeError::Heads);
    }
    let tokens = queries.len() / (heads * dim);
    let needed = (first + tokens) * kv_heads * dim;
    if keys.len() < needed || values.len() < needed {
        return Err(ShapeError::Length {
            expected: needed,
            got: keys.len().min(values.len()),
        });
    }
    if out.len() != queries.len() {
        return Err(ShapeError::Length {
            expected: queries.len(),
            got: out.len(),
        });
    }
    let group = heads / kv_heads;
    let scale = 1.0 / (dim as f32).sqrt();
    // Each head of each token is its own task: generating a token, attention was
    // the largest part of a layer left on one thread (issue 42).
    out.par_chunks_mut(dim).enumerate().for_each_init(
        || vec![0f32; first + tokens],
        |scores, (i, out)| {
            let (t, h) = (i / heads, i % heads);
            let seen = first + t + 1;
            let q = &queries[i * dim..(i + 1) * dim];
            let kv = h / group;
            let scores = &mut scores[..seen];
            key_scores(q, keys, kv_heads * dim, kv * dim, scale, scores);
            super::elementwise::softmax(scores, 1.0);
            weighted_sum(scores, values, kv_heads * dim, kv * dim, out);
        },
    );
    Ok(())
}

/// `scores[p]` = `q` · the key at position `p` (found at `p * stride + offset`).
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn key_scores(
    q: &[f32],
    keys: &[f32],
    stride: usize,
    offset: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let dim = q.len();
    for (p, score) in scores.iter_mut().enumerate() {
        let k = &keys[p * stride + offset..][..dim];
        *score = dot(q, k) * scale;
    }
}

/// `out` = Σ `weights[p]` × the value at position `p`.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn weighted_sum(weights: &[f32], values: &[f32], stride: usize, offset: usize, out: &mut [f32]) {
    let dim = out.len();
    out.fill(0.0);
    for (p, w) in weights.iter().enumerate() {
        let v = &values[p * stride + offset..][..dim];
        for (o, v) in out.iter_mut().zip(v) {
            *o += w * v;
        }
    }
}

const LANES: usize = 16;

/// A dot product in sixteen running sums, so the compiler may vectorise it.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (a_chunks, a_rest) = a.as_chunks::<LANES>();
    let (b_chunks, b_rest) = b.as_chunks::<LANES>();
    let mut acc = [0f32; LANES];
    for (a, b) in a_chunks.iter().zip(b_chunks) {
        for ((acc, a), b) in acc.iter_mut().zip(a).zip(b) {
            *acc += a * b;
        }
    }
    let rest: f32 = a_rest.iter().zip(b_rest).map(|(a, b)| a * b).sum();
    acc.iter().sum::<f32>() + rest
}
