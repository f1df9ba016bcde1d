//! The one-token product of an 8-bit row with a token in 8-bit blocks, in x86
//! intrinsics: 32 byte products a block in one instruction (`vpdpbusd` with AVX-512
//! VNNI, else `vpmaddubsw` and `vpmaddwd`), as llama.cpp multiplies Q8_0. Both
//! sides are signed, so the token's magnitudes are the unsigned operand and the
//! weights take the token's signs. Eight blocks' sums are added up together
//! (`q4_x86::totals`) and scaled by one vector of their eight scales.

use std::arch::x86_64::*;
use std::sync::OnceLock;

use crate::BLOCK;
use crate::q4_x86::{best, totals};

/// A row · token kernel: the row's scales and blocks, then the token's.
pub(crate) type Dot = unsafe fn(&[f32], &[[i8; BLOCK]], &[[i8; BLOCK]], &[f32]) -> f32;

/// The best kernel this CPU runs, found once (`q4_x86::best`).
pub(crate) fn dot() -> Option<Dot> {
    static CHOSEN: OnceLock<Option<Dot>> = OnceLock::new();
    *CHOSEN.get_or_init(|| best(dot_vnni as Dot, dot_avx2 as Dot))
}

/// This file's kernels the CPU runs.
#[cfg(test)]
pub(crate) fn all() -> Vec<(&'static str, Dot)> {
    crate::q4_x86::runnable(dot_vnni as Dot, dot_avx2 as Dot)
}

macro_rules! kernel {
    ($name:ident, $features:literal, |$w:ident, $x:ident| $product:expr) => {
        /// # Safety
        ///
        /// The CPU must have the features this is compiled for ([`dot`] checks).
        #[target_feature(enable = $features)]
        unsafe fn $name(ws: &[f32], wq: &[[i8; BLOCK]], xq: &[[i8; BLOCK]], xd: &[f32]) -> f32 {
            let blocks = wq.len().min(xq.len());
            let mut acc = _mm256_setzero_ps();
            for start in (0..blocks).step_by(8) {
                let n = (blocks - start).min(8);
                let p: [__m256i; 8] = std::array::from_fn(|i| {
                    if i >= n {
                        return _mm256_setzero_si256();
                    }
                    // SAFETY: blocks of 32 bytes, unaligned loads.
                    let (w, x) = unsafe {
                        (
                            _mm256_loadu_si256(wq[start + i].as_ptr().cast()),
                            _mm256_loadu_si256(xq[start + i].as_ptr().cast()),
                        )
                    };
                    let $w = _mm256_sign_epi8(w, x);
                    let $x = _mm256_abs_epi8(x);
                    $product
                });
                let (mut w_scale, mut x_scale) = ([0f32; 8], [0f32; 8]);
                w_scale[..n].copy_from_slice(&ws[start..start + n]);
                x_scale[..n].copy_from_slice(&xd[start..start + n]);
                // SAFETY: eight f32 each, unaligned loads.
                let scale = unsafe {
                    _mm256_mul_ps(
                        _mm256_loadu_ps(w_scale.as_ptr()),
                        _mm256_loadu_ps(x_scale.as_ptr()),
                    )
                };
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(totals(p)), scale, acc);
            }
            let mut lanes = [0f32; 8];
            // SAFETY: eight f32, an unaligned store.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
            lanes.iter().sum()
        }
    };
}

kernel!(dot_vnni, "avx2,fma,avx512f,avx512vl,avx512vnni", |w, x| {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), x, w)
});

kernel!(dot_avx2, "avx2,fma", |w, x| {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), _mm256_set1_epi16(1))
});
