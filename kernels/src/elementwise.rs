//! Element-wise passes between the products: softmax, GELU and layer norm.
//!
//! The standard library's `exp` is a call per element that the compiler cannot
//! vectorise; at ingest a passage's softmax and GELU make it a tenth of the time
//! (BENCHMARKS.md, "Element-wise passes vectorised"). [`exp`] here is branch-free
//! arithmetic on the float's bits (Cephes' `expf`: a range reduction by ln 2 and a
//! degree-six polynomial, within two units in the last place on the range that
//! matters), so each pass below compiles to AVX2 or AVX-512 through
//! `multiversion`, like the other loops of this crate.

use multiversion::multiversion;

/// 1.5 × 2²³: adding it and taking it away rounds to an integer without a
/// rounding instruction the baseline lacks.
const ROUND: f32 = 12_582_912.0;

/// `e^x`, within 3e-7 relative for `x` in −87…88 (below, a tiny positive
/// number stands for 0; above, the largest finite power stands for infinity).
/// Not a number gives not a number.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    exp_with(x, false)
}

/// [`exp`] with its multiply-adds fused where `fused` (see [`madd`]): the
/// passes below give what `target_cfg_f!` says of the clone they run in.
#[inline(always)]
pub(crate) fn exp_with(x: f32, fused: bool) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in two parts, so that `x − n ln 2` keeps its low bits.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let m = |a: f32, b: f32, c: f32| madd(a, b, c, fused);
    let x = x.clamp(-87.0, 88.0);
    let biased = m(x, LOG2E, ROUND);
    let n = biased - ROUND;
    let r = m(-n, LN2_LO, m(-n, LN2_HI, x));
    let p = m(1.987_569_2e-4, r, 1.398_199_9e-3);
    let p = m(p, r, 8.333_452e-3);
    let p = m(p, r, 4.166_579_6e-2);
    let p = m(p, r, 0.166_666_65);
    let p = m(p, r, 0.5);
    let er = m(p * r, r, r) + 1.0;
    er * power_of_two(biased)
}

/// `a × b + c`: one instruction and one rounding where `fused`, which a caller
/// sets only in an x86 clone compiled with FMA (`target_cfg_f!`; aarch64 has
/// the instruction but no feature of that name, and stays unfused); otherwise the
/// product and the sum as written, since `mul_add` without the instruction is a
/// call to the C library's `fmaf`. Rust does not fuse `a * b + c` itself, so
/// the AVX-512 clones did each step of the polynomials in two instructions.
#[inline(always)]
fn madd(a: f32, b: f32, c: f32, fused: bool) -> f32 {
    if fused { a.mul_add(b, c) } else { a * b + c }
}

/// 2ⁿ, for the n that `biased` (n + 1.5 × 2²³) holds in its low bits, where the
/// rounding left it; n is within −126…127 after `exp`'s clamp, so 2ⁿ is a
/// normal float. Read from the bits rather than by `n as i32`, which saturates
/// (not a number gives 0) and which the compiler did lane by lane, a compare and
/// a conditional move each: that was most of a softmax's time. (Not a number
/// gives a wrong power here, but `exp`'s `er` is not a number then, and so is
/// its result.)
#[inline(always)]
pub(crate) fn power_of_two(biased: f32) -> f32 {
    let n_bits = biased.to_bits().wrapping_sub(ROUND.to_bits());
    f32::from_bits(n_bits.wrapping_add(127) << 23)
}

/// The error function (Abramowitz and Stegun 7.1.26, within 1.5e-7), as BERT's
/// exact `gelu` uses it.
#[inline(always)]
fn erf(x: f32, fused: bool) -> f32 {
    let m = |a: f32, b: f32, c: f32| madd(a, b, c, fused);
    let a = x.abs();
    let t = 1.0 / m(0.327_591_1, a, 1.0);
    let poly = m(t, 1.061_405_4, -1.453_152_1);
    let poly = m(t, poly, 1.421_413_7);
    let poly = m(t, poly, -0.284_496_74);
    let poly = m(t, poly, 0.254_829_6);
    let poly = t * poly;
    m(-poly, exp_with(-a * a, fused), 1.0).copysign(x)
}

/// BERT's GELU, `x Φ(x)` with the error function, in place: in AVX-512
/// intrinsics where the CPU has them (`gelu_x86.rs`, the same formula without
/// a division), otherwise as below.
pub fn gelu(xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::gelu_x86::here() {
        // SAFETY: the CPU has AVX-512.
        unsafe { crate::gelu_x86::gelu(xs) };
        return;
    }
    gelu_plain(xs);
}

/// [`gelu`] in plain Rust, compiled for each CPU feature set.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub(crate) fn gelu_plain(xs: &mut [f32]) {
    let fused = multiversion::target::target_cfg_f!(target_feature = "fma");
    for x in xs.iter_mut() {
        *x = 0.5 * *x * (1.0 + erf(*x * std::f32::consts::FRAC_1_SQRT_2, fused));
    }
}

/// The softmax of `row × scale`, in place. A row holding a not a number gives
/// not a number throughout; a row of minus infinities gives even weights (the
/// clamped `exp` of each is the same tiny number).
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn softmax(row: &mut [f32], scale: f32) {
    let fused = multiversion::target::target_cfg_f!(target_feature = "fma");
    // A plain comparison is one `vmaxps`; `f32::max` also passes over a not a
    // number, a compare and a blend a lane more, and its sixteen lanes were
    // joined one by one. A row holding one gives not a number either way.
    let top = lanes(row, f32::MIN, |a, b| if a > b { a } else { b });
    // The exponentials summed as they are made, in sixteen running sums as
    // `lanes` keeps them, rather than read again in a pass of their own.
    let e = |w: &mut f32| {
        *w = exp_with((*w - top) * scale, fused);
        *w
    };
    let (chunks, rest) = row.as_chunks_mut::<16>();
    let mut sums = [0f32; 16];
    for chunk in chunks {
        for (sum, w) in sums.iter_mut().zip(chunk) {
            *sum += e(w);
        }
    }
    let tail = rest.iter_mut().fold(0.0, |sum, w| sum + e(w));
    let inv = 1.0 / sums.iter().fold(tail, |a, b| a + b);
    row.iter_mut().for_each(|w| *w *= inv);
}

/// `xs` folded by `f` in sixteen running results, so that the compiler may
/// vectorise it: a fold of floats in one running result must keep its order
/// and stays scalar, and kept the loop around it (the exponentials) scalar too.
/// `f` both takes an element in and joins two results, as a sum or a maximum.
#[inline(always)]
pub(crate) fn lanes(xs: &[f32], start: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    lanes_joined(xs, start, &f, &f)
}

/// As [`lanes`], with `join` to join the running results.
#[inline(always)]
fn lanes_joined(
    xs: &[f32],
    start: f32,
    f: impl Fn(f32, f32) -> f32,
    join: impl Fn(f32, f32) -> f32,
) -> f32 {
    let (chunks, rest) = xs.as_chunks::<16>();
    let mut acc = [start; 16];
    for chunk in chunks {
        for (a, x) in acc.iter_mut().zip(chunk) {
            *a = f(*a, *x);
        }
    }
    let tail = rest.iter().fold(start, |a, x| f(a, *x));
    acc.iter().fold(tail, |a, x| join(a, *x))
}

/// Each `width`-long row of `x` normalised to mean 0 and variance 1 (with `eps`
/// added to the variance), then scaled by `weight` and shifted by `bias`.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn layer_norm(x: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    let width = weight.len();
    if width == 0 {
        return;
    }
    for row in x.chunks_exact_mut(width) {
        let mean = lanes(row, 0.0, |a, b| a + b) / width as f32;
        let square = |a: f32, v: f32| a + (v - mean) * (v - mean);
        let var = lanes_joined(row, 0.0, square, |a, b| a + b) / width as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
            *v = (*v - mean) * inv * w + b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn exp_is_within_a_few_ulp_of_the_standard_library(x in -87.0f32..88.0) {
            let theirs = x.exp();
            for ours in [exp(x), exp_with(x, true)] {
                prop_assert!(((ours - theirs) / theirs).abs() < 3e-7, "{x}: {ours} against {theirs}");
            }
        }

        #[test]
        fn gelu_matches_its_definition(x in -12.0f32..12.0, at in 0usize..37) {
            // The value among others, so that whole vectors and the tail
            // both meet it.
            let mut many = [0.25f32; 37];
            many[at] = x;
            gelu(&mut many);
            let ours = [many[at]];
            let mut plain = [x];
            gelu_plain(&mut plain);
            // The clone this CPU runs, and the step with each kind of multiply-add.
            let by_step = |fused| 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2, fused));
            let reference = 0.5 * f64::from(x) * (1.0 + erf_reference(f64::from(x) / 2f64.sqrt()));
            for ours in [ours[0], plain[0], by_step(true), by_step(false)] {
                prop_assert!((f64::from(ours) - reference).abs() < 2e-6 * f64::from(x.abs()).max(1.0), "{x}: {ours} against {reference}");
            }
        }

        #[test]
        fn a_softmax_sums_to_one_and_keeps_the_order(row in prop::collection::vec(-50.0f32..50.0, 1..70), scale in 0.01f32..2.0) {
            let mut ours = row.clone();
            softmax(&mut ours, scale);
            let top = row.iter().fold(f32::MIN, |m, w| m.max(*w));
            let sum: f64 = row.iter().map(|w| (f64::from((w - top) * scale)).exp()).sum();
            for (w, o) in row.iter().zip(&ours) {
                let reference = f64::from((w - top) * scale).exp() / sum;
                prop_assert!((f64::from(*o) - reference).abs() < 1e-5 * reference + 1e-7, "{o} against {reference}");
            }
        }
    }

    /// erf in f64 by its Taylor series, far from where A&S's fit is tested.
    fn erf_reference(x: f64) -> f64 {
        if x.abs() > 5.0 {
            return x.signum();
        }
        let (mut term, mut sum) = (x, x);
        for n in 1..200 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn the_edges_of_exp_are_numbers_and_not_a_number_stays_one() {
        assert!(exp(-1000.0) >= 0.0 && exp(-1000.0) < 1e-37);
        assert!(exp(1000.0).is_finite() && exp(1000.0) > 1e38);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn gelu_keeps_the_plain_passs_edges() {
        let edges = [
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            0.0,
            -0.0,
            1e-40,
            40.0,
            -40.0,
        ];
        let (mut ours, mut plain) = (edges, edges);
        gelu(&mut ours);
        gelu_plain(&mut plain);
        for ((x, a), b) in edges.iter().zip(ours).zip(plain) {
            assert!(a == b || (a.is_nan() && b.is_nan()), "{x}: {a} against {b}");
        }
        assert_eq!(ours[0], f32::INFINITY);
    }

    #[test]
    fn a_softmax_row_holding_a_not_a_number_gives_not_a_number() {
        // Long enough for the sixteen lanes, with the not a number in each place.
        for at in 0..40 {
            let mut row: Vec<f32> = (0..40).map(|i| i as f32 / 7.0).collect();
            row[at] = f32::NAN;
            softmax(&mut row, 0.5);
            assert!(
                row.iter().all(|w| w.is_nan()),
                "not a number at {at}: {row:?}"
            );
        }
        let mut row = vec![f32::NAN; 20];
        softmax(&mut row, 1.0);
        assert!(row.iter().all(|w| w.is_nan()));
        // Nothing above minus infinity: `exp`'s tiny number for each, so the
        // weights are even, as they were with `f32::max`.
        let mut row = vec![f32::NEG_INFINITY; 20];
        softmax(&mut row, 1.0);
        assert!(row.iter().all(|w| (w - 0.05).abs() < 1e-6), "{row:?}");
    }

    #[test]
    fn a_layer_norm_gives_mean_zero_and_unit_variance() {
        let mut x: Vec<f32> = (0..12).map(|i| i as f32 * 1.5 - 3.0).collect();
        layer_norm(&mut x, &[1.0; 6], &[0.0; 6], 1e-12);
        for row in x.chunks_exact(6) {
            let mean: f32 = row.iter().sum::<f32>() / 6.0;
            let var: f32 = row.iter().map(|v| v * v).sum::<f32>() / 6.0;
            assert!(mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4, "{row:?}");
        }
    }
}
