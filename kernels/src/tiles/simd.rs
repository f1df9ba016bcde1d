//! The passes around the tiles in AVX-512 with its bf16 instructions, which
//! every CPU with AMX-BF16 has: rounding to bf16 is `vcvtne2ps2bf16`, 32
//! values an instruction, where the plain Rust of `tiles.rs` rounds value by
//! value, and attention's exponentials are powers of two by `vscalefps`. On
//! 2026-12-07's Xeon these passes (attention's exponentials and packing,
//! rounding tokens) took about a third of a passage's time, the products 45 %
//! (BENCHMARKS.md, "Tiles on a cache line").
//!
//! Each function gives what its plain counterpart gives, rounded the same way
//! (to nearest, ties to even; not a number stays one; a number too small to be
//! normal becomes zero), except attention's weights: their polynomial differs
//! in the last bits of f32 before rounding to bf16, their sums are added in
//! another order, and a score that is not a number may spoil its whole row
//! rather than its own weight (the context is not a number either way).
//! `tiles/tests.rs` checks each against the plain pass.

use std::arch::x86_64::*;

use super::{DEPTH, TILE};

/// Whether this CPU has the instructions here (the standard library caches
/// what it detects).
pub(super) fn here() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512bf16")
}

/// Thirty-two values in bf16, in order: one tile row.
///
/// # Safety
///
/// [`here`]; `src` holds 32 values and `dst` room for 32.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn row(src: *const f32, dst: *mut u16) {
    // SAFETY: as for this function.
    unsafe {
        let low = _mm512_loadu_ps(src);
        let high = _mm512_loadu_ps(src.add(16));
        _mm512_storeu_si512(dst.cast(), bf16s(low, high));
    }
}

/// `low` then `high` rounded to bf16, as 32 sixteen-bit lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn bf16s(low: __m512, high: __m512) -> __m512i {
    // The instruction puts its second operand in the low half.
    let pairs: __m512bh = _mm512_cvtne2ps_pbh(high, low);
    // SAFETY: 64 bytes either way.
    unsafe { std::mem::transmute::<__m512bh, __m512i>(pairs) }
}

/// A key's 32 values (one tile of `k`) into column `j` of its packed tile
/// (`Packed::from_columns`' layout): value pair `p` is the 32-bit lane `j` of
/// the tile's row `p`, so the sixteen pairs are scattered a row apart.
///
/// # Safety
///
/// [`here`]; `src` holds 32 values, `tile` a whole tile (16 rows of 64 bytes)
/// and `j` < 16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn key(src: *const f32, tile: *mut u16, j: usize) {
    // SAFETY: as for this function: every lane lands in row `p` < 16 at
    // 32-bit lane `j` < 16 of the tile.
    unsafe {
        let low = _mm512_loadu_ps(src);
        let high = _mm512_loadu_ps(src.add(16));
        let rows = _mm512_setr_epi32(
            0, 64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960,
        );
        _mm512_i32scatter_epi32::<1>(tile.add(2 * j).cast(), rows, bf16s(low, high));
    }
}

/// Two tokens' values (`first` and `second`, 32 each: one head) as one row of
/// each of two packed tiles (`Packed::from_rows`' layout): for each column
/// `c`, the pair (`first[c]`, `second[c]`), columns 0–15 into `low` and
/// 16–31 into `high`.
///
/// # Safety
///
/// [`here`]; `first` and `second` hold 32 values, `low` and `high` room for 32.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn value_pair(
    first: *const f32,
    second: *const f32,
    low: *mut u16,
    high: *mut u16,
) {
    // SAFETY: as for this function.
    unsafe {
        let a = bf16s(_mm512_loadu_ps(first), _mm512_loadu_ps(first.add(16)));
        let b = bf16s(_mm512_loadu_ps(second), _mm512_loadu_ps(second.add(16)));
        let pick = |lanes: &[i16; 32]| _mm512_loadu_si512(lanes.as_ptr().cast());
        _mm512_storeu_si512(low.cast(), _mm512_permutex2var_epi16(a, pick(&PAIRS[0]), b));
        _mm512_storeu_si512(
            high.cast(),
            _mm512_permutex2var_epi16(a, pick(&PAIRS[1]), b),
        );
    }
}

/// Which lanes `value_pair`'s two permutes take: lane 2c takes the first
/// token's column c, lane 2c + 1 the second's (whose lanes are 32 on), for
/// columns 0–15 and then 16–31.
const PAIRS: [[i16; 32]; 2] = {
    let mut lanes = [[0i16; 32]; 2];
    let mut c = 0;
    while c < 32 {
        lanes[c / 16][2 * (c % 16)] = c as i16;
        lanes[c / 16][2 * (c % 16) + 1] = 32 + c as i16;
        c += 1;
    }
    lanes
};

/// One row of attention's weights: for its first `n` scores (of `keys`, a
/// multiple of 32), `e^((score − the largest) × scale)` in bf16 into its tile
/// rows (`row` for keys 0–31, then one tile of 1 KB on for each 32 more),
/// zeros past `n`; returns the sum of the weights as rounded, the ones the
/// context is made of.
///
/// # Safety
///
/// [`here`]; `scores` holds `keys` values, `row` room for its `keys / 32`
/// tile rows, `n` ≤ `keys`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn weights(
    scores: *const f32,
    n: usize,
    keys: usize,
    scale: f32,
    row: *mut u16,
) -> f32 {
    // SAFETY: every load is within `keys` scores and every store within a
    // tile row, as this function's condition says; masks keep the rest.
    unsafe {
        let valid = |at: usize| -> __mmask16 {
            let left = n.saturating_sub(at).min(16);
            ((1u32 << left) - 1) as __mmask16
        };
        let mut top = _mm512_set1_ps(f32::MIN);
        for at in (0..n).step_by(16) {
            let v = _mm512_maskz_loadu_ps(valid(at), scores.add(at));
            top = _mm512_mask_max_ps(top, valid(at), top, v);
        }
        let top = _mm512_reduce_max_ps(top);
        // (score − top) × scale in base 2, one fused step a value.
        let c = _mm512_set1_ps(scale * std::f32::consts::LOG2_E);
        let shift = _mm512_set1_ps(-top * scale * std::f32::consts::LOG2_E);
        let ones = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi16(0x3F80));
        let mut sum = _mm512_setzero_ps();
        for (chunk, at) in (0..keys).step_by(DEPTH).enumerate() {
            let low = power(c, shift, valid(at), scores.add(at));
            let high = power(c, shift, valid(at + TILE), scores.add(at + TILE));
            let rounded = bf16s(low, high);
            _mm512_storeu_si512(row.add(chunk * TILE * DEPTH).cast(), rounded);
            // The rounded weights' pairs, each times one, summed in f32.
            sum = _mm512_dpbf16_ps(sum, std::mem::transmute::<__m512i, __m512bh>(rounded), ones);
        }
        _mm512_reduce_add_ps(sum)
    }
}

/// 2^(score × c + shift) for the lanes of `mask`, zero elsewhere.
///
/// # Safety
///
/// [`here`]; `scores` readable at the lanes of `mask`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn power(c: __m512, shift: __m512, mask: __mmask16, scores: *const f32) -> __m512 {
    // SAFETY: as for this function.
    let v = unsafe { _mm512_maskz_loadu_ps(mask, scores) };
    // Below −150 the power is zero in f32; the operands' order keeps a not a
    // number (the instruction gives its second operand when either is one).
    let t = _mm512_max_ps(_mm512_set1_ps(-150.0), _mm512_fmadd_ps(v, c, shift));
    _mm512_maskz_mov_ps(mask, crate::pow2_x86::pow2(t))
}
