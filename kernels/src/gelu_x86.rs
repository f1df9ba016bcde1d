//! BERT's GELU in AVX-512 intrinsics, for `elementwise::gelu`: the error
//! function's `1 / (1 + p|x|)` as the reciprocal's estimate and one Newton
//! step rather than `vdivps`, the slowest instruction of the plain pass (a
//! passage's GELU was a tenth of its time on the tiles: BENCHMARKS.md, "Tiles
//! on a cache line"), and `e^(−x²)` as a power of two by `vscalefps`.
//!
//! The same formula as the plain pass (Abramowitz and Stegun 7.1.26), so the
//! results differ from it only in the last bits of f32
//! (`elementwise::tests` checks both against the error function in f64).

use std::arch::x86_64::*;

use crate::pow2_x86::pow2;

/// Whether this CPU has AVX-512 (the standard library caches what it
/// detects).
pub(crate) fn here() -> bool {
    is_x86_feature_detected!("avx512f")
}

/// `x Φ(x)` for every value, in place.
///
/// # Safety
///
/// [`here`].
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn gelu(xs: &mut [f32]) {
    for chunk in xs.chunks_mut(16) {
        let mask = ((1u32 << chunk.len()) - 1) as __mmask16;
        let at = chunk.as_mut_ptr();
        // SAFETY: the mask covers the chunk's values only.
        unsafe {
            let x = _mm512_maskz_loadu_ps(mask, at);
            _mm512_mask_storeu_ps(at, mask, sixteen(x));
        }
    }
}

#[inline]
#[target_feature(enable = "avx512f")]
fn sixteen(x: __m512) -> __m512 {
    let set = _mm512_set1_ps;
    let u = _mm512_mul_ps(x, set(std::f32::consts::FRAC_1_SQRT_2));
    // erf(10) is 1 in f32; the bound keeps an infinity's reciprocal step a
    // number, and the operands' order keeps a not a number.
    let a = _mm512_min_ps(set(10.0), _mm512_abs_ps(u));
    let d = _mm512_fmadd_ps(set(0.327_591_1), a, set(1.0));
    let r = _mm512_rcp14_ps(d);
    let t = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, set(1.0)), r);
    let mut p = set(1.061_405_4);
    for c in [-1.453_152_1, 1.421_413_7, -0.284_496_74, 0.254_829_6] {
        p = _mm512_fmadd_ps(t, p, set(c));
    }
    let p = _mm512_mul_ps(t, p);
    let erf = _mm512_fnmadd_ps(p, exp_negative_square(a), set(1.0));
    // The sign of `u` on |erf|.
    let sign = _mm512_and_si512(_mm512_castps_si512(u), _mm512_set1_epi32(i32::MIN));
    let erf = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(erf), sign));
    _mm512_mul_ps(_mm512_mul_ps(set(0.5), x), _mm512_add_ps(set(1.0), erf))
}

/// `e^(−a²)` for `a` in 0…10.
#[inline]
#[target_feature(enable = "avx512f")]
fn exp_negative_square(a: __m512) -> __m512 {
    pow2(_mm512_mul_ps(
        _mm512_mul_ps(a, a),
        _mm512_set1_ps(-std::f32::consts::LOG2_E),
    ))
}
