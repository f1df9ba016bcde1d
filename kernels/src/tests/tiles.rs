//! The bf16 product on AMX tiles against products in f64: of the same values
//! rounded to bf16 (so only the order of the f32 sums differs), and attention
//! against attention in f64 on the values as given.

use proptest::prelude::*;

use crate::tiles::{self, Bf16Matrix, bf16};

fn widen(v: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(v) << 16))
}

/// Whether the tiles run here; the tests below say so when they cannot.
fn tiles_here() -> bool {
    let here = tiles::available();
    if !here {
        eprintln!("no AMX-BF16 tiles on this machine; the tile product is not tested");
    }
    here
}

fn values(len: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-2.0f32..2.0, len)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any whole number of tiles' rows and columns, and any number of tokens
    /// (the last rows padded, the last odd tile of sixteen rows on its own).
    /// The products of two bf16 values are exact in f32; what is left is the
    /// f32 sums' rounding (at most 128 of them here: within 1e-5 of the sum of
    /// magnitudes), where a value in the wrong place would be off by its own
    /// size.
    #[test]
    fn the_tile_product_is_the_product_of_the_rounded_values(
        (rows, cols, tokens, w, x, bias) in (1usize..4, 1usize..5, 1usize..70)
            .prop_flat_map(|(groups, chunks, tokens)| {
                let (rows, cols) = (groups * 32, chunks * 32);
                let bias = prop_oneof![Just(Vec::new()), values(rows)];
                (Just(rows), Just(cols), Just(tokens), values(rows * cols), values(tokens * cols), bias)
            })
    ) {
        if !tiles_here() {
            return Ok(());
        }
        let m = Bf16Matrix::pack(rows, cols, &w).unwrap();
        // Each output's own bias (or none): the sums start from it, so a
        // column or a tile of sums given another's shows.
        let out = m.product(&x, tokens, &bias).unwrap();
        prop_assert_eq!(out.len(), tokens * rows);
        for t in 0..tokens {
            for r in 0..rows {
                let terms = (0..cols).map(|k| widen(bf16(x[t * cols + k])) * widen(bf16(w[r * cols + k])));
                let start = bias.get(r).map_or(0.0, |b| f64::from(*b));
                let (exact, size) = terms.fold((start, start.abs()), |(s, a), v| (s + v, a + v.abs()));
                let ours = f64::from(out[t * rows + r]);
                prop_assert!((ours - exact).abs() <= 1e-5 * size + 1e-9, "token {t} row {r}: {ours} against {exact}");
            }
        }
    }

    /// Attention's two products in bf16 stay within a few hundredths of the
    /// values' scale of attention in f64, for one token to several tiles.
    #[test]
    fn attention_on_the_tiles_is_attention(
        (n, qkv) in (1usize..70).prop_flat_map(|n| (Just(n), values(n * 3 * 64)))
    ) {
        if !tiles_here() {
            return Ok(());
        }
        let (d, heads) = (64, 2);
        let ours = tiles::attention(&qkv, n, d, heads).unwrap();
        prop_assert_eq!(ours.len(), n * d);
        let theirs = reference(&qkv, n, d, heads);
        for (a, b) in ours.iter().zip(&theirs) {
            prop_assert!((f64::from(*a) - b).abs() < 0.03, "{a} against {b}");
        }
    }
}

fn reference(qkv: &[f32], n: usize, d: usize, heads: usize) -> Vec<f64> {
    let size = d / heads;
    let at = |t: usize, which: usize, h: usize, c: usize| {
        f64::from(qkv[t * 3 * d + which * d + h * size + c])
    };
    let mut out = vec![0.0; n * d];
    for h in 0..heads {
        for i in 0..n {
            let scores: Vec<f64> = (0..n)
                .map(|j| {
                    (0..size)
                        .map(|c| at(i, 0, h, c) * at(j, 1, h, c))
                        .sum::<f64>()
                        / (size as f64).sqrt()
                })
                .collect();
            let top = scores.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
            let sum: f64 = e.iter().sum();
            for c in 0..size {
                out[i * d + h * size + c] = (0..n).map(|j| e[j] / sum * at(j, 2, h, c)).sum();
            }
        }
    }
    out
}

#[test]
fn bf16_rounds_to_nearest_even_and_keeps_the_specials() {
    assert_eq!(bf16(1.0), 0x3F80);
    // 1 + 2^-8 is halfway between 1 and the next bf16: ties go to even (1).
    assert_eq!(bf16(1.0 + 1.0 / 256.0), 0x3F80);
    // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to even.
    assert_eq!(bf16(1.0 + 3.0 / 256.0), 0x3F82);
    assert_eq!(bf16(-2.0), 0xC000);
    assert_eq!(bf16(f32::INFINITY), 0x7F80);
    assert_eq!(
        bf16(f32::MAX),
        0x7F80,
        "the largest f32 rounds up to infinity"
    );
    // A number too small to be normal is zero of its sign, as the
    // instruction that rounds 32 at once gives.
    assert_eq!(bf16(1e-40), 0x0000);
    assert_eq!(bf16(-1e-40), 0x8000);
    assert_eq!(bf16(f32::MIN_POSITIVE), 0x0080);
    assert!(widen(bf16(f32::NAN)).is_nan());
    assert!(widen(bf16(-f32::NAN)).is_nan());
}

#[test]
fn shapes_the_tiles_cannot_take_are_refused() {
    assert!(Bf16Matrix::pack(32, 48, &[0.0; 32 * 48]).is_err());
    assert!(Bf16Matrix::pack(48, 32, &[0.0; 48 * 32]).is_err());
    assert!(Bf16Matrix::pack(32, 32, &[0.0; 10]).is_err());
    assert!(
        tiles::attention(&[0.0; 3 * 48], 1, 48, 3).is_err(),
        "heads 16 wide"
    );
    assert!(tiles::attention(&[0.0; 10], 1, 64, 2).is_err());
    if tiles_here() {
        let m = Bf16Matrix::pack(32, 32, &[1.0; 32 * 32]).unwrap();
        assert!(m.product(&[1.0; 31], 1, &[]).is_err());
        assert!(m.product(&[1.0; 32], 1, &[1.0; 31]).is_err());
        assert_eq!(*m.product(&[1.0; 32], 1, &[]).unwrap(), [32.0; 32]);
        assert!(m.product(&[], 0, &[]).unwrap().is_empty());
        assert_eq!(*m.product(&[1.0; 32], 1, &[0.5; 32]).unwrap(), [32.5; 32]);
    }
}
