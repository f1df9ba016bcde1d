//! [`crate::Q8Matrix::matmul_rows_expanded`] in x86 intrinsics: a small GEMM's
//! register tile. Four rows are expanded to f32, then multiplied by a few tokens
//! at a time (four with AVX-512, two with AVX2), each sum in a register of its
//! own, so every weight vector loaded serves several tokens and every token
//! vector four rows. The portable version dots one row with one token at a time,
//! loading both for each multiply-add; written portably as a tile, the compiler
//! did not keep the sums in registers (they were measured spilled, seven times
//! slower).

use std::arch::x86_64::*;
use std::sync::OnceLock;

use crate::BLOCK;

/// Rows expanded and multiplied together.
const ROWS: usize = 4;
/// The most tokens a tile of either kernel multiplies together.
const MAX_TOKENS: usize = 4;

/// `expanded_rows`: a row group's scales and blocks, `bpr` blocks a row, and the
/// tokens; `out[r * tokens + t]`.
pub(crate) type Expanded = unsafe fn(&[f32], &[[i8; BLOCK]], usize, &[f32], &mut [f32]);

/// The best tile this CPU runs, found once: AVX-512, else AVX2 with FMA, else
/// none (the portable version).
pub(crate) fn expanded_rows() -> Option<Expanded> {
    static CHOSEN: OnceLock<Option<Expanded>> = OnceLock::new();
    *CHOSEN.get_or_init(|| all().last().map(|(_, kernel)| *kernel))
}

/// This file's kernels the CPU runs, by name, the best last.
pub(crate) fn all() -> Vec<(&'static str, Expanded)> {
    let mut kernels = Vec::new();
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        kernels.push(("avx2", expanded_avx2 as Expanded));
    }
    if is_x86_feature_detected!("avx512f") {
        kernels.push(("avx512", expanded_avx512 as Expanded));
    }
    kernels
}

macro_rules! tiled {
    (
        $expanded:ident, $tile:ident, $features:literal,
        lanes: $lanes:literal, tokens: $tokens:literal,
        $zero:ident, $load:ident, $fmadd:ident, $sum:ident
    ) => {
        /// Each row of `scales`/`quants` expanded to f32 once, then dotted with
        /// every vector of `x`, as the portable `expanded_rows`.
        ///
        /// # Safety
        ///
        /// The CPU must have the features this is compiled for ([`all`] checks).
        #[target_feature(enable = $features)]
        unsafe fn $expanded(
            scales: &[f32],
            quants: &[[i8; BLOCK]],
            bpr: usize,
            x: &[f32],
            out: &mut [f32],
        ) {
            let cols = bpr * BLOCK;
            let tokens = x.len() / cols;
            // The last group may have fewer rows; the buffer's other rows keep
            // what they held, and their sums are not written.
            let mut rows = vec![0f32; ROWS * cols];
            for ((scales, quants), out) in scales
                .chunks(ROWS * bpr)
                .zip(quants.chunks(ROWS * bpr))
                .zip(out.chunks_mut(ROWS * tokens))
            {
                crate::sentence::expand_blocks(scales, quants, &mut rows);
                let count = out.len() / tokens;
                let mut t = 0;
                while t < tokens {
                    let take = (tokens - t).min($tokens);
                    let x = &x[t * cols..(t + take) * cols];
                    let mut sums = [[0f32; MAX_TOKENS]; ROWS];
                    match take {
                        4 => $tile::<4>(&rows, x, cols, &mut sums),
                        3 => $tile::<3>(&rows, x, cols, &mut sums),
                        2 => $tile::<2>(&rows, x, cols, &mut sums),
                        _ => $tile::<1>(&rows, x, cols, &mut sums),
                    }
                    for (r, sums) in sums.iter().take(count).enumerate() {
                        out[r * tokens + t..][..take].copy_from_slice(&sums[..take]);
                    }
                    t += take;
                }
            }
        }

        /// The [`ROWS`] × `T` dot products of the rows in `w` with the `T`
        /// tokens in `x` (`cols` values each, a multiple of the lanes), into
        /// `sums[r][t]`.
        #[target_feature(enable = $features)]
        #[inline]
        // Indexing by row and token keeps each sum a register of its own: no
        // closure, which would not inherit the target features, and no iterator
        // chain to split. Writing the sums to `out` here, for the rows there
        // are, kept one in memory through the whole loop (measured 20 %).
        #[allow(clippy::needless_range_loop)]
        fn $tile<const T: usize>(
            w: &[f32],
            x: &[f32],
            cols: usize,
            sums: &mut [[f32; MAX_TOKENS]; ROWS],
        ) {
            let (w, _) = w[..ROWS * cols].as_chunks::<$lanes>();
            let (x, _) = x[..T * cols].as_chunks::<$lanes>();
            let n = cols / $lanes;
            let mut acc = [[$zero(); T]; ROWS];
            for k in 0..n {
                let mut xs = [$zero(); T];
                for t in 0..T {
                    // SAFETY: a register's worth of f32, an unaligned load.
                    xs[t] = unsafe { $load(x[t * n + k].as_ptr()) };
                }
                for r in 0..ROWS {
                    // SAFETY: a register's worth of f32, an unaligned load.
                    let a = unsafe { $load(w[r * n + k].as_ptr()) };
                    for t in 0..T {
                        acc[r][t] = $fmadd(a, xs[t], acc[r][t]);
                    }
                }
            }
            for r in 0..ROWS {
                for t in 0..T {
                    sums[r][t] = $sum(acc[r][t]);
                }
            }
        }
    };
}

// Sixteen of AVX-512's 32 registers hold sums; loads are half the multiply-adds
// (three tokens a tile measured 6 % slower).
tiled!(
    expanded_avx512, tile_avx512, "avx512f",
    lanes: 16, tokens: 4,
    _mm512_setzero_ps, _mm512_loadu_ps, _mm512_fmadd_ps, _mm512_reduce_add_ps
);

// AVX2 has sixteen registers: eight sums, two tokens and a row.
tiled!(
    expanded_avx2, tile_avx2, "avx2,fma",
    lanes: 8, tokens: 2,
    _mm256_setzero_ps, _mm256_loadu_ps, _mm256_fmadd_ps, sum256
);

/// The sum of a register's eight lanes.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn sum256(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Whether this CPU has what [`dot_i8_rows_vnni`] is compiled for, found once.
pub(crate) fn scan_vnni() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
    })
}

/// [`crate::dot_i8_rows`]'s scan with `vpdpbusd`, 64 pairs of bytes an
/// instruction, where the widening multiply-adds of the portable version take
/// 32 and their sign extensions besides (on a worker, a scan of 1,000 passages
/// went from 27 to 18 µs at the median, 3,000 from 72 to 42; BENCHMARKS.md,
/// "BM25 over the heading and body together"). The instruction
/// multiplies unsigned bytes by signed ones, so each row byte has its top bit
/// flipped (its value plus 128, as unsigned) and 128 × the query's sum is taken
/// off after. Whole 64-byte chunks go through it, a row's last bytes one at a
/// time.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VNNI ([`scan_vnni`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn dot_i8_rows_vnni(query: &[i8], rows: &[i8], out: &mut [i32]) {
    let dim = query.len();
    if dim == 0 {
        return;
    }
    let whole = dim / 64 * 64;
    let flip = _mm512_set1_epi8(i8::MIN);
    // Wrapping sums: the instruction's own wrap, so the result is exact
    // wherever the true dot product fits in an i32.
    let correction = query[..whole]
        .iter()
        .fold(0i32, |sum, &q| sum.wrapping_add(i32::from(q)))
        .wrapping_mul(128);
    for (row, out) in rows.chunks_exact(dim).zip(out.iter_mut()) {
        // Two running sums, so that each `vpdpbusd` need not wait for the last.
        let mut even = _mm512_setzero_si512();
        let mut odd = _mm512_setzero_si512();
        let chunk = |c: usize| {
            // SAFETY: `c + 64 <= whole <= dim`, within the row and the query;
            // `loadu` has no alignment requirement.
            unsafe {
                let r = _mm512_loadu_si512(row.as_ptr().add(c).cast());
                let q = _mm512_loadu_si512(query.as_ptr().add(c).cast());
                (_mm512_xor_si512(r, flip), q)
            }
        };
        let mut c = 0;
        while c + 128 <= whole {
            let (r, q) = chunk(c);
            even = _mm512_dpbusd_epi32(even, r, q);
            let (r, q) = chunk(c + 64);
            odd = _mm512_dpbusd_epi32(odd, r, q);
            c += 128;
        }
        if c < whole {
            let (r, q) = chunk(c);
            even = _mm512_dpbusd_epi32(even, r, q);
        }
        let tail: i32 = row[whole..]
            .iter()
            .zip(&query[whole..])
            .map(|(&r, &q)| i32::from(r) * i32::from(q))
            .sum();
        *out = _mm512_reduce_add_epi32(_mm512_add_epi32(even, odd))
            .wrapping_sub(correction)
            .wrapping_add(tail);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::BLOCK;

    proptest! {
        #[test]
        fn every_register_tile_gives_the_portable_sums_for_any_shape(
            (rows, bpr, tokens, quants, scales, x) in (1usize..14, 1usize..4, 1usize..12)
                .prop_flat_map(|(rows, bpr, tokens)| (
                    Just(rows),
                    Just(bpr),
                    Just(tokens),
                    prop::collection::vec(any::<[i8; BLOCK]>(), rows * bpr),
                    prop::collection::vec(0.001f32..0.1, rows * bpr),
                    prop::collection::vec(-2f32..2.0, tokens * bpr * BLOCK),
                ))
        ) {
            let mut want = vec![f32::NAN; rows * tokens];
            crate::sentence::expanded_rows(&scales, &quants, bpr, &x, &mut want);
            for (name, kernel) in super::all() {
                let mut got = vec![f32::NAN; rows * tokens];
                // SAFETY: `all` lists only the kernels this CPU runs.
                unsafe { kernel(&scales, &quants, bpr, &x, &mut got) };
                for (g, w) in got.iter().zip(&want) {
                    prop_assert!((g - w).abs() <= 1e-3 * (1.0 + w.abs()), "{name}: {g} against {w}");
                }
            }
        }
    }
}
