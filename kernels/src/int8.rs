//! A product of 8-bit or 4-bit weights ([`PanelWeights`]) by many tokens with 8-bit
//! activations, for reading a prompt on CPUs with AVX-512 VNNI. Where the CPU
//! has AMX-INT8 too, an 8-bit matrix's rows go to the tiles instead (`amx.rs`),
//! with the same panels and the same results.
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
//! keep their own layout: 8-bit rows are read as they are, and a 4-bit block's
//! nibbles are split into its eight dwords as it is read.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed ones, so a token's values are
//! stored plus 128, and each block's sum takes back 128 × the sum of the weights'
//! block, which both layouts keep for this (a panel for AMX's `tdpbssd`, signed
//! by signed, keeps its values as they are). A 4-bit block's offset `m` adds `m`
//! times the token's block sum.

use rayon::prelude::*;

use crate::{BLOCK, Q4Matrix, Q8Matrix};

#[cfg(target_os = "linux")]
pub(crate) mod amx;
pub(crate) mod wide;

/// Tokens in a panel: one per 32-bit lane of a 512-bit register.
pub(crate) const PANEL: usize = 16;

/// Dwords in a block, so registers in a panel's block.
const GROUPS: usize = BLOCK / 4;

// `tile` sums a block's dwords in pairs (two chains).
const _: () = assert!(GROUPS.is_multiple_of(2));

/// Weight rows multiplied together against one panel, so each panel register
/// loaded serves this many rows; four keeps every sum in a register.
const TILE: usize = 4;

/// One block of a panel: `[g][lane * 4 + j]` is value `4g + j` of token `lane`,
/// plus 128 (as it is, for AMX).
type PanelBlock = [[u8; 4 * PANEL]; GROUPS];

/// Whether this CPU has the instructions [`product`] needs.
pub(crate) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("f16c")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
}

/// Weights the panel product multiplies: [`Q8Matrix`] or [`Q4Matrix`], each block
/// read as eight signed dwords (its 32 weights in order) with their sum, its scale
/// and its offset (`d × q + m`; none for 8-bit blocks).
pub(crate) trait PanelWeights: Sync {
    /// Whether blocks have an offset `m`.
    const OFFSET: bool;
    fn rows(&self) -> usize;
    fn blocks_per_row(&self) -> usize;
    /// Block `k`'s weights as dwords of four bytes, and their sum.
    fn dwords(&self, k: usize) -> ([i32; GROUPS], i32);
    /// Block `k`'s scale and offset.
    fn scale_min(&self, k: usize) -> (f32, f32);
    /// The matrix, where its rows run on AMX (`amx.rs`) rather than VNNI.
    fn amx(&self) -> Option<&Q8Matrix> {
        None
    }
}

impl PanelWeights for Q8Matrix {
    const OFFSET: bool = false;
    fn rows(&self) -> usize {
        self.rows()
    }
    fn blocks_per_row(&self) -> usize {
        Q8Matrix::blocks_per_row(self)
    }
    #[inline(always)]
    fn dwords(&self, k: usize) -> ([i32; GROUPS], i32) {
        let w = &self.quants[k];
        let dword = |g: usize| {
            i32::from_le_bytes([
                w[4 * g] as u8,
                w[4 * g + 1] as u8,
                w[4 * g + 2] as u8,
                w[4 * g + 3] as u8,
            ])
        };
        (std::array::from_fn(dword), i32::from(self.sums[k]))
    }
    #[inline(always)]
    fn scale_min(&self, k: usize) -> (f32, f32) {
        (self.scales[k], 0.0)
    }
    fn amx(&self) -> Option<&Q8Matrix> {
        #[cfg(target_os = "linux")]
        if amx::available() && self.rows().is_multiple_of(amx::ROWS) {
            return Some(self);
        }
        None
    }
}

impl PanelWeights for Q4Matrix {
    const OFFSET: bool = true;
    fn rows(&self) -> usize {
        self.rows()
    }
    fn blocks_per_row(&self) -> usize {
        Q4Matrix::blocks_per_row(self)
    }
    #[inline(always)]
    fn dwords(&self, k: usize) -> ([i32; GROUPS], i32) {
        // Byte `j` holds weight `j` in its low nibble and weight `j + 16` in its
        // high one; nibbles are 0..16, so each is its own signed byte. Split in
        // two 128-bit words at once, not one dword at a time.
        const LOW: u128 = u128::from_le_bytes([0x0F; 16]);
        let raw = u128::from_le_bytes(self.quants[k]);
        let (lo, hi) = ((raw & LOW).to_le_bytes(), ((raw >> 4) & LOW).to_le_bytes());
        let dword = |g: usize| {
            let bytes = if g < 4 { &lo } else { &hi };
            let at = 4 * (g % 4);
            i32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        (std::array::from_fn(dword), i32::from(self.sums[k]))
    }
    #[inline(always)]
    fn scale_min(&self, k: usize) -> (f32, f32) {
        // Inlined into the panel product, which is compiled with F16C.
        crate::q4_x86::half_pair(self.scales[k], self.mins[k])
    }
}

/// `out[t * rows + r]` = row `r` · token `t`, with the tokens quantized; the
/// caller has checked the lengths.
///
/// # Safety
///
/// [`available`] must have returned true: this runs AVX-512 VNNI instructions.
pub(crate) unsafe fn product<W: PanelWeights>(m: &W, x: &[f32], tokens: usize, out: &mut [f32]) {
    let bpr = m.blocks_per_row();
    let (x, _) = x.as_chunks::<BLOCK>();
    let workers = rayon::current_num_threads();
    if tokens.div_ceil(PANEL) < workers && m.rows() >= SPLIT_FROM_ROWS {
        for (out, x) in out.chunks_mut(PANEL * m.rows()).zip(x.chunks(PANEL * bpr)) {
            // SAFETY: as for this function.
            unsafe { rows_shared(m, x, bpr, out, workers) };
        }
        return;
    }
    // Each task takes one panel of tokens and writes only those tokens' outputs,
    // which are contiguous, so tasks share nothing but the weights.
    out.par_chunks_mut(PANEL * m.rows())
        .zip(x.par_chunks(PANEL * bpr))
        .for_each(|(out, x)| {
            // SAFETY: `product`'s caller found every feature these functions
            // are compiled for (its own safety condition).
            unsafe {
                let panel = quantize_panel(m, x, bpr);
                panel_product(m, &panel, out);
            }
        });
    debug_assert_eq!(out.len(), tokens * m.rows());
}

/// A panel's tokens quantized for `m`'s rows: their bytes plus 128 for
/// `vpdpbusd` (unsigned by signed), as they are for `tdpbssd` (signed by signed).
///
/// # Safety
///
/// As for [`product`].
unsafe fn quantize_panel<W: PanelWeights>(m: &W, x: &[[f32; BLOCK]], bpr: usize) -> Panel {
    // SAFETY: as for this function.
    unsafe { vnni::quantize_panel(x, bpr, m.amx().is_none()) }
}

/// A panel's tokens in 8-bit blocks: each block's bytes, and per token its scale
/// and its scale times the sum of its values.
pub(crate) struct Panel {
    quants: Vec<PanelBlock>,
    scales: Vec<[f32; PANEL]>,
    sums: Vec<[f32; PANEL]>,
}

/// Every row of `m` against one panel; `out` is the panel's tokens' outputs.
///
/// # Safety
///
/// As for [`product`].
unsafe fn panel_product<W: PanelWeights>(m: &W, panel: &Panel, out: &mut [f32]) {
    let mut tokens: Vec<&mut [f32]> = out.chunks_mut(m.rows()).collect();
    // SAFETY: the caller found the features (this function's own condition).
    unsafe { panel_rows(m, 0, panel, &mut tokens) };
}

/// Rows `first..first + n` against one panel, where `tokens[t]` is token `t`'s
/// `n` outputs for those rows.
///
/// # Safety
///
/// As for [`product`].
unsafe fn panel_rows<W: PanelWeights>(
    m: &W,
    first: usize,
    panel: &Panel,
    tokens: &mut [&mut [f32]],
) {
    #[cfg(target_os = "linux")]
    if let Some(m) = m.amx() {
        // SAFETY: `amx` is only given where `amx::available`, and the panel was
        // quantized for it (`quantize_panel`).
        unsafe { amx::panel_rows(m, first, panel, tokens) };
        return;
    }
    let n = tokens.first().map_or(0, |t| t.len());
    let whole = n - n % TILE;
    // SAFETY: the caller found the features (this function's own condition).
    unsafe {
        for at in (0..whole).step_by(TILE) {
            store_lanes(tokens, at, &vnni::tile::<TILE, W>(m, first + at, panel));
        }
        for at in whole..n {
            store_lanes(tokens, at, &vnni::tile::<1, W>(m, first + at, panel));
        }
    }
}

/// Rows' lanes (`lanes[i][t]`: row `at + i`, token `t`) into each token's outputs.
fn store_lanes(tokens: &mut [&mut [f32]], at: usize, lanes: &[[f32; PANEL]]) {
    for (t, out) in tokens.iter_mut().enumerate() {
        for (i, lanes) in lanes.iter().enumerate() {
            out[at + i] = lanes[t];
        }
    }
}

/// Fewer panels than workers (a question, or a prompt's few new tokens) would
/// leave workers idle with one panel each, so a panel's rows are shared among
/// them instead, when it has at least this many (a floor not measured: below it
/// the hand-off would outweigh the rows). A question's embedding on one panel
/// with its rows shared took 0.66–0.97× its time on the expanded 8-bit rows of
/// two workers, over four alternated pairs on a noisy machine (BENCHMARKS.md,
/// "A question on the 8-bit product").
const SPLIT_FROM_ROWS: usize = 64;

/// Rows a shared panel's parts are a multiple of. Four would do for VNNI alone;
/// with sixteen, a pool of more than four workers shares a matrix of under 64
/// rows a worker among fewer of them (not measured: the machines here have two).
const SHARED_ROWS: usize = 16;
const _: () = assert!(SHARED_ROWS.is_multiple_of(TILE));

/// One panel's tokens (`x`) against `m`, its rows shared among `workers`: each
/// writes its part of every token's outputs in `out` (token-major, as for
/// [`product`]), split where the parts meet.
///
/// # Safety
///
/// As for [`product`].
unsafe fn rows_shared<W: PanelWeights>(
    m: &W,
    x: &[[f32; BLOCK]],
    bpr: usize,
    out: &mut [f32],
    workers: usize,
) {
    let rows = m.rows();
    // SAFETY: as for this function.
    let panel = unsafe { quantize_panel(m, x, bpr) };
    // Whole tiles a part (sixteen rows: an AMX tile, four VNNI ones), so that
    // only the last part has rows left over.
    let part = rows.div_ceil(workers).next_multiple_of(SHARED_ROWS);
    split_rows(out, rows, part)
        .par_iter_mut()
        .enumerate()
        // SAFETY: as for this function.
        .for_each(|(i, tokens)| unsafe { panel_rows(m, i * part, &panel, tokens) });
}

/// Each token's outputs (`out`, `rows` a token) cut where parts of `part` rows
/// meet: `parts[i][t]` is token `t`'s outputs for rows `i * part ..`, for
/// workers that each take one part of every token.
pub(crate) fn split_rows(out: &mut [f32], rows: usize, part: usize) -> Vec<Vec<&mut [f32]>> {
    let mut parts: Vec<Vec<&mut [f32]>> = (0..rows.div_ceil(part)).map(|_| Vec::new()).collect();
    for token in out.chunks_mut(rows) {
        for (dest, piece) in parts.iter_mut().zip(token.chunks_mut(part)) {
            dest.push(piece);
        }
    }
    parts
}

mod vnni {
    use std::arch::x86_64::*;

    use super::{GROUPS, PANEL, Panel, PanelWeights};
    use crate::BLOCK;

    /// A panel's tokens (`x`: up to sixteen tokens of `bpr` blocks) quantized into
    /// panel blocks and their scales, as [`crate::Q8Matrix::quantize`] does a
    /// block but rounding halves to even; each byte plus 128 if `plus_128`.
    /// Lanes past the last token hold zeros.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) fn quantize_panel(x: &[[f32; BLOCK]], bpr: usize, plus_128: bool) -> Panel {
        let zero = if plus_128 { 128 } else { 0 };
        let mut quants = vec![[[zero; 4 * PANEL]; GROUPS]; bpr];
        let mut scales = vec![[0f32; PANEL]; bpr];
        let mut sums = vec![[0f32; PANEL]; bpr];
        // Adding 128 to a byte's two's complement value flips its top bit.
        let offset = _mm_set1_epi8(if plus_128 { i8::MIN } else { 0 });
        for (lane, token) in x.chunks_exact(bpr).enumerate() {
            for (((block, panel), scale), sum) in token
                .iter()
                .zip(&mut quants)
                .zip(&mut scales)
                .zip(&mut sums)
            {
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
                    sum[lane] = f32::NAN;
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
                // Flipping the offset's bit again gives each value's own byte.
                let total: i32 = q.iter().map(|v| i32::from((*v ^ zero) as i8)).sum();
                sum[lane] = scale[lane] * total as f32;
            }
        }
        Panel {
            quants,
            scales,
            sums,
        }
    }

    /// Rows `first..first + R` against one panel: each row's sixteen lanes, one
    /// per token of the panel.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
    pub(super) fn tile<const R: usize, W: PanelWeights>(
        m: &W,
        first: usize,
        panel: &Panel,
    ) -> [[f32; PANEL]; R] {
        let bpr = m.blocks_per_row();
        let mut acc = [_mm512_setzero_ps(); R];
        let blocks = panel.quants.iter().zip(&panel.scales).zip(&panel.sums);
        for (b, ((quants, x_scale), x_sum)) in blocks.enumerate() {
            // SAFETY: each row of a panel block is 64 bytes, a whole register,
            // and `loadu` has no alignment requirement.
            let x: [__m512i; GROUPS] =
                std::array::from_fn(|g| unsafe { _mm512_loadu_si512(quants[g].as_ptr().cast()) });
            // SAFETY: sixteen f32, a whole register, unaligned loads.
            let (x_scale, x_sum) = unsafe {
                (
                    _mm512_loadu_ps(x_scale.as_ptr()),
                    _mm512_loadu_ps(x_sum.as_ptr()),
                )
            };
            for (i, acc) in acc.iter_mut().enumerate() {
                let k = (first + i) * bpr + b;
                let (dwords, w_sum) = m.dwords(k);
                // Two running sums, of the even dwords and of the odd ones: each
                // `vpdpbusd` waits for the one before it into the same register,
                // and one sum made every row's block a chain of eight. The first
                // starts from the correction for the tokens' +128. Integer sums:
                // the result is the same in any order.
                let mut even = _mm512_set1_epi32(-128 * w_sum);
                let mut odd = _mm512_setzero_si512();
                for (x, dwords) in x.as_chunks::<2>().0.iter().zip(dwords.as_chunks::<2>().0) {
                    even = _mm512_dpbusd_epi32(even, x[0], _mm512_set1_epi32(dwords[0]));
                    odd = _mm512_dpbusd_epi32(odd, x[1], _mm512_set1_epi32(dwords[1]));
                }
                let sum = _mm512_add_epi32(even, odd);
                let (w_scale, w_min) = m.scale_min(k);
                let scale = _mm512_mul_ps(x_scale, _mm512_set1_ps(w_scale));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, *acc);
                if W::OFFSET {
                    *acc = _mm512_fmadd_ps(x_sum, _mm512_set1_ps(w_min), *acc);
                }
            }
        }
        let mut lanes = [[0f32; PANEL]; R];
        for (lanes, acc) in lanes.iter_mut().zip(&acc) {
            // SAFETY: sixteen f32, a whole register, unaligned store.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *acc) };
        }
        lanes
    }
}
