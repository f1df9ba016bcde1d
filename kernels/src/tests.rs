use proptest::prelude::*;

use super::*;

/// Rows, columns (whole blocks), tokens and the values of the matrix and vectors.
fn case() -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<f32>)> {
    case_in(1..150, 1..7, 1..6)
}

/// Many tokens: several panels of sixteen and a part of one.
fn many_tokens_case() -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<f32>)> {
    case_in(1..40, 1..5, 1..41)
}

fn case_in(
    rows: std::ops::Range<usize>,
    blocks: std::ops::Range<usize>,
    tokens: std::ops::Range<usize>,
) -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<f32>)> {
    (rows, blocks, tokens).prop_flat_map(|(rows, blocks, tokens)| {
        let cols = blocks * BLOCK;
        (
            Just(rows),
            Just(cols),
            Just(tokens),
            prop::collection::vec(-4f32..4.0, rows * cols),
            prop::collection::vec(-4f32..4.0, tokens * cols),
        )
    })
}

/// Row `r` · vector `t` in plain f64 from the expanded weights.
fn reference(w: &[f32], x: &[f32], cols: usize, r: usize, t: usize) -> (f64, f64) {
    let row = &w[r * cols..(r + 1) * cols];
    let v = &x[t * cols..(t + 1) * cols];
    let terms = row
        .iter()
        .zip(v)
        .map(|(a, b)| f64::from(*a) * f64::from(*b));
    let magnitude = terms.clone().map(f64::abs).sum();
    (terms.sum(), magnitude)
}

/// Every output of a product (`rows` per token) is the f64 product of the
/// expanded weights, to within rounding of its terms' size.
fn matches_reference(
    w: &[f32],
    x: &[f32],
    cols: usize,
    rows: usize,
    tokens: usize,
    out: &[f32],
) -> Result<(), proptest::test_runner::TestCaseError> {
    for t in 0..tokens {
        for r in 0..rows {
            let (want, magnitude) = reference(w, x, cols, r, t);
            let got = f64::from(out[t * rows + r]);
            prop_assert!(
                (got - want).abs() <= 1e-5 * magnitude + 1e-6,
                "row {r}, token {t}: {got} against {want}"
            );
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn eight_bit_dot_products_match_plain_sums(
        // Past 2,048 rows the scan is shared among the workers.
        (dim, rows) in (1usize..400, prop_oneof![0usize..20, 2_040usize..4_200]),
        seed in any::<u64>(),
    ) {
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 56) as i8
        };
        let query: Vec<i8> = (0..dim).map(|_| next()).collect();
        let matrix: Vec<i8> = (0..dim * rows).map(|_| next()).collect();
        let want: Vec<i32> = matrix
            .chunks_exact(dim)
            .map(|row| row.iter().zip(&query).map(|(a, b)| i32::from(*a) * i32::from(*b)).sum())
            .collect();
        let mut out = vec![0i32; rows];
        dot_i8_rows(&query, &matrix, &mut out).unwrap();
        prop_assert_eq!(&out, &want, "the public scan");
        // Each scan this CPU runs, the portable one included: the public one
        // takes VNNI's where it can, leaving the other untested there.
        let mut portable = vec![0i32; rows];
        sentence::dot_i8_all(&query, &matrix, &mut portable);
        prop_assert_eq!(&portable, &want, "the portable scan");
        #[cfg(target_arch = "x86_64")]
        if sentence_x86::scan_vnni() {
            let mut vnni = vec![0i32; rows];
            // SAFETY: `scan_vnni` found the instructions.
            unsafe { sentence_x86::dot_i8_rows_vnni(&query, &matrix, &mut vnni) };
            prop_assert_eq!(&vnni, &want, "the VNNI scan");
        }
        if rows > 0 {
            prop_assert!(dot_i8_rows(&query, &matrix[1..], &mut out).is_err());
        }
    }

    #[test]
    fn a_product_with_rows_expanded_matches_the_expanded_weights(
        (rows, cols, tokens, values, x) in many_tokens_case()
    ) {
        let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        let w = m.dequantize();
        let mut out = vec![f32::NAN; rows * tokens];
        m.matmul_rows_expanded(&x, tokens, &mut out).unwrap();
        matches_reference(&w, &x, cols, rows, tokens, &out)?;
    }

    #[test]
    fn every_value_comes_back_within_half_a_step((rows, cols, _t, values, _x) in case()) {
        let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        let back = m.dequantize();
        for (block, got) in values.chunks(BLOCK).zip(back.chunks(BLOCK)) {
            let step = block.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
            for (v, g) in block.iter().zip(got) {
                prop_assert!((v - g).abs() <= step * 0.5001 + 1e-7, "{v} came back as {g}");
            }
        }
    }

    #[test]
    fn a_product_matches_the_expanded_weights_for_any_shape(
        (rows, cols, tokens, values, x) in case()
    ) {
        let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        let w = m.dequantize();
        let mut out = vec![f32::NAN; rows * tokens];
        m.matmul(&x, tokens, &mut out).unwrap();
        matches_reference(&w, &x, cols, rows, tokens, &out)?;
    }

    #[test]
    fn a_row_read_alone_is_the_row_of_the_expanded_matrix((rows, cols, _t, values, _x) in case()) {
        let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        let w = m.dequantize();
        let mut row = vec![f32::NAN; cols];
        for r in 0..rows {
            m.row(r, &mut row).unwrap();
            prop_assert_eq!(&row[..], &w[r * cols..(r + 1) * cols]);
        }
    }
}

/// How far quantizing vector `t` to 8 bits can move row `r` · vector `t`: each
/// value moves at most half its block's step, times the weight it meets.
fn token_rounding(w: &[f32], x: &[f32], cols: usize, r: usize, t: usize) -> f64 {
    let row = &w[r * cols..(r + 1) * cols];
    let v = &x[t * cols..(t + 1) * cols];
    row.chunks(BLOCK)
        .zip(v.chunks(BLOCK))
        .map(|(w, v)| {
            let step = v.iter().fold(0f64, |m, x| m.max(f64::from(x.abs()))) / 127.0;
            w.iter().map(|w| f64::from(w.abs())).sum::<f64>() * step * 0.5
        })
        .sum()
}

/// Each output is the f64 product of the expanded weights `w` within the tokens'
/// rounding to 8 bits.
fn within_rounding(
    w: &[f32],
    x: &[f32],
    (rows, cols, tokens): (usize, usize, usize),
    out: &[f32],
) -> Result<(), TestCaseError> {
    for t in 0..tokens {
        for r in 0..rows {
            let (want, magnitude) = reference(w, x, cols, r, t);
            let bound = token_rounding(w, x, cols, r, t) + 1e-5 * magnitude + 1e-5;
            let got = f64::from(out[t * rows + r]);
            prop_assert!(
                (got - want).abs() <= bound,
                "row {r}, token {t}: {got} against {want}, bound {bound}"
            );
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn a_product_of_many_tokens_is_within_their_rounding_for_any_shape(
        (rows, cols, tokens, values, x) in many_tokens_case()
    ) {
        let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        let mut out = vec![f32::NAN; rows * tokens];
        m.product(&x, tokens, &mut out).unwrap();
        within_rounding(&m.dequantize(), &x, (rows, cols, tokens), &out)?;
    }
}

proptest! {
    #[test]
    fn a_product_of_a_few_tokens_in_8_bits_is_within_their_rounding_for_any_shape(
        (rows, cols, tokens, values, x) in case()
    ) {
        let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        let mut out = vec![f32::NAN; rows * tokens];
        m.product_few(&x, tokens, &mut out).unwrap();
        within_rounding(&m.dequantize(), &x, (rows, cols, tokens), &out)?;
    }

    #[test]
    fn every_8_bit_kernel_the_cpu_runs_gives_the_portable_kernels_product(
        (rows, cols, _tokens, values, x) in case_in(1..20, 1..20, 1..2)
    ) {
        let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        for row in 0..rows {
            let all = every_q8_kernel(&m, row, &x);
            let (_, portable) = all[0];
            for (name, got) in &all[1..] {
                // The same integer sums; only the f32 additions' order differs.
                prop_assert!((got - portable).abs() <= 1e-4 * (1.0 + portable.abs()), "{name}: {got} against {portable}");
            }
        }
    }
}

#[test]
fn a_product_of_many_tokens_rounds_them_only_where_the_cpu_multiplies_in_8_bits() {
    // The second value is under half a step of its block, so it rounds to zero.
    let mut weights = vec![0f32; BLOCK];
    weights[1] = 1.0;
    let mut x = vec![0f32; 8 * BLOCK];
    for token in x.chunks_mut(BLOCK) {
        token[0] = 1.0;
        token[1] = 0.001;
    }
    let m = Q8Matrix::quantize(1, BLOCK, &weights).unwrap();
    let mut out = vec![f32::NAN; 8];
    m.product(&x, 8, &mut out).unwrap();
    let want = if has_int8_product() { 0.0 } else { 0.001 };
    assert!(out.iter().all(|v| (v - want).abs() < 1e-6), "{out:?}");
    assert_eq!(
        m.product(&x[1..], 8, &mut out),
        Err(ShapeError::Length {
            expected: 8 * BLOCK,
            got: 8 * BLOCK - 1
        })
    );
}

#[test]
fn a_token_that_is_not_a_number_gives_no_number_and_a_block_of_zeros_gives_zero() {
    let weights: Vec<f32> = (0..2 * BLOCK).map(|i| i as f32 / 10.0 - 3.0).collect();
    let m = Q8Matrix::quantize(1, 2 * BLOCK, &weights).unwrap();
    // Token 0: zeros, then a block of ones; token 1: a NaN; token 2: an infinity;
    // the rest all zeros.
    let mut x = vec![0f32; 8 * 2 * BLOCK];
    x[BLOCK..2 * BLOCK].fill(1.0);
    x[2 * BLOCK + 5] = f32::NAN;
    x[4 * BLOCK + BLOCK + 1] = f32::INFINITY;
    let mut out = vec![f32::NAN; 8];
    m.product(&x, 8, &mut out).unwrap();
    let ones: f32 = m.dequantize()[BLOCK..].iter().sum();
    assert!((out[0] - ones).abs() < 1e-3, "{} against {ones}", out[0]);
    assert!(out[1].is_nan(), "{out:?}");
    // An infinity times a positive weight stays infinite where the product is
    // f32 (a CPU without AVX-512 VNNI), and is not a number where the token is
    // quantized: never a finite number either way.
    assert!(!out[2].is_finite(), "{out:?}");
    assert!(out[3..].iter().all(|v| *v == 0.0), "{out:?}");
    // The same tokens one at a time, as a generated token is multiplied.
    m.product_few(&x, 8, &mut out).unwrap();
    assert!((out[0] - ones).abs() < 1e-3, "{} against {ones}", out[0]);
    assert!(out[1].is_nan() && out[2].is_nan(), "{out:?}");
    assert!(out[3..].iter().all(|v| *v == 0.0), "{out:?}");
}

#[test]
fn a_product_of_no_tokens_or_no_rows_is_empty() {
    let m = Q8Matrix::quantize(3, BLOCK, &[1.0; 3 * BLOCK]).unwrap();
    assert_eq!(m.product(&[], 0, &mut []), Ok(()));
    let empty = Q8Matrix::quantize(0, BLOCK, &[]).unwrap();
    assert_eq!(empty.product(&[1.0; 9 * BLOCK], 9, &mut []), Ok(()));
}

#[test]
fn stacked_matrices_keep_their_rows_in_order() {
    let a = Q8Matrix::quantize(2, 32, &[1.0; 64]).unwrap();
    let b = Q8Matrix::quantize(1, 32, &[-3.0; 32]).unwrap();
    let both = Q8Matrix::stack(&[&a, &b]).unwrap();
    assert_eq!((both.rows(), both.cols()), (3, 32));
    let back = both.dequantize();
    assert!(back[..64].iter().all(|v| *v == 1.0) && back[64..].iter().all(|v| *v == -3.0));
    let c = Q8Matrix::quantize(1, 64, &[0.0; 64]).unwrap();
    assert!(Q8Matrix::stack(&[&a, &c]).is_err());
    assert!(Q8Matrix::stack(&[]).is_err());
}

#[test]
fn a_block_of_zeros_stays_zero_and_the_largest_value_is_exact() {
    let mut values = vec![0f32; 2 * BLOCK];
    values[BLOCK + 3] = -2.5;
    values[BLOCK + 4] = 1.0;
    let m = Q8Matrix::quantize(1, 2 * BLOCK, &values).unwrap();
    let back = m.dequantize();
    assert!(back[..BLOCK].iter().all(|v| *v == 0.0));
    assert_eq!(back[BLOCK + 3], -2.5);
    assert!((back[BLOCK + 4] - 1.0).abs() < 2.5 / 127.0);
    // A scale, the integers and their sum per block.
    assert_eq!(m.bytes(), 2 * (4 + BLOCK + 2));
}

#[test]
fn shapes_that_do_not_fit_are_refused_with_what_was_wrong() {
    assert_eq!(
        Q8Matrix::quantize(2, 33, &[0.0; 66]),
        Err(ShapeError::Columns(33))
    );
    assert_eq!(Q8Matrix::quantize(1, 0, &[]), Err(ShapeError::Columns(0)));
    assert_eq!(
        Q8Matrix::quantize(2, 32, &[0.0; 63]),
        Err(ShapeError::Length {
            expected: 64,
            got: 63
        })
    );
    let m = Q8Matrix::quantize(2, 32, &[1.0; 64]).unwrap();
    let mut out = [0f32; 2];
    assert_eq!(
        m.matmul(&[0.0; 31], 1, &mut out),
        Err(ShapeError::Length {
            expected: 32,
            got: 31
        })
    );
    assert_eq!(
        m.matmul(&[0.0; 32], 1, &mut out[..1]),
        Err(ShapeError::Length {
            expected: 2,
            got: 1
        })
    );
    let mut row = [0f32; 32];
    assert_eq!(m.row(2, &mut row), Err(ShapeError::Row { row: 2, rows: 2 }));
    assert_eq!(
        m.row(0, &mut row[..8]),
        Err(ShapeError::Length {
            expected: 32,
            got: 8
        })
    );
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx;
mod attention;
mod q4;
mod tiles;
mod wide;
#[cfg(target_arch = "x86_64")]
mod widened;

#[test]
fn work_run_on_the_workers_runs_on_a_pool_thread_and_gives_its_result() {
    assert_eq!(rayon::current_thread_index(), None);
    let (index, sum) = on_workers(|| (rayon::current_thread_index(), 2 + 2));
    assert!(index.is_some(), "ran on the caller's own thread");
    assert_eq!(sum, 4);
}

/// `work` on a pool of `threads` workers of its own, so that a product sees that
/// many whatever the machine has.
fn on_pool<R: Send>(threads: usize, work: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(work)
}

proptest! {
    /// A panel's rows shared among workers (fewer panels than workers) give the
    /// very product of one worker doing them all: the same sums, in the same order.
    #[test]
    fn a_few_tokens_rows_shared_among_workers_give_one_worker_s_product(
        (rows, cols, tokens, values, x) in case_in(60..140, 1..4, 1..40)
    ) {
        // Without VNNI the product is `matmul`, which shares nothing this way.
        if !has_int8_product() {
            return Ok(());
        }
        let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        let mut alone = vec![f32::NAN; rows * tokens];
        on_pool(1, || m.product(&x, tokens, &mut alone)).unwrap();
        for threads in [2, 3] {
            let mut shared = vec![f32::NAN; rows * tokens];
            on_pool(threads, || m.product(&x, tokens, &mut shared)).unwrap();
            let same = alone.iter().zip(&shared).all(|(a, b)| a.to_bits() == b.to_bits());
            prop_assert!(same, "{threads} workers: {shared:?} against {alone:?}");
        }
    }
}

/// `exp` reads its power of two from the rounding's bits, and that gives the
/// power the saturating conversion it replaced gave, bit for bit: every 61st
/// float of each sign up to past the clamps, and the clamps themselves.
#[test]
fn exp_s_power_of_two_is_the_one_the_conversion_gave() {
    let top = 100f32.to_bits();
    let sampled = (0..top).step_by(61).flat_map(|bits| {
        let x = f32::from_bits(bits);
        [x, -x]
    });
    for x in sampled.chain([-87.0, 88.0]) {
        let x = x.clamp(-87.0, 88.0);
        let biased = x * std::f32::consts::LOG2_E + 12_582_912.0;
        let n = biased - 12_582_912.0;
        let converted = f32::from_bits(((n as i32 + 127) as u32) << 23);
        let read = elementwise::power_of_two(biased);
        assert_eq!(
            read.to_bits(),
            converted.to_bits(),
            "{x}: {read} against {converted}"
        );
    }
}
