//! The kernel of [`crate::wide::Q8Wide::product`]: one panel of up to sixteen
//! tokens against every row, sixteen rows at a time (see `wide.rs` for why).

use std::arch::x86_64::*;

use super::{GROUPS, PANEL, Panel};
use crate::BLOCK;
use crate::wide::{Q8Wide, ROWS};

const _: () = assert!(GROUPS == crate::wide::GROUPS && ROWS == 16);

/// A panel of up to sixteen tokens (`x`, `m.cols` values each) quantized as
/// `product` quantizes them for AMX (their own signed bytes), with each block's
/// correction for the weights' +128.
///
/// # Safety
///
/// The CPU must have AVX-512 F, BW and VNNI (`Q8Wide::pack` checked).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn quantized(m: &Q8Wide, x: &[f32]) -> Quantized {
    let (blocks, _) = x.as_chunks::<BLOCK>();
    let panel = super::vnni::quantize_panel(blocks, m.cols / BLOCK, false);
    let corrections = corrections(&panel);
    Quantized {
        panel,
        corrections,
        tokens: x.len() / m.cols,
    }
}

/// A panel's tokens in 8 bits, their corrections, and how many there are: the
/// lanes past the last are not multiplied (each would cost eight `vpdpbusd`
/// here, where the panel product's spare lanes cost nothing).
pub(crate) struct Quantized {
    panel: Panel,
    corrections: Vec<[i32; PANEL]>,
    tokens: usize,
}

/// Row groups `groups` (sixteen rows each) against a panel, where `tokens[t]`
/// is token `t`'s outputs from the first group's first row on.
///
/// # Safety
///
/// As for [`quantized`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn groups(
    m: &Q8Wide,
    x: &Quantized,
    groups: std::ops::Range<usize>,
    tokens: &mut [&mut [f32]],
) {
    let first = groups.start;
    for group in groups {
        let sums = rows(m, group, x);
        for (out, sum) in tokens.iter_mut().zip(&sums) {
            let at = (group - first) * ROWS;
            let dest = &mut out[at..at + ROWS];
            // SAFETY: sixteen f32 into sixteen, an unaligned store.
            unsafe { _mm512_storeu_ps(dest.as_mut_ptr(), *sum) };
        }
    }
}

/// For each block and token, −128 × the sum of the token's bytes in the block:
/// what the weights' +128 added to its sums.
fn corrections(panel: &Panel) -> Vec<[i32; PANEL]> {
    let mut all = vec![[0i32; PANEL]; panel.quants.len()];
    for (block, sums) in panel.quants.iter().zip(&mut all) {
        // Group by group, so that the sixteen tokens' sums are one vector.
        for dwords in block {
            for (sum, bytes) in sums.iter_mut().zip(dwords.chunks_exact(4)) {
                *sum += bytes.iter().map(|b| i32::from(*b as i8)).sum::<i32>();
            }
        }
        sums.iter_mut().for_each(|s| *s *= -128);
    }
    all
}

/// Rows `16 × group ..` against the panel's tokens: each token's sixteen sums,
/// scaled and added block by block as `int8::vnni::tile` does (zeros for the
/// lanes past the last token).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn rows(m: &Q8Wide, group: usize, x: &Quantized) -> [__m512; PANEL] {
    let bpr = m.cols / BLOCK;
    let mut acc = [_mm512_setzero_ps(); PANEL];
    let (panel, tokens) = (&x.panel, x.tokens);
    let blocks = panel.quants.iter().zip(&panel.scales).zip(&x.corrections);
    for (b, ((x, x_scales), corrections)) in blocks.enumerate() {
        let at = group * bpr + b;
        let w: [__m512i; GROUPS] = std::array::from_fn(|g| {
            // SAFETY: 64 bytes, a whole register; unaligned load.
            unsafe { _mm512_loadu_si512(m.quants[at * GROUPS + g].as_ptr().cast()) }
        });
        // SAFETY: sixteen f32, an unaligned load.
        let w_scales = unsafe { _mm512_loadu_ps(m.scales[at].as_ptr()) };
        for (t, acc) in acc.iter_mut().enumerate().take(tokens) {
            // Token `t`'s dword `g` of this block, broadcast to every row.
            let dword = |g: usize| {
                let bytes = &x[g][4 * t..4 * t + 4];
                _mm512_set1_epi32(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
            };
            // Two chains, as in `tile`, so each `vpdpbusd` waits on half as many.
            let mut even = _mm512_set1_epi32(corrections[t]);
            let mut odd = _mm512_setzero_si512();
            for g in (0..GROUPS).step_by(2) {
                even = _mm512_dpbusd_epi32(even, w[g], dword(g));
                odd = _mm512_dpbusd_epi32(odd, w[g + 1], dword(g + 1));
            }
            let sum = _mm512_add_epi32(even, odd);
            // The token's scale times each row's, as `tile` multiplies them.
            let scale = _mm512_mul_ps(_mm512_set1_ps(x_scales[t]), w_scales);
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, *acc);
        }
    }
    acc
}
