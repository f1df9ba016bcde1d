//! An 8-bit matrix widened to 16 bits for a product of many tokens on CPUs with
//! AVX2 and no AVX-512 VNNI: a passage's products at ingest (SPEC §21) on such
//! a CPU, which otherwise take the f32 weights on an f32 GEMM.
//!
//! AVX2 has no instruction that multiplies signed bytes by signed bytes and adds
//! them up; `vpmaddwd` multiplies sixteen pairs of 16-bit integers and adds each
//! pair, exactly, into eight 32-bit sums. It issues at the rate of an f32
//! multiply-add of the same width (two a cycle on the AMD EPYC where it was
//! written) and does twice the multiplications. So the weights are kept widened:
//! a register holds eight rows' two weights of one pair of columns, and a
//! token's same two values, as one dword, are broadcast to meet them.
//!
//! The tokens are quantized to 8-bit blocks as [`crate::Q8Matrix::product`]
//! quantizes them (each block's largest magnitude over 127, rounded half to
//! even), and each block's integer sum is scaled and added in the order that
//! product adds it: the outputs are `product`'s on AVX-512 VNNI, bit for bit.

use crate::{BLOCK, Q8Matrix, ShapeError, check_len};

/// Rows whose pairs fill one register: one 32-bit lane each.
pub(crate) const ROWS: usize = 8;

/// Pairs of columns in a block.
pub(crate) const PAIRS: usize = BLOCK / 2;

/// A [`Q8Matrix`] widened for [`Q8Widened::product`]; only made where the CPU
/// has AVX2 and FMA but not the AVX-512 VNNI product, and the rows are a whole
/// number of eight.
#[derive(Clone, Debug)]
pub struct Q8Widened {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// For each eight rows, each block and each of its sixteen pairs of
    /// columns: the eight rows' two weights, lane by lane.
    pub(crate) quants: Vec<[i16; 2 * ROWS]>,
    /// For each eight rows and each block, the eight rows' scales.
    pub(crate) scales: Vec<[f32; ROWS]>,
}

impl Q8Widened {
    /// `m` widened, or `None` where the product would not run here: no AVX2
    /// and FMA, a CPU with the 8-bit product (`has_int8_product`), or rows that
    /// are not a whole number of eight (or none).
    pub fn pack(m: &Q8Matrix) -> Option<Q8Widened> {
        if !has_widened_product() {
            return None;
        }
        Self::widen(m)
    }

    /// `m` widened where the kernel runs (AVX2 and FMA), VNNI or not: the
    /// tests multiply with it on either kind of CPU.
    #[cfg(test)]
    pub(crate) fn pack_for_tests(m: &Q8Matrix) -> Option<Q8Widened> {
        if !available() {
            return None;
        }
        Self::widen(m)
    }

    /// `m` widened, or `None` where the rows are not a whole number of eight
    /// (or none). Only `pack` and the tests call it, after checking the CPU:
    /// a `Q8Widened` exists only where [`Q8Widened::product`]'s kernel runs,
    /// which is what makes that safe function's unsafe call sound.
    fn widen(m: &Q8Matrix) -> Option<Q8Widened> {
        if m.rows == 0 || !m.rows.is_multiple_of(ROWS) {
            return None;
        }
        let bpr = m.blocks_per_row();
        let mut quants = vec![[0i16; 2 * ROWS]; m.rows * bpr * PAIRS / ROWS];
        let mut scales = vec![[0f32; ROWS]; m.rows * bpr / ROWS];
        for r in 0..m.rows {
            let (group, lane) = (r / ROWS, r % ROWS);
            for b in 0..bpr {
                let (at, k) = (group * bpr + b, r * bpr + b);
                scales[at][lane] = m.scales[k];
                for (p, pair) in m.quants[k].chunks_exact(2).enumerate() {
                    let dest = &mut quants[at * PAIRS + p][2 * lane..2 * lane + 2];
                    dest[0] = i16::from(pair[0]);
                    dest[1] = i16::from(pair[1]);
                }
            }
        }
        Some(Q8Widened {
            rows: m.rows,
            cols: m.cols,
            quants,
            scales,
        })
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

    /// `out[t * rows + r]` = row `r` · token `t`, with the tokens quantized to
    /// 8-bit blocks: [`Q8Matrix::product`]'s outputs on AVX-512 VNNI, bit for
    /// bit. Tasks take [`TOKENS_PER_TASK`] tokens each and every row; where
    /// that leaves a worker without a task (a question), each worker takes a
    /// part of the rows of every token instead.
    pub fn product(&self, x: &[f32], tokens: usize, out: &mut [f32]) -> Result<(), ShapeError> {
        check_len(tokens * self.cols, x.len())?;
        check_len(tokens * self.rows, out.len())?;
        if tokens == 0 {
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        {
            use crate::widened_x86::{G, groups, quantize};
            use rayon::prelude::*;
            let workers = rayon::current_num_threads();
            let all = self.rows / ROWS;
            if tokens.div_ceil(TOKENS_PER_TASK) < workers && all >= G * workers {
                // Parts of whole tiles, so only the last has groups left over.
                let part = all.div_ceil(workers).next_multiple_of(G);
                // SAFETY: `pack` made this matrix only where `available` found
                // the instructions the kernel is compiled for.
                let x = unsafe { quantize(x) };
                let mut parts = crate::int8::split_rows(out, self.rows, part * ROWS);
                parts.par_iter_mut().enumerate().for_each(|(i, out)| {
                    let first = i * part;
                    // SAFETY: as above.
                    unsafe { groups(self, &x, first..(first + part).min(all), out) };
                });
                return Ok(());
            }
            out.par_chunks_mut(TOKENS_PER_TASK * self.rows)
                .zip(x.par_chunks(TOKENS_PER_TASK * self.cols))
                .for_each(|(out, x)| {
                    let mut out: Vec<&mut [f32]> = out.chunks_mut(self.rows).collect();
                    // SAFETY: as above.
                    unsafe { groups(self, &quantize(x), 0..all, &mut out) };
                });
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("Q8Widened::pack makes none off x86_64");
        #[cfg(target_arch = "x86_64")]
        Ok(())
    }
}

/// Tokens a task multiplies by every row: a 256-token passage is four tasks,
/// which the other worker may take when it is idle, and a task's widened
/// tokens (about 204 KiB for 1,536 columns, scales included) stay in its
/// core's L2.
const TOKENS_PER_TASK: usize = 64;

/// Whether [`Q8Widened::pack`] widens matrices on this CPU: AVX2 and FMA,
/// and not the 8-bit product of AVX-512 VNNI ([`crate::has_int8_product`]).
pub fn has_widened_product() -> bool {
    available() && !crate::has_int8_product()
}

/// Whether this CPU has the instructions [`Q8Widened::product`] needs.
fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Tokens quantized for the widened product: for each token and block, its
/// sixteen pairs of values as dwords (the first value in the low half) and the
/// block's scale, which is not a number where the block holds one that is not
/// finite (so the token's outputs are not numbers, as an f32 product's are).
pub(crate) struct Tokens {
    pub(crate) pairs: Vec<[i32; PAIRS]>,
    pub(crate) scales: Vec<f32>,
}

/// A block quantized as the panel product quantizes it: its scale (`NaN` for a
/// value that is not finite, zero for a block too small to divide by) and its
/// values, rounded half to even; what the kernel's own quantizing is tested
/// against.
#[cfg(test)]
pub(crate) fn quantize_block(block: &[f32; BLOCK]) -> (f32, [i8; BLOCK]) {
    let max = block.iter().fold(0f32, |m, x| m.max(x.abs()));
    if block.iter().any(|x| !x.is_finite()) {
        return (f32::NAN, [0; BLOCK]);
    }
    let inverse = 127.0 / max;
    if !inverse.is_finite() {
        return (0.0, [0; BLOCK]);
    }
    // Within ±127: the largest magnitude times 127 over itself rounds to 127.
    (
        max / 127.0,
        block.map(|x| (x * inverse).round_ties_even() as i8),
    )
}

/// The product as the kernel makes it, in plain Rust: each block's exact
/// integer sum, converted, times the token's scale times the row's, added in
/// block order with one rounding (a fused multiply-add).
#[cfg(test)]
pub(crate) fn portable(m: &Q8Widened, x: &[f32], tokens: usize) -> Vec<f32> {
    let bpr = m.blocks_per_row();
    let (blocks, _) = x.as_chunks::<BLOCK>();
    let mut out = vec![0f32; tokens * m.rows];
    for t in 0..tokens {
        let token: Vec<(f32, [i8; BLOCK])> = blocks[t * bpr..(t + 1) * bpr]
            .iter()
            .map(quantize_block)
            .collect();
        for r in 0..m.rows {
            let (group, lane) = (r / ROWS, r % ROWS);
            let mut acc = 0f32;
            for (b, (x_scale, q)) in token.iter().enumerate() {
                let at = group * bpr + b;
                let sum: i32 = (0..BLOCK)
                    .map(|i| {
                        let w = m.quants[at * PAIRS + i / 2][2 * lane + i % 2];
                        i32::from(w) * i32::from(q[i])
                    })
                    .sum();
                acc = (sum as f32).mul_add(m.scales[at][lane] * x_scale, acc);
            }
            out[t * m.rows + r] = acc;
        }
    }
    out
}
