//! The one-token product of a Q4_1 row with a token in 8-bit blocks, in x86
//! intrinsics: a block's sixteen bytes of nibbles are split into 32 bytes (low
//! nibbles, then high, the order of the token's block) and multiplied with the
//! token's bytes in one instruction: `vpdpbusd` where the CPU has AVX-512 VNNI,
//! else `vpmaddubsw` and `vpmaddwd` (AVX2), as llama.cpp does. The nibbles are the
//! unsigned operand and the token the signed one, so nothing needs correcting.
//! Each block's `d` and `m` are turned from f16 eight at a time (F16C).

use std::arch::x86_64::*;
use std::sync::OnceLock;

use crate::BLOCK;
use crate::q4::Row;

/// A row · token kernel: the row, then the token's blocks, scales and scaled sums.
pub(crate) type Dot = unsafe fn(&Row<'_>, &[[i8; BLOCK]], &[f32], &[f32]) -> f32;

/// The best kernel this CPU runs, found once; `None` without AVX2, FMA and F16C.
pub(crate) fn dot() -> Option<Dot> {
    static CHOSEN: OnceLock<Option<Dot>> = OnceLock::new();
    *CHOSEN.get_or_init(|| best(dot_vnni as Dot, dot_avx2 as Dot))
}

/// `vnni` where the CPU has AVX-512 VNNI, else `avx2` where it has AVX2, FMA and
/// F16C (every CPU with the first has the second), else none.
pub(crate) fn best<K>(vnni: K, avx2: K) -> Option<K> {
    let has_avx2 = is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    let has_vnni = has_vnni();
    match (has_avx2, has_vnni) {
        (true, true) => Some(vnni),
        (true, false) => Some(avx2),
        _ => None,
    }
}

/// Whether the CPU has what the VNNI kernels are compiled for.
fn has_vnni() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// Every kernel of a pair this CPU runs, by name, so tests hold each to the
/// portable one.
#[cfg(test)]
pub(crate) fn runnable<K: Copy>(vnni: K, avx2: K) -> Vec<(&'static str, K)> {
    match best((), ()) {
        Some(()) if has_vnni() => vec![("avx2", avx2), ("vnni", vnni)],
        Some(()) => vec![("avx2", avx2)],
        None => Vec::new(),
    }
}

/// This file's kernels the CPU runs.
#[cfg(test)]
pub(crate) fn all() -> Vec<(&'static str, Dot)> {
    runnable(dot_vnni as Dot, dot_avx2 as Dot)
}

/// One block's 32 weights against the token's block, as eight i32 sums.
///
/// Inlined into each kernel, which has the features its instructions need.
#[inline(always)]
fn weights(q: &[u8; BLOCK / 2]) -> __m256i {
    // SAFETY: sixteen bytes, one unaligned load; the kernels calling this have
    // AVX2, which every instruction here needs.
    unsafe {
        let raw = _mm_loadu_si128(q.as_ptr().cast());
        let low = _mm_set1_epi8(0x0F);
        let lo = _mm_and_si128(raw, low);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(raw), low);
        _mm256_set_m128i(hi, lo)
    }
}

/// Eight blocks' sums, one vector of eight i32 lanes each, added up lane by lane
/// into one vector of the eight totals (block `i` in lane `i`): three rounds of
/// pairwise additions, with no chain of dependent steps from block to block.
#[inline(always)]
pub(crate) fn totals(p: [__m256i; 8]) -> __m256i {
    // SAFETY: AVX2 instructions, in kernels that have AVX2.
    unsafe {
        let s01 = _mm256_hadd_epi32(p[0], p[1]);
        let s23 = _mm256_hadd_epi32(p[2], p[3]);
        let s45 = _mm256_hadd_epi32(p[4], p[5]);
        let s67 = _mm256_hadd_epi32(p[6], p[7]);
        // Low half: blocks 0..4 over their low four lanes; high half: over the
        // high four lanes.
        let s0123 = _mm256_hadd_epi32(s01, s23);
        let s4567 = _mm256_hadd_epi32(s45, s67);
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(s0123, s4567),
            _mm256_permute2x128_si256::<0x31>(s0123, s4567),
        )
    }
}

/// Two f16 numbers (a block's `d` and `m`) as f32, with F16C: only for functions
/// compiled with F16C, into which it is inlined.
#[inline(always)]
pub(crate) fn half_pair(d: u16, m: u16) -> (f32, f32) {
    // SAFETY: F16C and SSE instructions, in kernels that have F16C.
    unsafe {
        let both = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(d) | (i32::from(m) << 16)));
        (
            _mm_cvtss_f32(both),
            _mm_cvtss_f32(_mm_shuffle_ps::<1>(both, both)),
        )
    }
}

macro_rules! kernel {
    ($name:ident, $features:literal, |$w:ident, $x:ident| $product:expr) => {
        /// # Safety
        ///
        /// The CPU must have the features this is compiled for ([`dot`] checks).
        #[target_feature(enable = $features)]
        unsafe fn $name(row: &Row<'_>, xq: &[[i8; BLOCK]], xd: &[f32], xs: &[f32]) -> f32 {
            let blocks = row.quants.len().min(xq.len());
            let (mut acc, mut mins) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let whole = blocks - blocks % 8;
            // Eight blocks at a time: their eight sums are added up together and
            // scaled by one vector of their eight scales.
            let mut eight = |start: usize, d: &[u16], m: &[u16], x_d: &[f32], x_s: &[f32]| {
                let p: [__m256i; 8] = std::array::from_fn(|i| {
                    let $w = weights(&row.quants[start + i]);
                    // SAFETY: a token block is 32 bytes, one unaligned load.
                    let $x = unsafe { _mm256_loadu_si256(xq[start + i].as_ptr().cast()) };
                    $product
                });
                // SAFETY: `eight` is given eight u16 and eight f32 in each slice;
                // unaligned loads.
                unsafe {
                    let d = _mm256_cvtph_ps(_mm_loadu_si128(d.as_ptr().cast()));
                    let m = _mm256_cvtph_ps(_mm_loadu_si128(m.as_ptr().cast()));
                    let scale = _mm256_mul_ps(d, _mm256_loadu_ps(x_d.as_ptr()));
                    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(totals(p)), scale, acc);
                    mins = _mm256_fmadd_ps(m, _mm256_loadu_ps(x_s.as_ptr()), mins);
                }
            };
            for start in (0..whole).step_by(8) {
                let at = start..start + 8;
                let (d, m) = (&row.scales[at.clone()], &row.mins[at.clone()]);
                eight(start, d, m, &xd[at.clone()], &xs[at]);
            }
            // The last few blocks one at a time: padding them to eight did the
            // work of eight (a third more for a row of 18 blocks).
            let mut tail = _mm256_setzero_ps();
            let mut tail_mins = 0f32;
            for k in whole..blocks {
                let $w = weights(&row.quants[k]);
                // SAFETY: a token block is 32 bytes, one unaligned load.
                let $x = unsafe { _mm256_loadu_si256(xq[k].as_ptr().cast()) };
                let sums: __m256i = $product;
                let (d, m) = half_pair(row.scales[k], row.mins[k]);
                tail = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(d * xd[k]), tail);
                tail_mins += m * xs[k];
            }
            acc = _mm256_add_ps(acc, tail);
            let mut lanes = [0f32; 8];
            // SAFETY: eight f32, an unaligned store.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_add_ps(acc, mins)) };
            lanes.iter().sum::<f32>() + tail_mins
        }
    };
}

kernel!(
    dot_vnni,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    |w, x| _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x)
);

kernel!(dot_avx2, "avx2,fma,f16c", |w, x| {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
});
