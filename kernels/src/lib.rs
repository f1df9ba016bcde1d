//! The embedded model's quantized matrix kernels.
//!
//! A matrix a GGUF file holds as Q4_1 keeps that 4-bit layout ([`Q4Matrix`],
//! `q4.rs`); every other one is kept as 8-bit integers, as follows. A weight
//! matrix is kept as 8-bit integers in blocks of 32 along each row, each
//! block with its own f32 scale (GGML's Q8_0 layout, but with an f32 scale) and
//! the sum of its integers (for the 8-bit product): 1.1875 bytes a weight, against
//! 4 for f32. Generating a token multiplies every weight
//! once, so its speed is set by the bytes read per token, and these are a quarter.
//! Reading a prompt multiplies each weight by many tokens, so there arithmetic
//! sets the speed: [`Q8Matrix::product`] quantizes the tokens to 8 bits too and
//! multiplies in integers where the CPU has AVX-512 VNNI (`int8.rs`); elsewhere
//! the caller does better to expand one matrix at a time with
//! [`Q8Matrix::dequantize`] for a tuned f32 GEMM ([`has_int8_product`] tells which).
//!
//! A generated token is rounded to 8-bit blocks too and multiplied block by block
//! in integers, for both layouts (`q8_few.rs`, `q4.rs`; the x86 kernels in
//! `q8_x86.rs` and `q4_x86.rs`, chosen at run time between AVX-512 VNNI and AVX2,
//! with a plain-Rust loop elsewhere).
//!
//! Every other loop here is plain safe Rust written so the compiler vectorises it,
//! and each is compiled several times (AVX-512 or AVX2 with FMA, NEON and the
//! baseline) by `multiversion`, which picks the best the CPU has when first called.
//! That is the point of this crate: candle chooses its quantized kernels at compile
//! time, so a portable build of it multiplies quantized weights with scalar code.
//! The 8-bit products are written with intrinsics because no plain loop compiles
//! to `vpdpbusd` against a broadcast operand, nor to a reduction of eight blocks
//! at once; they too are chosen at run time.
//!
//! It is its own crate so that it is optimised even in debug builds: the test
//! suite runs a real model through these loops.

use std::fmt;
use std::mem::MaybeUninit;

use multiversion::multiversion;
use rayon::prelude::*;

pub mod attention;
pub mod dense;
pub mod elementwise;
#[cfg(target_arch = "x86_64")]
mod gelu_x86;
#[cfg(target_arch = "x86_64")]
mod pow2_x86;
mod q4;
#[cfg(target_arch = "x86_64")]
mod q4_x86;
mod q8_few;
#[cfg(target_arch = "x86_64")]
mod q8_x86;
mod sentence;
#[cfg(target_arch = "x86_64")]
mod sentence_x86;
pub mod tiles;
mod tokens;
mod wide;
mod widened;
#[cfg(target_arch = "x86_64")]
mod widened_x86;
mod workers;
pub use q4::{Q4_1_BYTES, Q4Matrix};
#[cfg(test)]
use q8_few::every_q8_kernel;
pub use sentence::{attention_few, dot_i8_rows};
pub use wide::Q8Wide;
pub use widened::{Q8Widened, has_widened_product};
pub use workers::{each_on_workers, on_workers, spawn_on_workers};
#[cfg(target_arch = "x86_64")]
mod int8;

/// Weights per block; each block has one scale.
pub const BLOCK: usize = 32;

/// The width of the accumulators: sixteen f32 lanes fill one AVX-512 register or
/// two AVX2 ones, and summing each lane on its own keeps the additions in an order
/// the compiler may vectorise without changing the result.
const LANES: usize = 16;

/// Rows handed to one parallel task: a task should be worth more than the few
/// microseconds it costs to hand out.
const ROWS_PER_TASK: usize = 64;

/// Blocks expanded by one parallel task in [`Q8Matrix::dequantize`].
const BLOCKS_PER_TASK: usize = 4096;

/// A buffer or index that does not fit the matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShapeError {
    /// A row's length is not a positive whole number of blocks.
    Columns(usize),
    /// A buffer's length does not match the shape.
    Length { expected: usize, got: usize },
    /// A row index past the last row.
    Row { row: usize, rows: usize },
    /// Attention heads that do not fit: none, key heads that do not divide the
    /// query heads, or an odd head size.
    Heads,
    /// More weights than memory can address.
    TooLarge { rows: usize, cols: usize },
    /// A size the AMX tiles' product needs a multiple of, and the size given.
    Multiple { of: usize, got: usize },
    /// The CPU has no AMX-BF16 tiles, or Linux does not lend them (`tiles.rs`).
    NoTiles,
    /// Matrices whose shapes do not multiply into the output's.
    Product {
        left: (usize, usize),
        right: (usize, usize),
        out: (usize, usize),
    },
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeError::Columns(cols) => write!(
                f,
                "a quantized matrix needs rows of a positive multiple of {BLOCK} values, not {cols}"
            ),
            ShapeError::Length { expected, got } => {
                write!(f, "expected a buffer of {expected} values, got {got}")
            }
            ShapeError::Row { row, rows } => {
                write!(f, "row {row} is past the matrix's {rows} rows")
            }
            ShapeError::Multiple { of, got } => {
                write!(f, "the tiles' product needs a multiple of {of}, not {got}")
            }
            ShapeError::NoTiles => write!(f, "this CPU has no AMX-BF16 tiles to use"),
            ShapeError::Heads => write!(f, "the attention heads do not fit the buffers"),
            ShapeError::TooLarge { rows, cols } => {
                write!(f, "a matrix of {rows} × {cols} weights is too large")
            }
            ShapeError::Product { left, right, out } => write!(
                f,
                "{} × {} times {} × {} does not give {} × {}",
                left.0, left.1, right.0, right.1, out.0, out.1
            ),
        }
    }
}

impl std::error::Error for ShapeError {}

/// A matrix of `rows × cols` weights, quantized to 8 bits in blocks of 32 per row.
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Matrix {
    rows: usize,
    cols: usize,
    /// One scale per block, row after row.
    scales: Vec<f32>,
    quants: Vec<[i8; BLOCK]>,
    /// Each block's integers added up, which the 8-bit product needs (`int8.rs`).
    sums: Vec<i16>,
}

impl Q8Matrix {
    /// Quantizes `values`, given row after row. Each block's scale is its largest
    /// magnitude over 127, so every value comes back within half a step.
    pub fn quantize(rows: usize, cols: usize, values: &[f32]) -> Result<Self, ShapeError> {
        if cols == 0 || !cols.is_multiple_of(BLOCK) {
            return Err(ShapeError::Columns(cols));
        }
        check_len(weights(rows, cols)?, values.len())?;
        let (blocks, _) = values.as_chunks::<BLOCK>();
        let (scales, quants): (Vec<f32>, Vec<[i8; BLOCK]>) =
            blocks.par_iter().map(quantize_block).unzip();
        let sums = quants.par_iter().map(block_sum).collect();
        Ok(Self {
            rows,
            cols,
            scales,
            quants,
            sums,
        })
    }

    /// The rows of `parts` one after another, as one matrix (fused projections:
    /// one call, and one parallel region, instead of several).
    pub fn stack(parts: &[&Q8Matrix]) -> Result<Self, ShapeError> {
        let cols = stacked_cols(parts.iter().map(|m| m.cols))?;
        Ok(Self {
            rows: parts.iter().map(|m| m.rows).sum(),
            cols,
            scales: parts
                .iter()
                .flat_map(|m| m.scales.iter().copied())
                .collect(),
            quants: parts
                .iter()
                .flat_map(|m| m.quants.iter().copied())
                .collect(),
            sums: parts.iter().flat_map(|m| m.sums.iter().copied()).collect(),
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The memory the weights take.
    pub fn bytes(&self) -> usize {
        self.scales.len() * size_of::<f32>()
            + self.quants.len() * BLOCK
            + self.sums.len() * size_of::<i16>()
    }

    fn blocks_per_row(&self) -> usize {
        self.cols / BLOCK
    }

    /// Expands row `row` into `out` (an embedding lookup).
    pub fn row(&self, row: usize, out: &mut [f32]) -> Result<(), ShapeError> {
        check_row(row, self.rows)?;
        check_len(self.cols, out.len())?;
        let bpr = self.blocks_per_row();
        let range = row * bpr..(row + 1) * bpr;
        let blocks = self.scales[range.clone()].iter().zip(&self.quants[range]);
        for (out, (scale, q)) in out.as_chunks_mut::<BLOCK>().0.iter_mut().zip(blocks) {
            *out = block_values(q, *scale);
        }
        Ok(())
    }

    /// The whole matrix expanded to f32, row after row.
    pub fn dequantize(&self) -> Vec<f32> {
        // Written once, not zeroed first: on a prompt this runs for every matrix
        // of every step, and zeroing was a measured share of the time.
        let blocks = self.quants.len();
        let mut out: Vec<[f32; BLOCK]> = Vec::with_capacity(blocks);
        out.spare_capacity_mut()[..blocks]
            .par_chunks_mut(BLOCKS_PER_TASK)
            .zip(self.quants.par_chunks(BLOCKS_PER_TASK))
            .zip(self.scales.par_chunks(BLOCKS_PER_TASK))
            .for_each(|((out, quants), scales)| expand_into(scales, quants, out));
        // SAFETY: the first `blocks` slots were all written: their chunks and the
        // quants' chunks (`blocks` in all) split at the same places, and
        // `expand_into` writes one slot for each quant block of its chunk.
        unsafe { out.set_len(blocks) };
        out.into_flattened()
    }

    /// Multiplies `tokens` vectors (`x`, one after another, `cols` values each) by
    /// the matrix: `out[t * rows + r]` is row `r` · vector `t`. Each row is read
    /// once for all the vectors, so this suits a few tokens; for many, expand the
    /// matrix and use a GEMM.
    pub fn matmul(&self, x: &[f32], tokens: usize, out: &mut [f32]) -> Result<(), ShapeError> {
        check_len(tokens * self.cols, x.len())?;
        check_len(tokens * self.rows, out.len())?;
        if tokens == 0 || self.rows == 0 {
            return Ok(());
        }
        let bpr = self.blocks_per_row();
        let (x, _) = x.as_chunks::<BLOCK>();
        let task = |(chunk, out): (usize, &mut [f32])| {
            let first = chunk * ROWS_PER_TASK;
            let rows = out.len() / tokens;
            let blocks = first * bpr..(first + rows) * bpr;
            dot_rows(
                &self.scales[blocks.clone()],
                &self.quants[blocks],
                bpr,
                x,
                out,
            );
        };
        if tokens == 1 {
            out.par_chunks_mut(ROWS_PER_TASK).enumerate().for_each(task);
            return Ok(());
        }
        // The tasks split the rows, so each fills its rows for every token; the
        // result is then turned token-major.
        let mut by_row = vec![0f32; self.rows * tokens];
        by_row
            .par_chunks_mut(ROWS_PER_TASK * tokens)
            .enumerate()
            .for_each(task);
        tokens::token_major(&by_row, self.rows, tokens, out);
        Ok(())
    }

    /// The same product as [`Q8Matrix::matmul`] for many tokens: where
    /// [`has_int8_product`], the tokens are quantized to 8 bits in blocks of 32 too
    /// (each value within half a step of its block's largest magnitude over 127)
    /// and multiplied in integers; elsewhere it is `matmul`.
    pub fn product(&self, x: &[f32], tokens: usize, out: &mut [f32]) -> Result<(), ShapeError> {
        check_len(tokens * self.cols, x.len())?;
        check_len(tokens * self.rows, out.len())?;
        #[cfg(target_arch = "x86_64")]
        if int8::available() {
            if tokens > 0 && self.rows > 0 {
                // SAFETY: `available` found the instructions it runs.
                unsafe { int8::product(self, x, tokens, out) };
            }
            return Ok(());
        }
        self.matmul(x, tokens, out)
    }
}

/// Whether [`Q8Matrix::product`] multiplies in 8 bits on this CPU (AVX-512 VNNI);
/// elsewhere it is [`Q8Matrix::matmul`], and a caller with many tokens does better
/// to expand the matrix for an f32 GEMM.
pub fn has_int8_product() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        int8::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The columns every part of a stack shares: an error if they differ or are none.
fn stacked_cols(mut cols: impl Iterator<Item = usize>) -> Result<usize, ShapeError> {
    let first = cols.next().unwrap_or(0);
    if let Some(other) = cols.find(|c| *c != first) {
        return Err(ShapeError::Length {
            expected: first,
            got: other,
        });
    }
    if first == 0 {
        return Err(ShapeError::Columns(0));
    }
    Ok(first)
}

/// `rows × cols`, or an error where a file's shape would overflow it.
fn weights(rows: usize, cols: usize) -> Result<usize, ShapeError> {
    rows.checked_mul(cols)
        .ok_or(ShapeError::TooLarge { rows, cols })
}

fn check_row(row: usize, rows: usize) -> Result<(), ShapeError> {
    if row < rows {
        Ok(())
    } else {
        Err(ShapeError::Row { row, rows })
    }
}

fn check_len(expected: usize, got: usize) -> Result<(), ShapeError> {
    if expected == got {
        Ok(())
    } else {
        Err(ShapeError::Length { expected, got })
    }
}

fn block_sum(q: &[i8; BLOCK]) -> i16 {
    // At most 32 × 127 in magnitude, well within an i16.
    q.iter().map(|v| i16::from(*v)).sum()
}

fn quantize_block(block: &[f32; BLOCK]) -> (f32, [i8; BLOCK]) {
    let max = block.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 {
        return (0.0, [0; BLOCK]);
    }
    let scale = max / 127.0;
    let inverse = 1.0 / scale;
    // `as` saturates, and the largest magnitude maps to exactly 127.
    (scale, block.map(|x| (x * inverse).round() as i8))
}

/// Each of the rows in `scales`/`quants` (`bpr` blocks each) times every vector of
/// `x`, written row-major: `out[r * tokens + t]`.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn dot_rows(
    scales: &[f32],
    quants: &[[i8; BLOCK]],
    bpr: usize,
    x: &[[f32; BLOCK]],
    out: &mut [f32],
) {
    let tokens = x.len() / bpr;
    for ((scales, quants), out) in scales
        .chunks_exact(bpr)
        .zip(quants.chunks_exact(bpr))
        .zip(out.chunks_exact_mut(tokens))
    {
        for (x, out) in x.chunks_exact(bpr).zip(out) {
            *out = dot(scales, quants, x);
        }
    }
}

// Indexing by lane is what lets each lane keep its own sum.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn dot(scales: &[f32], quants: &[[i8; BLOCK]], x: &[[f32; BLOCK]]) -> f32 {
    let mut acc = [0f32; LANES];
    for ((scale, q), x) in scales.iter().zip(quants).zip(x) {
        let mut part = [0f32; LANES];
        for half in 0..BLOCK / LANES {
            for lane in 0..LANES {
                let i = half * LANES + lane;
                part[lane] += f32::from(q[i]) * x[i];
            }
        }
        for lane in 0..LANES {
            acc[lane] += part[lane] * scale;
        }
    }
    acc.iter().sum()
}

/// A block's values: its integers times its scale.
#[inline(always)]
fn block_values(q: &[i8; BLOCK], scale: f32) -> [f32; BLOCK] {
    q.map(|v| f32::from(v) * scale)
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn expand_into(scales: &[f32], quants: &[[i8; BLOCK]], out: &mut [MaybeUninit<[f32; BLOCK]>]) {
    for ((scale, q), out) in scales.iter().zip(quants).zip(out) {
        out.write(block_values(q, *scale));
    }
}

#[cfg(test)]
mod tests;
