//! The passes of `simd.rs` against the plain Rust they stand for: the same
//! tiles bit for bit (values rounded to bf16, packed keys and values), and
//! attention's weights within a unit in bf16's last place.

use proptest::prelude::*;

use super::attention::exponentials;
use super::{DEPTH, Lines, Packed, TILE, in_tiles_with, simd};

/// Whether the instructions are here; the tests say so when they cannot run.
fn here() -> bool {
    let here = simd::here();
    if !here {
        eprintln!("no AVX-512 BF16 on this machine; its passes are not tested");
    }
    here
}

/// Ordinary values, with every kind of special among them: both zeros, both
/// infinities, not a number, the largest (which rounds to infinity), ties
/// between two bf16 values, and numbers too small to be normal.
fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        8 => -3.0f32..3.0,
        1 => prop::sample::select(vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MAX,
            1.0 + 1.0 / 256.0,
            1.0 + 3.0 / 256.0,
            1e-40,
            -1e-42,
        ]),
        1 => any::<u32>().prop_map(f32::from_bits),
    ]
}

fn widen(v: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(v) << 16))
}

fn values(len: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(value(), len)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Rows into tiles, as products' tokens and attention's queries go.
    #[test]
    fn rows_rounded_by_the_instructions_are_the_plain_ones(
        (n, chunks, x) in (1usize..40, 1usize..4)
            .prop_flat_map(|(n, c)| (Just(n), Just(c), values(n * c * DEPTH)))
    ) {
        if !here() {
            return Ok(());
        }
        let k = chunks * DEPTH;
        let rows = n.next_multiple_of(TILE);
        // A buffer of the same size filled and freed first, which the
        // allocator is likely to hand out again: padding left unwritten shows.
        drop(std::hint::black_box(vec![u16::MAX; rows * k + 32]));
        let fast = in_tiles_with(&x, n, k, rows, k, true);
        let plain = in_tiles_with(&x, n, k, rows, k, false);
        prop_assert_eq!(&*fast, &*plain);
        // The padding rows (the last group's past `n`) are zeros.
        let last = (rows / TILE - 1) * chunks * TILE * DEPTH;
        for c in 0..chunks {
            for i in n % TILE..TILE {
                let at = last + c * TILE * DEPTH + i * DEPTH;
                prop_assert!(n % TILE == 0 || fast[at..at + DEPTH].iter().all(|v| *v == 0));
            }
        }
    }

    /// Keys (or a weight's rows) packed as columns, any number of them.
    #[test]
    fn columns_packed_by_the_instructions_are_the_plain_ones(
        (n, chunks, x) in (1usize..70, 1usize..3)
            .prop_flat_map(|(n, c)| (Just(n), Just(c), values(n * c * DEPTH)))
    ) {
        if !here() {
            return Ok(());
        }
        let k = chunks * DEPTH;
        let column = |j: usize| &x[j * k..][..k];
        let fast = Packed::from_columns_with(k, n, column, true);
        let plain = Packed::from_columns_with(k, n, column, false);
        prop_assert_eq!(&*fast.tiles, &*plain.tiles);
    }

    /// Values packed as rows, an odd number of tokens too (the last pairs with
    /// zeros).
    #[test]
    fn rows_packed_by_the_instructions_are_the_plain_ones(
        (k, wide, x) in (1usize..70, 1usize..3)
            .prop_flat_map(|(k, w)| (Just(k), Just(w), values(k * w * 2 * TILE)))
    ) {
        if !here() {
            return Ok(());
        }
        let n = wide * 2 * TILE;
        let row = |i: usize| &x[i * n..][..n];
        let fast = Packed::from_rows_with(k, n, row, true);
        let plain = Packed::from_rows_with(k, n, row, false);
        prop_assert_eq!(&*fast.tiles, &*plain.tiles);
    }

    /// Attention's weights: the same bf16 values but where the two
    /// polynomials round apart (a unit in the last place), zeros in the same
    /// places, and each row's sum the sum of its own rounded weights.
    #[test]
    fn weights_by_the_instructions_are_the_plain_ones_to_a_unit(
        (n, scores) in (1usize..70)
            .prop_flat_map(|n| (Just(n), prop::collection::vec(-30.0f32..30.0, n * n.next_multiple_of(2 * TILE))))
    ) {
        if !here() {
            return Ok(());
        }
        let keys = n.next_multiple_of(2 * TILE);
        let rows = n.next_multiple_of(TILE);
        let (mut fast_sums, mut plain_sums) = (vec![0f32; n], vec![0f32; n]);
        // Buffers of ones, so that a weight left unwritten shows.
        let (mut fast, mut plain) = (vec![0x3F80u16; rows * keys], vec![0x3F80u16; rows * keys]);
        exponentials(&scores, n, keys, 0.2, &mut fast_sums, true, &mut fast);
        exponentials(&scores, n, keys, 0.2, &mut plain_sums, false, &mut plain);
        let written = n.div_ceil(TILE) * TILE * keys;
        for (a, b) in fast[..written].iter().zip(&plain[..written]) {
            prop_assert!(a.abs_diff(*b) <= 1, "{a:#06x} against {b:#06x}");
            prop_assert_eq!(*a == 0, *b == 0);
        }
        let chunks = keys / DEPTH;
        for (weights, sums) in [(&fast, &fast_sums), (&plain, &plain_sums)] {
            for (i, sum) in sums.iter().enumerate() {
                let row = (i / TILE) * chunks * TILE * DEPTH + (i % TILE) * DEPTH;
                let own: f64 = (0..keys)
                    .map(|j| widen(weights[row + (j / DEPTH) * TILE * DEPTH + j % DEPTH]))
                    .sum();
                prop_assert!((f64::from(*sum) - own).abs() <= 1e-5 * own, "{sum} against {own}");
            }
        }
    }
}

/// A row of scores that holds a not a number gives weights that are not
/// numbers, as the plain pass's do, so that no passage's vector is made of
/// some of its tokens silently.
#[test]
fn a_score_that_is_not_a_number_spoils_its_row_on_both_paths() {
    if !here() {
        return;
    }
    let (n, keys) = (3, 2 * TILE);
    let mut scores = vec![0.5f32; n * keys];
    scores[keys + 1] = f32::NAN;
    for fast in [true, false] {
        let mut sums = vec![0f32; n];
        let mut weights = vec![0u16; TILE * keys];
        exponentials(&scores, n, keys, 1.0, &mut sums, fast, &mut weights);
        assert!(sums[0].is_finite() && sums[2].is_finite(), "fast: {fast}");
        assert!(sums[1].is_nan(), "fast: {fast}");
    }
}

/// What the tiles load and store begins on a cache line, whatever its size
/// and however it was made: a row 16 bytes past a line spans two, and the
/// tiles ran at less than half their rate (BENCHMARKS.md, "Tiles on a cache
/// line").
#[test]
fn every_buffer_the_tiles_touch_begins_on_a_cache_line() {
    let on_a_line = |p: *const u16| (p as usize).is_multiple_of(64);
    for len in [1, 31, 32, 33, 1000, 100_000, 1 << 20] {
        let zeroed: Lines<u16> = Lines::zeroed(len);
        // SAFETY: every value is written.
        let written = unsafe {
            Lines::<f32>::written(len, |out| {
                out.iter_mut().for_each(|v| {
                    v.write(1.0);
                });
                Ok::<(), ()>(())
            })
        }
        .unwrap();
        assert!(on_a_line(zeroed.as_ptr()), "{len} zeros");
        assert!(on_a_line(zeroed.clone().as_ptr()), "{len} zeros cloned");
        assert!(
            (written.as_ptr() as usize).is_multiple_of(64),
            "{len} written"
        );
        assert!(written.iter().all(|v| *v == 1.0));
    }
    let x = vec![0.5f32; 40 * 64];
    assert!(on_a_line(in_tiles_with(&x, 40, 64, 48, 64, false).as_ptr()));
    let packed = Packed::from_columns_with(64, 40, |j| &x[j * 64..][..64], false);
    assert!(on_a_line(packed.tiles.as_ptr()));
}
