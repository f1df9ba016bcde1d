//! The kernel of [`crate::wide::Q8Wide::product`]: one panel of up to sixteen
//! tokens against every row, sixteen rows at a time (see `wide.rs` for why).

use std::arch::x86_64::*;

use super::{GROUPS, PANEL, Panel, PanelBlock};
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

/// One weight dword of sixteen rows (`w`) times each of sixteen tokens' dwords
/// (`x`, four bytes a token), added to each token's sums. Written out because
/// LLVM turns such loops back into one chain a token (fewer registers),
/// which is the order this exists to avoid; here the sixteen sums stay in
/// registers and each `vpdpbusd` reads its token's dword as the instruction's
/// own broadcast operand.
///
/// # Safety
///
/// As for [`quantized`].
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn dwords_to_all(w: &[u8; 4 * ROWS], x: &[u8; 4 * PANEL], sums: &mut [__m512i; PANEL]) {
    // SAFETY: the loads read `w`'s 64 bytes and `x`'s sixteen dwords, both
    // borrowed for the call; the instructions are the caller's features.
    unsafe {
        std::arch::asm!(
            "vmovdqu64 {w}, zmmword ptr [{wp}]",
            "vpdpbusd {s0}, {w}, dword ptr [{x} + 0]{{1to16}}",
            "vpdpbusd {s1}, {w}, dword ptr [{x} + 4]{{1to16}}",
            "vpdpbusd {s2}, {w}, dword ptr [{x} + 8]{{1to16}}",
            "vpdpbusd {s3}, {w}, dword ptr [{x} + 12]{{1to16}}",
            "vpdpbusd {s4}, {w}, dword ptr [{x} + 16]{{1to16}}",
            "vpdpbusd {s5}, {w}, dword ptr [{x} + 20]{{1to16}}",
            "vpdpbusd {s6}, {w}, dword ptr [{x} + 24]{{1to16}}",
            "vpdpbusd {s7}, {w}, dword ptr [{x} + 28]{{1to16}}",
            "vpdpbusd {s8}, {w}, dword ptr [{x} + 32]{{1to16}}",
            "vpdpbusd {s9}, {w}, dword ptr [{x} + 36]{{1to16}}",
            "vpdpbusd {s10}, {w}, dword ptr [{x} + 40]{{1to16}}",
            "vpdpbusd {s11}, {w}, dword ptr [{x} + 44]{{1to16}}",
            "vpdpbusd {s12}, {w}, dword ptr [{x} + 48]{{1to16}}",
            "vpdpbusd {s13}, {w}, dword ptr [{x} + 52]{{1to16}}",
            "vpdpbusd {s14}, {w}, dword ptr [{x} + 56]{{1to16}}",
            "vpdpbusd {s15}, {w}, dword ptr [{x} + 60]{{1to16}}",
            wp = in(reg) w.as_ptr(),
            x = in(reg) x.as_ptr(),
            w = out(zmm_reg) _,
            s0 = inout(zmm_reg) sums[0],
            s1 = inout(zmm_reg) sums[1],
            s2 = inout(zmm_reg) sums[2],
            s3 = inout(zmm_reg) sums[3],
            s4 = inout(zmm_reg) sums[4],
            s5 = inout(zmm_reg) sums[5],
            s6 = inout(zmm_reg) sums[6],
            s7 = inout(zmm_reg) sums[7],
            s8 = inout(zmm_reg) sums[8],
            s9 = inout(zmm_reg) sums[9],
            s10 = inout(zmm_reg) sums[10],
            s11 = inout(zmm_reg) sums[11],
            s12 = inout(zmm_reg) sums[12],
            s13 = inout(zmm_reg) sums[13],
            s14 = inout(zmm_reg) sums[14],
            s15 = inout(zmm_reg) sums[15],
            options(nostack, readonly, preserves_flags),
        );
    }
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
        let w = &m.quants[at * GROUPS..(at + 1) * GROUPS];
        let sums = if tokens == PANEL {
            all_tokens(w, x, corrections)
        } else {
            few_tokens(w, x, corrections, tokens)
        };
        // SAFETY: sixteen f32, an unaligned load.
        let w_scales = unsafe { _mm512_loadu_ps(m.scales[at].as_ptr()) };
        for ((acc, sum), x_scale) in acc.iter_mut().zip(&sums).zip(x_scales).take(tokens) {
            // The token's scale times each row's, as `tile` multiplies them.
            let scale = _mm512_mul_ps(_mm512_set1_ps(*x_scale), w_scales);
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(*sum), scale, *acc);
        }
    }
    acc
}

/// One block's sums for a whole panel, each of its eight weight dwords sent to
/// all sixteen tokens before the next: sixteen independent `vpdpbusd` chains.
/// Where the CPU issues two `vpdpbusd` a cycle (Intel's server cores, five
/// cycles each), [`few_tokens`]' two chains a token left the ports waiting on
/// the sums: the products ran at 36 % of the instruction's rate. The integer
/// sums are the same in any order, so the outputs are the same bit for bit.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn all_tokens(
    w: &[[u8; 4 * ROWS]],
    x: &PanelBlock,
    corrections: &[i32; PANEL],
) -> [__m512i; PANEL] {
    let mut sums: [__m512i; PANEL] = std::array::from_fn(|t| _mm512_set1_epi32(corrections[t]));
    for (w, bytes) in w.iter().zip(x) {
        // SAFETY: `w` is 64 bytes and `bytes` sixteen tokens' dwords, as
        // `dwords_to_all` reads them.
        unsafe { dwords_to_all(w, bytes, &mut sums) };
    }
    sums
}

/// One block's sums for the first `tokens` of a panel (a question's part of
/// one), token by token in two chains, as in `tile`, so each `vpdpbusd` waits
/// on half as many; the lanes past the last are not multiplied (each would
/// cost eight `vpdpbusd`) and stay zero.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn few_tokens(
    w: &[[u8; 4 * ROWS]],
    x: &PanelBlock,
    corrections: &[i32; PANEL],
    tokens: usize,
) -> [__m512i; PANEL] {
    let w: [__m512i; GROUPS] = std::array::from_fn(|g| {
        // SAFETY: 64 bytes, a whole register; unaligned load.
        unsafe { _mm512_loadu_si512(w[g].as_ptr().cast()) }
    });
    let mut sums = [_mm512_setzero_si512(); PANEL];
    for (t, sum) in sums.iter_mut().enumerate().take(tokens) {
        // Token `t`'s dword `g` of this block, broadcast to every row.
        let dword = |g: usize| {
            let bytes = &x[g][4 * t..4 * t + 4];
            _mm512_set1_epi32(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
        };
        let mut even = _mm512_set1_epi32(corrections[t]);
        let mut odd = _mm512_setzero_si512();
        for g in (0..GROUPS).step_by(2) {
            even = _mm512_dpbusd_epi32(even, w[g], dword(g));
            odd = _mm512_dpbusd_epi32(odd, w[g + 1], dword(g + 1));
        }
        *sum = _mm512_add_epi32(even, odd);
    }
    sums
}
