//! What the one-token products share: the tokens rounded to 8-bit blocks, and
//! the rows split over the worker threads.

use rayon::prelude::*;

use crate::{BLOCK, quantize_block};

/// Rows handed to one parallel task: a task should be worth more than the few
/// microseconds it costs to hand out.
const ROWS_PER_TASK: usize = 64;

/// The tokens of a product quantized to 8-bit blocks: for each block its values,
/// its scale, and its scale times the sum of its values (for the `m` term).
pub(crate) struct Quantized {
    pub(crate) quants: Vec<[i8; BLOCK]>,
    pub(crate) scales: Vec<f32>,
    pub(crate) sums: Vec<f32>,
}

impl Quantized {
    pub(crate) fn of(x: &[f32]) -> Self {
        let (blocks, _) = x.as_chunks::<BLOCK>();
        let mut out = Quantized {
            quants: Vec::with_capacity(blocks.len()),
            scales: Vec::with_capacity(blocks.len()),
            sums: Vec::with_capacity(blocks.len()),
        };
        for block in blocks {
            // A value that is not a finite number makes the token's products not
            // a number, as an f32 product would, rather than a quiet zero.
            if !block.iter().all(|v| v.is_finite()) {
                out.quants.push([0; BLOCK]);
                out.scales.push(f32::NAN);
                out.sums.push(f32::NAN);
                continue;
            }
            let (scale, q) = quantize_block(block);
            let sum: i32 = q.iter().map(|v| i32::from(*v)).sum();
            out.quants.push(q);
            out.scales.push(scale);
            out.sums.push(scale * sum as f32);
        }
        out
    }
}

/// `out[t * rows + r] = dot(r, t)` for every row and token, the rows split into
/// parallel tasks; each row is read once for all the tokens.
pub(crate) fn each_row_and_token(
    rows: usize,
    tokens: usize,
    out: &mut [f32],
    dot: impl Fn(usize, usize) -> f32 + Sync,
) {
    let task = |(chunk, out): (usize, &mut [f32])| {
        let first = chunk * ROWS_PER_TASK;
        for (i, out) in out.chunks_exact_mut(tokens).enumerate() {
            for (t, out) in out.iter_mut().enumerate() {
                *out = dot(first + i, t);
            }
        }
    };
    if tokens == 1 {
        out.par_chunks_mut(ROWS_PER_TASK).enumerate().for_each(task);
        return;
    }
    let mut by_row = vec![0f32; rows * tokens];
    by_row
        .par_chunks_mut(ROWS_PER_TASK * tokens)
        .enumerate()
        .for_each(task);
    token_major(&by_row, rows, tokens, out);
}

/// `by_row` (each row's value for every token) turned token-major into `out`.
pub(crate) fn token_major(by_row: &[f32], rows: usize, tokens: usize, out: &mut [f32]) {
    for (r, values) in by_row.chunks_exact(tokens).enumerate() {
        for (t, value) in values.iter().enumerate() {
            out[t * rows + r] = *value;
        }
    }
}
