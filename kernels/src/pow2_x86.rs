//! Powers of two in AVX-512 for the passes that take exponentials
//! (`gelu_x86.rs`, and attention's weights in `tiles/simd.rs`): 2^t as
//! 2^round(t) by `vscalefps` times 2^f for the rest f in −0.5…0.5: far below
//! the smallest float it gives zero and far above infinity, so callers bound
//! `t` only to keep it finite (an infinity's rest f is not a number).

use std::arch::x86_64::*;

/// 2^t for each finite lane, within 2e-7 relative; not a number stays one.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn pow2(t: __m512) -> __m512 {
    let whole = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
    let f = _mm512_sub_ps(t, whole);
    // Cephes' exp2f on −0.5…0.5: 2^f = 1 + f P(f).
    let mut p = _mm512_set1_ps(1.535_336_2e-4);
    for c in [
        1.339_887_4e-3,
        9.618_437e-3,
        5.550_332_5e-2,
        2.402_264_8e-1,
        6.931_472e-1,
    ] {
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(_mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0)), whole)
}
