//! `Q8Widened::product` against the same product in plain Rust, bit for bit;
//! and that product against `Q8Matrix::product` where the CPU has AVX-512 VNNI.

use proptest::prelude::*;

use super::*;
use crate::widened::{Q8Widened, portable};

/// Rows in eights (an odd number of groups too, which the kernel takes one
/// at a time), columns in blocks, tokens across several tiles and tasks.
fn widened_case() -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<f32>)> {
    (1..14usize, 1..6usize, 1..140usize).prop_flat_map(|(groups, blocks, tokens)| {
        let (rows, cols) = (8 * groups, blocks * BLOCK);
        (
            Just(rows),
            Just(cols),
            Just(tokens),
            prop::collection::vec(-4f32..4.0, rows * cols),
            prop::collection::vec(-4f32..4.0, tokens * cols),
        )
    })
}

fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn the_widened_product_gives_its_plain_sums_bit_for_bit(
        (rows, cols, tokens, values, x) in widened_case()
    ) {
        let mut m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        // A weight of -128, which a matrix from a model file may hold and
        // `quantize` never makes: its product is exact in 16 bits too.
        m.quants[0][0] = i8::MIN;
        // `pack` widens only where VNNI's product is missing; the kernel needs
        // AVX2 and FMA alone, so it is tested wherever they are.
        prop_assert_eq!(Q8Widened::pack(&m).is_some(), has_avx2() && !has_int8_product());
        if !has_avx2() {
            return Ok(());
        }
        let widened = Q8Widened::pack_for_tests(&m).unwrap();
        let want = portable(&widened, &x, tokens);
        for threads in [1, 2, 3] {
            let mut got = vec![f32::NAN; rows * tokens];
            on_pool(threads, || widened.product(&x, tokens, &mut got)).unwrap();
            prop_assert!(same(&got, &want), "{threads} workers: {got:?} against {want:?}");
        }
    }

    #[test]
    fn the_widened_sums_are_the_vnni_product_s_where_the_cpu_has_it(
        (rows, cols, tokens, values, x) in widened_case()
    ) {
        if !has_int8_product() {
            return Ok(());
        }
        let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        let widened = Q8Widened::pack_for_tests(&m).unwrap();
        let mut want = vec![f32::NAN; rows * tokens];
        m.product(&x, tokens, &mut want).unwrap();
        prop_assert!(same(&portable(&widened, &x, tokens), &want));
    }
}

#[test]
fn the_widened_product_keeps_the_panel_product_s_edges() {
    // Five groups of rows (a whole tile and one left over) and five blocks (a
    // whole chunk and one more), so the edge values meet the tile, the chunk
    // that goes on from stored sums, and the leftovers.
    let (rows, blocks, tokens) = (40, 5, 20);
    let cols = blocks * BLOCK;
    let weights: Vec<f32> = (0..rows * cols)
        .map(|i| (i % 97) as f32 / 10.0 - 4.0)
        .collect();
    let m = Q8Matrix::quantize(rows, cols, &weights).unwrap();
    let Some(widened) = Q8Widened::pack_for_tests(&m) else {
        return;
    };
    // Token 0: zeros, then ones in the last block; token 1: a NaN in its last
    // block; token 2: an infinity there; token 3: values too small to divide
    // by in every block; the rest zeros.
    let block = |t: usize, b: usize| (t * blocks + b) * BLOCK;
    let mut x = vec![0f32; tokens * cols];
    x[block(0, 4)..block(0, 5)].fill(1.0);
    x[block(1, 4) + 5] = f32::NAN;
    x[block(2, 4) + 1] = f32::INFINITY;
    x[block(3, 0)..block(4, 0)].fill(f32::MIN_POSITIVE / 4.0);
    let mut got = vec![f32::NAN; rows * tokens];
    widened.product(&x, tokens, &mut got).unwrap();
    assert!(same(&got, &portable(&widened, &x, tokens)));
    assert!(got[..rows].iter().all(|v| v.is_finite() && *v != 0.0));
    assert!(got[rows..3 * rows].iter().all(|v| v.is_nan()));
    assert!(got[3 * rows..].iter().all(|v| *v == 0.0));
    assert_eq!(
        widened.product(&x[1..], tokens, &mut got),
        Err(ShapeError::Length {
            expected: tokens * cols,
            got: tokens * cols - 1
        })
    );
    assert_eq!(widened.product(&[], 0, &mut []), Ok(()));
}

#[test]
fn only_rows_in_eights_are_widened() {
    let m = Q8Matrix::quantize(17, BLOCK, &[1.0; 17 * BLOCK]).unwrap();
    assert!(Q8Widened::pack(&m).is_none());
    let empty = Q8Matrix::quantize(0, BLOCK, &[]).unwrap();
    assert!(Q8Widened::pack(&empty).is_none());
}

#[test]
fn the_kernel_quantizes_as_the_panel_product_does_ties_included() {
    if !has_avx2() {
        return;
    }
    // A largest magnitude of 127 makes the step 1: halves are ties, which go to
    // the even integer. Then a NaN, an infinity, zeros, values too small to
    // divide by, and an ordinary block.
    let mut ties = [0f32; BLOCK];
    for (i, v) in ties.iter_mut().enumerate() {
        *v = i as f32 - 15.5;
    }
    ties[31] = -127.0;
    let mut nan = [1f32; BLOCK];
    nan[7] = f32::NAN;
    let mut inf = [1f32; BLOCK];
    inf[30] = f32::NEG_INFINITY;
    let ordinary: [f32; BLOCK] = std::array::from_fn(|i| (i as f32 * 0.37).sin() * 3.0);
    let blocks = [ties, nan, inf, [0.0; BLOCK], [1e-40; BLOCK], ordinary];
    let x: Vec<f32> = blocks.iter().flatten().copied().collect();
    // SAFETY: the CPU has AVX2 and FMA (checked above).
    let got = unsafe { crate::widened_x86::quantize(&x) };
    for (b, block) in blocks.iter().enumerate() {
        let (scale, q) = crate::widened::quantize_block(block);
        let pairs: Vec<i32> = q
            .as_chunks::<2>()
            .0
            .iter()
            .map(|p| i32::from(p[0] as i16 as u16) | (i32::from(p[1]) << 16))
            .collect();
        let same_scale = scale.to_bits() == got.scales[b].to_bits()
            || (scale.is_nan() && got.scales[b].is_nan());
        assert!(same_scale, "block {b}: {scale} against {}", got.scales[b]);
        if scale.is_finite() {
            assert_eq!(got.pairs[b].to_vec(), pairs, "block {b}");
        }
    }
    assert_eq!(
        got.pairs[0][0] & 0xffff,
        (-16i32) as u16 as i32,
        "-15.5 to -16"
    );
}
