//! A product of 8-bit weights by many tokens with 8-bit activations, for reading a
//! prompt on CPUs with AVX-512 VNNI.
//!
//! Without it a long step expands each matrix to f32 (four bytes written for every
//! weight) and hands it to an f32 GEMM. Here the tokens are quantized instead, to
//! the same 32-value blocks as the weights (as llama.cpp does for every quantized
//! product), and `vpdpbusd` multiplies 64 pairs of bytes in one instruction, four
//! times the pairs of an f32 multiply-add of the same width.
//!
//! Layout: sixteen tokens fill the sixteen 32-bit lanes of a register (a *panel*).
//! A panel's block is eight registers; register `g` holds bytes `4g..4g + 4` of
//! each token's block, so one `vpdpbusd` against a weight row's dword `g`
//! (broadcast to every lane) adds four products to each token's sum. The weights
//! keep the layout of [`Q8Matrix`]: nothing is copied or repacked.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed ones, so a token's values are
//! stored plus 128, and each block's sum takes back 128 × the sum of the weights'
//! block, which [`Q8Matrix`] keeps for this.

use rayon::prelude::*;

use crate::{BLOCK, Q8Matrix};

/// Tokens in a panel: one per 32-bit lane of a 512-bit register.
const PANEL: usize = 16;

/// Dwords in a block, so registers in a panel's block.
const GROUPS: usize = BLOCK / 4;

/// Weight rows multiplied together against one panel, so each panel register
/// loaded serves this many rows; four keeps every sum in a register.
const TILE: usize = 4;

/// One block of a panel: `[g][lane * 4 + j]` is value `4g + j` of token `lane`,
/// plus 128.
type PanelBlock = [[u8; 4 * PANEL]; GROUPS];

/// Whether this CPU has the instructions [`product`] needs.
pub(crate) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
}

/// `out[t * rows + r]` = row `r` · token `t`, with the tokens quantized; the
/// caller has checked the lengths.
///
/// # Safety
///
/// [`available`] must have returned true: this runs AVX-512 VNNI instructions.
pub(crate) unsafe fn product(m: &Q8Matrix, x: &[f32], tokens: usize, out: &mut [f32]) {
    let bpr = m.blocks_per_row();
    let (x, _) = x.as_chunks::<BLOCK>();
    // Each task takes one panel of tokens and writes only those tokens' outputs,
    // which are contiguous, so tasks share nothing but the weights.
    out.par_chunks_mut(PANEL * m.rows)
        .zip(x.par_chunks(PANEL * bpr))
        .for_each(|(out, x)| {
            // SAFETY: `product`'s caller found every feature these functions
            // are compiled for (its own safety condition).
            unsafe {
                let (quants, scales) = vnni::quantize_panel(x, bpr);
                panel_product(m, &quants, &scales, out);
            }
        });
    debug_assert_eq!(out.len(), tokens * m.rows);
}

/// Every row of `m` against one panel; `out` is the panel's tokens' outputs.
///
/// # Safety
///
/// As for [`product`].
unsafe fn panel_product(
    m: &Q8Matrix,
    quants: &[PanelBlock],
    scales: &[[f32; PANEL]],
    out: &mut [f32],
) {
    let tokens = out.len() / m.rows;
    let whole = m.rows - m.rows % TILE;
    // SAFETY: the caller found the features (this function's own condition).
    unsafe {
        for row in (0..whole).step_by(TILE) {
            vnni::tile::<TILE>(m, row, quants, scales, tokens, out);
        }
        for row in whole..m.rows {
            vnni::tile::<1>(m, row, quants, scales, tokens, out);
        }
    }
}

mod vnni {
    use std::arch::x86_64::*;

    use super::{GROUPS, PANEL, PanelBlock};
    use crate::{BLOCK, Q8Matrix};

    /// A panel's tokens (`x`: up to sixteen tokens of `bpr` blocks) quantized into
    /// panel blocks and their scales, as [`crate::Q8Matrix::quantize`] does a
    /// block but rounding halves to even. Lanes past the last token hold zeros.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) fn quantize_panel(
        x: &[[f32; BLOCK]],
        bpr: usize,
    ) -> (Vec<PanelBlock>, Vec<[f32; PANEL]>) {
        let mut quants = vec![[[128u8; 4 * PANEL]; GROUPS]; bpr];
        let mut scales = vec![[0f32; PANEL]; bpr];
        // Adding 128 to a byte's two's complement value flips its top bit.
        let offset = _mm_set1_epi8(i8::MIN);
        for (lane, token) in x.chunks_exact(bpr).enumerate() {
            for ((block, panel), scale) in token.iter().zip(&mut quants).zip(&mut scales) {
                let (lo, hi) = block.split_at(PANEL);
                // SAFETY: a block is two halves of sixteen f32, a whole register
                // each; `loadu` has no alignment requirement.
                let (lo, hi) =
                    unsafe { (_mm512_loadu_ps(lo.as_ptr()), _mm512_loadu_ps(hi.as_ptr())) };
                let max = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
                let unordered = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(lo, lo)
                    | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(hi, hi);
                // A value that is not a finite number makes the token's products
                // not a number, as an f32 product would (not a quiet zero).
                if unordered != 0 || max.is_infinite() {
                    scale[lane] = f32::NAN;
                    continue;
                }
                // A block of zeros, or of values too small to divide by, stays zero.
                let inverse = 127.0 / max;
                if !inverse.is_finite() {
                    continue;
                }
                scale[lane] = max / 127.0;
                let inverse = _mm512_set1_ps(inverse);
                // Rounded to nearest, then saturated to a byte (within ±127 here).
                let bytes = |v| {
                    let q = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v, inverse)));
                    _mm_xor_si128(q, offset)
                };
                let mut q = [0u8; BLOCK];
                let (q_lo, q_hi) = q.split_at_mut(PANEL);
                // SAFETY: sixteen bytes into each half of `q`, unaligned stores.
                unsafe {
                    _mm_storeu_si128(q_lo.as_mut_ptr().cast(), bytes(lo));
                    _mm_storeu_si128(q_hi.as_mut_ptr().cast(), bytes(hi));
                }
                for (g, dword) in q.as_chunks::<4>().0.iter().enumerate() {
                    panel[g][lane * 4..lane * 4 + 4].copy_from_slice(dword);
                }
            }
        }
        (quants, scales)
    }

    /// Rows `first..first + R` against one panel, written to `out[t * rows + r]`
    /// for the panel's `tokens`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) fn tile<const R: usize>(
        m: &Q8Matrix,
        first: usize,
        quants: &[PanelBlock],
        scales: &[[f32; PANEL]],
        tokens: usize,
        out: &mut [f32],
    ) {
        let bpr = m.blocks_per_row();
        let at = first * bpr;
        let w_quants = &m.quants[at..at + R * bpr];
        let w_scales = &m.scales[at..at + R * bpr];
        let w_sums = &m.sums[at..at + R * bpr];
        let mut acc = [_mm512_setzero_ps(); R];
        for (b, (panel, x_scale)) in quants.iter().zip(scales).enumerate() {
            // SAFETY: each row of a panel block is 64 bytes, a whole register,
            // and `loadu` has no alignment requirement.
            let x: [__m512i; GROUPS] =
                std::array::from_fn(|g| unsafe { _mm512_loadu_si512(panel[g].as_ptr().cast()) });
            // SAFETY: sixteen f32, a whole register, unaligned load.
            let x_scale = unsafe { _mm512_loadu_ps(x_scale.as_ptr()) };
            for (i, acc) in acc.iter_mut().enumerate() {
                let k = i * bpr + b;
                let w = &w_quants[k];
                // Start from the correction for the tokens' +128.
                let mut sum = _mm512_set1_epi32(-128 * i32::from(w_sums[k]));
                for (g, x) in x.iter().enumerate() {
                    let dword = i32::from_le_bytes([
                        w[4 * g] as u8,
                        w[4 * g + 1] as u8,
                        w[4 * g + 2] as u8,
                        w[4 * g + 3] as u8,
                    ]);
                    sum = _mm512_dpbusd_epi32(sum, *x, _mm512_set1_epi32(dword));
                }
                let scale = _mm512_mul_ps(x_scale, _mm512_set1_ps(w_scales[k]));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, *acc);
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            let mut lanes = [0f32; PANEL];
            // SAFETY: sixteen f32, a whole register, unaligned store.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *acc) };
            for (t, value) in lanes.iter().take(tokens).enumerate() {
                out[t * m.rows + first + i] = *value;
            }
        }
    }
}
