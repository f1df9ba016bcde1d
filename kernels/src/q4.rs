//! A matrix kept in GGML's 4-bit Q4_1 layout, as a GGUF file holds it.
//!
//! Generating a token multiplies every weight once, so the bytes read per token
//! set a floor on its time: a model whose layers come as Q4_1 reads 0.625 bytes a
//! weight here, where re-quantizing it to [`crate::Q8Matrix`] read 1.125 (the
//! integers and the scales; llama.cpp reads the file's own layout). Fewer bytes
//! alone did not make generation faster: the kernels (`q4_x86.rs`) had to stop
//! waiting on their own chain of multiply-adds too (BENCHMARKS.md, issue 42). A
//! block is 32 weights `d × q + m`, `q` in 0..16: sixteen bytes of nibbles (byte
//! `j` holds weight `j` low and weight `j + 16` high) and two f16 numbers, kept in
//! three separate arrays so the one-token loop reads only what it needs.
//!
//! The tokens are quantized to 8-bit blocks ([`crate::quantize_block`]), as
//! llama.cpp does, so a block's product is an integer sum of 32 byte products
//! (`q4_x86.rs`): `d·dx·Σ q·xq + m·dx·Σ xq`. Many tokens go through the same
//! 8-bit panel product as [`crate::Q8Matrix`] where the CPU has AVX-512 VNNI
//! (`int8.rs`); elsewhere the caller expands the matrix for an f32 GEMM.

use half::f16;
use multiversion::multiversion;
use rayon::prelude::*;

use crate::tokens::{Quantized, each_row_and_token};
use crate::{BLOCK, BLOCKS_PER_TASK, ShapeError, check_len, check_row, stacked_cols, weights};

/// Bytes of a Q4_1 block in a GGUF file: `d` and `m` as f16, then the nibbles.
pub const Q4_1_BYTES: usize = 20;

/// A `rows × cols` matrix of Q4_1 blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct Q4Matrix {
    rows: usize,
    cols: usize,
    /// Each block's `d`, as f16 bits, row after row.
    pub(crate) scales: Vec<u16>,
    /// Each block's `m`, as f16 bits.
    pub(crate) mins: Vec<u16>,
    pub(crate) quants: Vec<[u8; BLOCK / 2]>,
    /// Each block's nibbles added up, which the 8-bit panel product needs.
    pub(crate) sums: Vec<i16>,
}

impl Q4Matrix {
    /// The matrix from a GGUF tensor's bytes: `rows × cols / 32` Q4_1 blocks.
    pub fn from_q4_1(rows: usize, cols: usize, bytes: &[u8]) -> Result<Self, ShapeError> {
        if cols == 0 || !cols.is_multiple_of(BLOCK) {
            return Err(ShapeError::Columns(cols));
        }
        let blocks = weights(rows, cols)? / BLOCK;
        let size = blocks
            .checked_mul(Q4_1_BYTES)
            .ok_or(ShapeError::TooLarge { rows, cols })?;
        check_len(size, bytes.len())?;
        let (blocks, _) = bytes.as_chunks::<Q4_1_BYTES>();
        let bits = |b: &[u8; Q4_1_BYTES], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let quants: Vec<[u8; BLOCK / 2]> = blocks
            .iter()
            .map(|b| std::array::from_fn(|i| b[4 + i]))
            .collect();
        let sums = quants.iter().map(nibble_sum).collect();
        Ok(Self {
            rows,
            cols,
            scales: blocks.iter().map(|b| bits(b, 0)).collect(),
            mins: blocks.iter().map(|b| bits(b, 2)).collect(),
            quants,
            sums,
        })
    }

    /// The rows of `parts` one after another, as one matrix.
    pub fn stack(parts: &[&Q4Matrix]) -> Result<Self, ShapeError> {
        let cols = stacked_cols(parts.iter().map(|m| m.cols))?;
        let all = |f: fn(&Q4Matrix) -> usize| parts.iter().map(|m| f(m)).sum();
        let mut out = Self {
            rows: all(|m| m.rows),
            cols,
            scales: Vec::with_capacity(all(|m| m.scales.len())),
            mins: Vec::with_capacity(all(|m| m.mins.len())),
            quants: Vec::with_capacity(all(|m| m.quants.len())),
            sums: Vec::with_capacity(all(|m| m.sums.len())),
        };
        for m in parts {
            out.scales.extend_from_slice(&m.scales);
            out.mins.extend_from_slice(&m.mins);
            out.quants.extend_from_slice(&m.quants);
            out.sums.extend_from_slice(&m.sums);
        }
        Ok(out)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub(crate) fn blocks_per_row(&self) -> usize {
        self.cols / BLOCK
    }

    /// The memory the weights take.
    pub fn bytes(&self) -> usize {
        self.quants.len() * (BLOCK / 2 + 2 * size_of::<u16>() + size_of::<i16>())
    }

    /// Block `k`'s `d` and `m`.
    pub(crate) fn scale_min(&self, k: usize) -> (f32, f32) {
        (
            f16::from_bits(self.scales[k]).to_f32(),
            f16::from_bits(self.mins[k]).to_f32(),
        )
    }

    /// Expands row `row` into `out` (an embedding lookup).
    pub fn row(&self, row: usize, out: &mut [f32]) -> Result<(), ShapeError> {
        check_row(row, self.rows)?;
        check_len(self.cols, out.len())?;
        let bpr = self.blocks_per_row();
        for (b, out) in out.chunks_exact_mut(BLOCK).enumerate() {
            let k = row * bpr + b;
            let (d, m) = self.scale_min(k);
            for (out, q) in out.iter_mut().zip(nibbles(&self.quants[k])) {
                *out = d * f32::from(q) + m;
            }
        }
        Ok(())
    }

    /// The whole matrix expanded to f32, row after row, over the worker threads:
    /// a CPU without AVX-512 VNNI does this for each matrix of each prompt step.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        out.par_chunks_mut(BLOCK)
            .with_min_len(BLOCKS_PER_TASK)
            .enumerate()
            .for_each(|(k, out)| {
                let (d, m) = self.scale_min(k);
                for (out, q) in out.iter_mut().zip(nibbles(&self.quants[k])) {
                    *out = d * f32::from(q) + m;
                }
            });
        out
    }

    /// `tokens` vectors (`x`, `cols` values each) times the matrix, the tokens
    /// rounded to 8-bit blocks: `out[t * rows + r]` is row `r` · vector `t`. Each
    /// row is read once for all the vectors, so this suits a few tokens.
    pub fn product_few(&self, x: &[f32], tokens: usize, out: &mut [f32]) -> Result<(), ShapeError> {
        check_len(tokens * self.cols, x.len())?;
        check_len(tokens * self.rows, out.len())?;
        if tokens == 0 || self.rows == 0 {
            return Ok(());
        }
        let x = Quantized::of(x);
        let bpr = self.blocks_per_row();
        each_row_and_token(self.rows, tokens, out, |r, t| {
            let at = r * bpr..(r + 1) * bpr;
            let row = Row {
                scales: &self.scales[at.clone()],
                mins: &self.mins[at.clone()],
                quants: &self.quants[at],
            };
            row.dot(&x, t * bpr..(t + 1) * bpr)
        });
        Ok(())
    }

    /// The same product as [`Q4Matrix::product_few`] for many tokens: the 8-bit panel
    /// product where [`crate::has_int8_product`], elsewhere `product_few`.
    pub fn product(&self, x: &[f32], tokens: usize, out: &mut [f32]) -> Result<(), ShapeError> {
        check_len(tokens * self.cols, x.len())?;
        check_len(tokens * self.rows, out.len())?;
        #[cfg(target_arch = "x86_64")]
        if crate::int8::available() {
            if tokens > 0 && self.rows > 0 {
                // SAFETY: `available` found the instructions it runs.
                unsafe { crate::int8::product(self, x, tokens, out) };
            }
            return Ok(());
        }
        self.product_few(x, tokens, out)
    }
}

/// One row's blocks.
pub(crate) struct Row<'a> {
    pub(crate) scales: &'a [u16],
    pub(crate) mins: &'a [u16],
    pub(crate) quants: &'a [[u8; BLOCK / 2]],
}

impl Row<'_> {
    /// The row · the quantized token whose blocks are `blocks` of `x`.
    fn dot(&self, x: &Quantized, blocks: std::ops::Range<usize>) -> f32 {
        let (xq, xd, xs) = (
            &x.quants[blocks.clone()],
            &x.scales[blocks.clone()],
            &x.sums[blocks],
        );
        #[cfg(target_arch = "x86_64")]
        if let Some(dot) = crate::q4_x86::dot() {
            // SAFETY: `dot` returns a kernel only where the CPU has its features.
            return unsafe { dot(self, xq, xd, xs) };
        }
        portable_dot(self.scales, self.mins, self.quants, xq, xd, xs)
    }
}

/// A block's 32 weights in order: the low nibbles, then the high ones.
fn nibbles(q: &[u8; BLOCK / 2]) -> impl Iterator<Item = u8> + '_ {
    q.iter().map(|b| b & 0x0F).chain(q.iter().map(|b| b >> 4))
}

fn nibble_sum(q: &[u8; BLOCK / 2]) -> i16 {
    // At most 32 × 15.
    nibbles(q).map(i16::from).sum()
}

/// The row · token `x` with every kernel this CPU runs, the portable one first.
#[cfg(test)]
pub(crate) fn every_kernel(m: &Q4Matrix, row: usize, x: &[f32]) -> Vec<(&'static str, f32)> {
    let x = Quantized::of(x);
    let bpr = m.blocks_per_row();
    let at = row * bpr..(row + 1) * bpr;
    let (scales, mins, quants) = (&m.scales[at.clone()], &m.mins[at.clone()], &m.quants[at]);
    let portable = portable_dot(scales, mins, quants, &x.quants, &x.scales, &x.sums);
    #[allow(unused_mut)]
    let mut all = vec![("portable", portable)];
    #[cfg(target_arch = "x86_64")]
    for (name, dot) in crate::q4_x86::all() {
        let row = Row {
            scales,
            mins,
            quants,
        };
        // SAFETY: `all` lists only kernels whose features the CPU has.
        all.push((name, unsafe { dot(&row, &x.quants, &x.scales, &x.sums) }));
    }
    all
}

/// The row's product in plain Rust, compiled for several targets (a CPU without
/// AVX2, or not x86).
#[multiversion(targets("x86_64+avx2+fma", "aarch64+neon"))]
fn portable_dot(
    scales: &[u16],
    mins: &[u16],
    quants: &[[u8; BLOCK / 2]],
    xq: &[[i8; BLOCK]],
    xd: &[f32],
    xs: &[f32],
) -> f32 {
    let mut total = 0f32;
    for (((d, m), q), ((xq, xd), xs)) in scales
        .iter()
        .zip(mins)
        .zip(quants)
        .zip(xq.iter().zip(xd).zip(xs))
    {
        let mut sum = 0i32;
        for (j, b) in q.iter().enumerate() {
            sum += i32::from(b & 0x0F) * i32::from(xq[j]);
            sum += i32::from(b >> 4) * i32::from(xq[j + BLOCK / 2]);
        }
        let (d, m) = (f16::from_bits(*d).to_f32(), f16::from_bits(*m).to_f32());
        total += d * xd * sum as f32 + m * xs;
    }
    total
}
