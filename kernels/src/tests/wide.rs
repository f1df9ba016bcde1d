//! `Q8Wide::product` against `Q8Matrix::product`: the same outputs, bit for bit.

use proptest::prelude::*;

use super::*;

/// Whether `Q8Wide::pack` should have packed `m`: AVX-512 VNNI, and no AMX-INT8
/// taking its rows (rows in sixteens are the test's own).
fn packs_here(m: &Q8Matrix) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        has_int8_product() && crate::int8::PanelWeights::amx(m).is_none()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = m;
        false
    }
}

/// Rows in sixteens, columns in blocks, tokens across several panels.
fn wide_case() -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<f32>)> {
    (1..5usize, 1..6usize, 1..40usize).prop_flat_map(|(groups, blocks, tokens)| {
        let (rows, cols) = (16 * groups, blocks * BLOCK);
        (
            Just(rows),
            Just(cols),
            Just(tokens),
            prop::collection::vec(-4f32..4.0, rows * cols),
            prop::collection::vec(-4f32..4.0, tokens * cols),
        )
    })
}

proptest! {
    #[test]
    fn the_wide_product_gives_the_panel_product_bit_for_bit(
        (rows, cols, tokens, values, x) in wide_case()
    ) {
        let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        let Some(wide) = Q8Wide::pack(&m) else {
            // Made only where the CPU has AVX-512 VNNI and no AMX-INT8.
            prop_assert!(!packs_here(&m));
            return Ok(());
        };
        let mut want = vec![f32::NAN; rows * tokens];
        m.product(&x, tokens, &mut want).unwrap();
        // One worker takes every row; two or three share a question's rows.
        for threads in [1, 2, 3] {
            let mut got = vec![f32::NAN; rows * tokens];
            on_pool(threads, || wide.product(&x, tokens, &mut got)).unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                prop_assert!(g.to_bits() == w.to_bits(), "{threads} workers, output {i}: {g} against {w}");
            }
        }
    }
}

#[test]
fn the_wide_product_keeps_the_panel_product_s_edges() {
    let weights: Vec<f32> = (0..16 * 2 * BLOCK)
        .map(|i| (i % 97) as f32 / 10.0 - 4.0)
        .collect();
    let m = Q8Matrix::quantize(16, 2 * BLOCK, &weights).unwrap();
    let Some(wide) = Q8Wide::pack(&m) else {
        assert!(!packs_here(&m));
        return;
    };
    // Token 0: zeros, then ones; token 1: a NaN; token 2: an infinity; the rest zeros.
    let mut x = vec![0f32; 20 * 2 * BLOCK];
    x[BLOCK..2 * BLOCK].fill(1.0);
    x[2 * BLOCK + 5] = f32::NAN;
    x[5 * BLOCK + 1] = f32::INFINITY;
    let mut want = vec![f32::NAN; 16 * 20];
    m.product(&x, 20, &mut want).unwrap();
    let mut got = vec![f32::NAN; 16 * 20];
    wide.product(&x, 20, &mut got).unwrap();
    let same = |a: &f32, b: &f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    assert!(
        got.iter().zip(&want).all(|(a, b)| same(a, b)),
        "{got:?} against {want:?}"
    );
    assert!(got[16..32].iter().all(|v| v.is_nan()) && got[48..].iter().all(|v| *v == 0.0));
    assert_eq!(
        wide.product(&x[1..], 20, &mut got),
        Err(ShapeError::Length {
            expected: 20 * 2 * BLOCK,
            got: 20 * 2 * BLOCK - 1
        })
    );
    assert_eq!(wide.product(&[], 0, &mut []), Ok(()));
}

#[test]
fn only_rows_in_sixteens_are_packed() {
    let m = Q8Matrix::quantize(17, BLOCK, &[1.0; 17 * BLOCK]).unwrap();
    assert!(Q8Wide::pack(&m).is_none());
    let empty = Q8Matrix::quantize(0, BLOCK, &[]).unwrap();
    assert!(Q8Wide::pack(&empty).is_none());
}
