//! Kernels for sentence embeddings (SPEC §21): a question's few tokens through
//! the 8-bit weights with each row expanded once, and the 8-bit dot products of a
//! search by meaning.

use multiversion::multiversion;
use rayon::prelude::*;

use super::{BLOCK, LANES, Q8Matrix, ROWS_PER_TASK, ShapeError, check_len};

impl Q8Matrix {
    /// The same product as [`Q8Matrix::matmul`], with each row expanded to f32
    /// once and then multiplied by every token: for a few tokens to a few dozen
    /// (a sentence to embed), where `matmul` converts every weight again for
    /// each token. The sums are the same up to rounding (the scale is applied
    /// to each weight rather than to each block's sum).
    pub fn matmul_rows_expanded(
        &self,
        x: &[f32],
        tokens: usize,
        out: &mut [f32],
    ) -> Result<(), ShapeError> {
        check_len(tokens * self.cols, x.len())?;
        check_len(tokens * self.rows, out.len())?;
        if tokens == 0 || self.rows == 0 {
            return Ok(());
        }
        let bpr = self.blocks_per_row();
        let mut by_row = vec![0f32; self.rows * tokens];
        by_row
            .par_chunks_mut(ROWS_PER_TASK * tokens)
            .enumerate()
            .for_each(|(chunk, out)| {
                let first = chunk * ROWS_PER_TASK;
                let rows = out.len() / tokens;
                let blocks = first * bpr..(first + rows) * bpr;
                let (scales, quants) = (&self.scales[blocks.clone()], &self.quants[blocks]);
                #[cfg(target_arch = "x86_64")]
                if let Some(kernel) = super::sentence_x86::expanded_rows() {
                    // SAFETY: `expanded_rows` chose a kernel this CPU runs.
                    unsafe { kernel(scales, quants, bpr, x, out) };
                    return;
                }
                expanded_rows(scales, quants, bpr, x, out);
            });
        for (r, values) in by_row.chunks_exact(tokens).enumerate() {
            for (t, value) in values.iter().enumerate() {
                out[t * self.rows + r] = *value;
            }
        }
        Ok(())
    }
}

/// Each row of `scales`/`quants` expanded to f32 once, then dotted with every
/// vector of `x` (`tokens` of `bpr` blocks): `out[r * tokens + t]`.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub(crate) fn expanded_rows(
    scales: &[f32],
    quants: &[[i8; BLOCK]],
    bpr: usize,
    x: &[f32],
    out: &mut [f32],
) {
    let cols = bpr * BLOCK;
    let tokens = x.len() / cols;
    let mut row = vec![0f32; cols];
    for ((scales, quants), out) in scales
        .chunks_exact(bpr)
        .zip(quants.chunks_exact(bpr))
        .zip(out.chunks_exact_mut(tokens))
    {
        expand_blocks(scales, quants, &mut row);
        for (x, out) in x.chunks_exact(cols).zip(out) {
            *out = dot_f32(&row, x);
        }
    }
}

/// Blocks of 8-bit weights expanded to f32 into `out`, one after another; inlined
/// into each caller, so it is compiled with the caller's target features.
#[inline(always)]
pub(crate) fn expand_blocks(scales: &[f32], quants: &[[i8; BLOCK]], out: &mut [f32]) {
    for ((values, q), scale) in out.chunks_exact_mut(BLOCK).zip(quants).zip(scales) {
        for (v, q) in values.iter_mut().zip(q) {
            *v = f32::from(*q) * scale;
        }
    }
}

/// The dot product of `query` with each row of `rows` (8-bit integers, `query.len()`
/// each), into `out`: the search of passage vectors by meaning (SPEC §21). Compiled
/// for AVX2 and AVX-512 too, where the widening multiply-adds fill whole registers;
/// the crate's baseline build would do one lane at a time. With AVX-512 VNNI,
/// `vpdpbusd` multiplies 64 pairs an instruction instead. More than
/// `SCAN_ROWS_PER_TASK` rows are shared among the kernels' workers.
pub fn dot_i8_rows(query: &[i8], rows: &[i8], out: &mut [i32]) -> Result<(), ShapeError> {
    let dim = query.len();
    if dim == 0 {
        return Err(ShapeError::Columns(0));
    }
    check_len(out.len() * dim, rows.len())?;
    if out.len() <= SCAN_ROWS_PER_TASK {
        scan(query, rows, out);
        return Ok(());
    }
    out.par_chunks_mut(SCAN_ROWS_PER_TASK)
        .zip(rows.par_chunks(SCAN_ROWS_PER_TASK * dim))
        .for_each(|(out, rows)| scan(query, rows, out));
    Ok(())
}

/// One task's rows, on VNNI where the CPU has it.
fn scan(query: &[i8], rows: &[i8], out: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    if super::sentence_x86::scan_vnni() {
        // SAFETY: `scan_vnni` found the instructions it is compiled for.
        unsafe { super::sentence_x86::dot_i8_rows_vnni(query, rows, out) };
        return;
    }
    dot_i8_all(query, rows, out);
}

/// Rows of a scan per task: 768 KB of 384-byte vectors, so a task is worth
/// more than handing it to another worker (some microseconds, more when that
/// worker sleeps).
const SCAN_ROWS_PER_TASK: usize = 2_048;

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub(crate) fn dot_i8_all(query: &[i8], rows: &[i8], out: &mut [i32]) {
    for (row, out) in rows.chunks_exact(query.len()).zip(out) {
        *out = row
            .iter()
            .zip(query)
            .map(|(&a, &b)| i32::from(i16::from(a) * i16::from(b)))
            .sum();
    }
}

// Indexing by lane is what lets each lane keep its own sum.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    for (a, b) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        for lane in 0..LANES {
            acc[lane] += a[lane] * b[lane];
        }
    }
    acc.iter().sum()
}

/// Bidirectional attention over a few tokens (a question to embed): every
/// token attends to every token, head by head, `qkv` holding each token's
/// query, key and value one after another (`n × 3d`), the output `n × d`.
///
/// Compiled for each CPU feature set, each dot product summed in eight lanes
/// and then across them: summed in order, as a plain iterator sums, the
/// compiler may not reorder the additions and leaves the loop scalar. For an
/// 11-token question this was 0.37–0.42 ms of a 4.9 ms embedding on an AVX2
/// CPU (BENCHMARKS.md, "The embedded model and a question's embedding on an
/// AVX2-only CPU").
pub fn attention_few(
    qkv: &[f32],
    n: usize,
    d: usize,
    heads: usize,
) -> Result<Vec<f32>, ShapeError> {
    if heads == 0 || !d.is_multiple_of(heads) {
        return Err(ShapeError::Heads);
    }
    check_len(n * 3 * d, qkv.len())?;
    let mut out = vec![0f32; n * d];
    attend(qkv, n, d, heads, &mut out);
    Ok(out)
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn attend(qkv: &[f32], n: usize, d: usize, heads: usize, out: &mut [f32]) {
    let size = d / heads;
    let scale = 1.0 / (size as f32).sqrt();
    let mut weights = vec![0f32; n];
    for h in 0..heads {
        for i in 0..n {
            let q = &qkv[i * 3 * d + h * size..][..size];
            for (j, w) in weights.iter_mut().enumerate() {
                let k = &qkv[j * 3 * d + d + h * size..][..size];
                *w = dot(q, k) * scale;
            }
            crate::elementwise::softmax(&mut weights, 1.0);
            let row = &mut out[i * d + h * size..][..size];
            for (j, w) in weights.iter().enumerate() {
                let v = &qkv[j * 3 * d + 2 * d + h * size..][..size];
                row.iter_mut().zip(v).for_each(|(o, v)| *o += w * v);
            }
        }
    }
}

/// `a · b` in eight lanes, then across them; inlined into each version of
/// its caller.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (a8, a_rest) = a.as_chunks::<8>();
    let (b8, b_rest) = b.as_chunks::<8>();
    let mut lanes = [0f32; 8];
    for (a, b) in a8.iter().zip(b8) {
        for l in 0..8 {
            lanes[l] += a[l] * b[l];
        }
    }
    let tail: f32 = a_rest.iter().zip(b_rest).map(|(a, b)| a * b).sum();
    lanes.iter().sum::<f32>() + tail
}
