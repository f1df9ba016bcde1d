//! The kernel of [`crate::widened::Q8Widened::product`] in AVX2 intrinsics (see
//! `widened.rs` for the layout and why).

use std::arch::x86_64::*;

use crate::BLOCK;
use crate::widened::{PAIRS, Q8Widened, ROWS, Tokens};

/// Groups of eight rows a tile multiplies at once, and tokens: eight integer
/// sums in registers, and for each pair of columns four weight registers and
/// two token dwords for eight `vpmaddwd`. On the AMD EPYC (Zen 3) where it was
/// written, a loop of this shape alone ran at 78–80 billion multiply-adds a
/// second against 72–75 for two groups by three tokens and 66 for three by
/// three (a scratch loop in assembly, data in L1).
pub(crate) const G: usize = 4;
const T: usize = 2;

/// One group's weights, block by block: `[b][p]` is pair `p` of block `b` for
/// the group's eight rows.
type GroupBlocks<'a> = &'a [[[i16; 2 * ROWS]; PAIRS]];

/// Row groups `groups` (eight rows each) against the quantized tokens `x`,
/// where `out[t]` is token `t`'s outputs from the first group's first row on.
///
/// # Safety
///
/// The CPU must have AVX2 and FMA (`Q8Widened::pack` checked).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn groups(
    m: &Q8Widened,
    x: &Tokens,
    groups: std::ops::Range<usize>,
    out: &mut [&mut [f32]],
) {
    let bpr = m.blocks_per_row();
    let (blocks, _) = m.quants.as_chunks::<PAIRS>();
    let weights: Vec<GroupBlocks> = blocks.chunks_exact(bpr).collect();
    let scales: Vec<&[[f32; ROWS]]> = m.scales.chunks_exact(bpr).collect();
    let start = groups.start;
    let whole = groups.end - groups.len() % G;
    for first in (start..whole).step_by(G) {
        let w: [GroupBlocks; G] = std::array::from_fn(|g| weights[first + g]);
        let s: [&[[f32; ROWS]]; G] = std::array::from_fn(|g| scales[first + g]);
        tokens_against::<G>(w, s, x, bpr, first - start, out);
    }
    for first in whole..groups.end {
        tokens_against::<1>(
            [weights[first]],
            [scales[first]],
            x,
            bpr,
            first - start,
            out,
        );
    }
}

/// Every token against `R` groups of rows, `T` tokens at a time, the outputs
/// stored into each token's `out` from group `at` (counted from its start) on.
/// The blocks are taken [`CHUNK`] at a time for every token, each tile's sums
/// so far kept in `out` between chunks, so the chunk's weights are read from
/// L1 by every tile.
#[target_feature(enable = "avx2,fma")]
fn tokens_against<const R: usize>(
    w: [GroupBlocks; R],
    scales: [&[[f32; ROWS]]; R],
    x: &Tokens,
    bpr: usize,
    at: usize,
    out: &mut [&mut [f32]],
) {
    let n = out.len();
    let whole = n - n % T;
    for start in (0..bpr).step_by(CHUNK) {
        let blocks = start..(start + CHUNK).min(bpr);
        let token = |t: usize| {
            let range = t * bpr + blocks.start..t * bpr + blocks.end;
            (&x.pairs[range.clone()], &x.scales[range])
        };
        let w: [GroupBlocks; R] = std::array::from_fn(|g| &w[g][blocks.clone()]);
        let scales: [&[[f32; ROWS]]; R] = std::array::from_fn(|g| &scales[g][blocks.clone()]);
        for t in (0..whole).step_by(T) {
            let acc = std::array::from_fn(|i| so_far(out, t + i, at, start));
            let acc = tile::<R, T>(&w, &scales, std::array::from_fn(|i| token(t + i)), acc);
            for (i, acc) in acc.iter().enumerate() {
                store(out, t + i, at, acc);
            }
        }
        for t in whole..n {
            let [acc] = tile::<R, 1>(&w, &scales, [token(t)], [so_far(out, t, at, start)]);
            store(out, t, at, &acc);
        }
    }
}

/// Blocks of a row tile's weights taken at a time: four groups' four blocks
/// are 8 KiB, and 64 tokens' four blocks 16 KiB, both within a Zen 3 core's
/// 32 KiB of L1. A tile over all of a 1,536-column row's blocks read 96 KiB
/// of weights from L2 for every two tokens, 32 bytes for every two `vpmaddwd`.
const CHUNK: usize = 4;

/// A tile's sums so far for token `t` (`R` groups from group `at` on): none
/// before the first chunk, then what the chunk before stored. An f32 stored and
/// loaded again is the same f32, so the outputs are those of one pass over
/// every block.
#[target_feature(enable = "avx2,fma")]
fn so_far<const R: usize>(out: &[&mut [f32]], t: usize, at: usize, start: usize) -> [__m256; R] {
    std::array::from_fn(|g| match start {
        0 => _mm256_setzero_ps(),
        // SAFETY: eight f32, a whole register, an unaligned load.
        _ => unsafe { _mm256_loadu_ps(out[t][(at + g) * ROWS..][..ROWS].as_ptr()) },
    })
}

/// A tile's outputs for token `t` into its `out` from group `at` on.
#[target_feature(enable = "avx2,fma")]
fn store<const R: usize>(out: &mut [&mut [f32]], t: usize, at: usize, acc: &[__m256; R]) {
    for (g, acc) in acc.iter().enumerate() {
        let dest = &mut out[t][(at + g) * ROWS..(at + g + 1) * ROWS];
        // SAFETY: eight f32 into eight, an unaligned store.
        unsafe { _mm256_storeu_ps(dest.as_mut_ptr(), *acc) };
    }
}

/// `R` groups of rows against `N` tokens: each token's eight outputs per group.
/// A block's sum is exact in 32 bits (32 products of at most 128 × 127), then
/// converted, scaled and added in block order, as the panel product does.
#[target_feature(enable = "avx2,fma")]
fn tile<const R: usize, const N: usize>(
    w: &[GroupBlocks; R],
    scales: &[&[[f32; ROWS]]; R],
    x: [(&[[i32; PAIRS]], &[f32]); N],
    mut acc: [[__m256; R]; N],
) -> [[__m256; R]; N] {
    for b in 0..x[0].1.len() {
        let mut sums = [[_mm256_setzero_si256(); R]; N];
        let blocks: [&[[i16; 2 * ROWS]; PAIRS]; R] = std::array::from_fn(|g| &w[g][b]);
        let tokens: [&[i32; PAIRS]; N] = std::array::from_fn(|t| &x[t].0[b]);
        for p in 0..PAIRS {
            // SAFETY: sixteen i16, a whole register; `loadu` has no alignment
            // requirement.
            let w: [__m256i; R] = std::array::from_fn(|g| unsafe {
                _mm256_loadu_si256(blocks[g][p].as_ptr().cast())
            });
            for (sums, token) in sums.iter_mut().zip(&tokens) {
                let x = broadcast(&token[p]);
                for (sum, w) in sums.iter_mut().zip(&w) {
                    *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(*w, x));
                }
            }
        }
        for (t, (acc, sums)) in acc.iter_mut().zip(&sums).enumerate() {
            let x_scale = _mm256_set1_ps(x[t].1[b]);
            for ((acc, sum), scales) in acc.iter_mut().zip(sums).zip(scales) {
                // SAFETY: eight f32, a whole register, an unaligned load.
                let w_scale = unsafe { _mm256_loadu_ps(scales[b].as_ptr()) };
                let scale = _mm256_mul_ps(x_scale, w_scale);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(*sum), scale, *acc);
            }
        }
    }
    acc
}

/// `value` in every lane, as `vbroadcastss` from memory: a load alone on Zen 3,
/// where LLVM's `vpbroadcastd` for `_mm256_set1_epi32` also takes one of the
/// vector pipes `vpmaddwd` and `vpaddd` need (the same scratch loop ran at
/// 62 billion multiply-adds a second with it, 72 with this).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn broadcast(value: &i32) -> __m256i {
    let lanes: __m256;
    // SAFETY: reads the four bytes `value` refers to, and nothing else.
    unsafe {
        std::arch::asm!(
            "vbroadcastss {lanes}, dword ptr [{value}]",
            value = in(reg) value,
            lanes = out(ymm_reg) lanes,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    _mm256_castps_si256(lanes)
}

/// Every token of `x` quantized to 8-bit blocks as the panel product quantizes
/// them (`widened::quantize_block`, which the tests hold this to), each value
/// widened to 16 bits and paired.
#[target_feature(enable = "avx2,fma")]
pub(crate) fn quantize(x: &[f32]) -> Tokens {
    let (blocks, _) = x.as_chunks::<BLOCK>();
    let mut pairs = vec![[0i32; PAIRS]; blocks.len()];
    let mut scales = vec![0f32; blocks.len()];
    let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
    for ((block, pairs), scale) in blocks.iter().zip(&mut pairs).zip(&mut scales) {
        // SAFETY: a block is four whole registers of f32; `loadu` has no
        // alignment requirement.
        let v: [__m256; 4] =
            std::array::from_fn(|i| unsafe { _mm256_loadu_ps(block[8 * i..].as_ptr()) });
        let abs = v.map(|v| _mm256_and_ps(v, magnitude));
        let max = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
        let max = _mm_max_ps(_mm256_castps256_ps128(max), _mm256_extractf128_ps::<1>(max));
        let max = _mm_max_ps(max, _mm_movehl_ps(max, max));
        let max = _mm_cvtss_f32(_mm_max_ss(max, _mm_movehdup_ps(max)));
        let unordered = v.iter().fold(0, |any, v| {
            any | _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(*v, *v))
        });
        // A value that is not a finite number makes the token's outputs not
        // numbers; a block too small to divide by stays zero.
        if unordered != 0 || max.is_infinite() {
            *scale = f32::NAN;
            continue;
        }
        let inverse = 127.0 / max;
        if !inverse.is_finite() {
            continue;
        }
        *scale = max / 127.0;
        // Rounded to nearest, ties to even (the default rounding mode), and
        // within ±127, so packing to 16 bits saturates nothing. The packs
        // interleave 128-bit halves, which the permutes put back in order.
        let q = v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, _mm256_set1_ps(inverse))));
        let low = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(q[0], q[1]));
        let high = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(q[2], q[3]));
        let (first, second) = pairs.split_at_mut(PAIRS / 2);
        // SAFETY: eight dwords (sixteen i16) into each half of the block's
        // pairs, unaligned stores.
        unsafe {
            _mm256_storeu_si256(first.as_mut_ptr().cast(), low);
            _mm256_storeu_si256(second.as_mut_ptr().cast(), high);
        }
    }
    Tokens { pairs, scales }
}
