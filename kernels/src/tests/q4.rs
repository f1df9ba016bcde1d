//! The 4-bit matrix (`q4.rs`): every path gives the f64 product of the file's
//! weights, to within the rounding of the tokens to 8 bits.

use half::f16;
use proptest::prelude::*;

use super::within_rounding;
use crate::{BLOCK, Q4_1_BYTES, Q4Matrix, ShapeError};

/// Q4_1 blocks as a GGUF file holds them: `d` and `m` as f16, then the nibbles.
fn blocks(n: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        (0f32..0.5, -4f32..1.0, prop::array::uniform16(any::<u8>())),
        n,
    )
    .prop_map(|blocks| {
        let mut bytes = Vec::with_capacity(blocks.len() * Q4_1_BYTES);
        for (d, m, q) in blocks {
            bytes.extend(f16::from_f32(d).to_bits().to_le_bytes());
            bytes.extend(f16::from_f32(m).to_bits().to_le_bytes());
            bytes.extend(q);
        }
        bytes
    })
}

/// Rows, columns, tokens, the file's bytes and the tokens' values.
fn case(
    tokens: std::ops::Range<usize>,
) -> impl Strategy<Value = (usize, usize, usize, Vec<u8>, Vec<f32>)> {
    case_in(1..70, 1..20, tokens)
}

/// As [`case`], with the rows and blocks a row from the given ranges.
fn case_in(
    rows: std::ops::Range<usize>,
    per_row: std::ops::Range<usize>,
    tokens: std::ops::Range<usize>,
) -> impl Strategy<Value = (usize, usize, usize, Vec<u8>, Vec<f32>)> {
    (rows, per_row, tokens).prop_flat_map(|(rows, per_row, tokens)| {
        let cols = per_row * BLOCK;
        (
            Just(rows),
            Just(cols),
            Just(tokens),
            blocks(rows * per_row),
            prop::collection::vec(-4f32..4.0, tokens * cols),
        )
    })
}

proptest! {
    #[test]
    fn a_4_bit_block_expands_to_d_times_its_nibble_plus_m(bytes in blocks(3)) {
        let m = Q4Matrix::from_q4_1(1, 3 * BLOCK, &bytes).unwrap();
        let w = m.dequantize();
        let mut row = vec![0f32; 3 * BLOCK];
        m.row(0, &mut row).unwrap();
        prop_assert_eq!(&row, &w);
        for (b, block) in bytes.chunks_exact(Q4_1_BYTES).enumerate() {
            let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
            let min = f16::from_le_bytes([block[2], block[3]]).to_f32();
            for j in 0..BLOCK / 2 {
                let byte = block[4 + j];
                prop_assert_eq!(w[b * BLOCK + j], d * f32::from(byte & 0x0F) + min);
                prop_assert_eq!(w[b * BLOCK + j + 16], d * f32::from(byte >> 4) + min);
            }
        }
    }

    #[test]
    fn a_4_bit_product_of_a_few_tokens_is_within_their_rounding(
        (rows, cols, tokens, bytes, x) in case(1..8)
    ) {
        let m = Q4Matrix::from_q4_1(rows, cols, &bytes).unwrap();
        let mut out = vec![f32::NAN; rows * tokens];
        m.product_few(&x, tokens, &mut out).unwrap();
        within_rounding(&m.dequantize(), &x, (rows, cols, tokens), &out)?;
    }

    #[test]
    fn every_4_bit_kernel_the_cpu_runs_gives_the_portable_kernels_product(
        (rows, cols, _tokens, bytes, x) in case(1..2)
    ) {
        let m = Q4Matrix::from_q4_1(rows, cols, &bytes).unwrap();
        for row in 0..rows {
            let all = crate::q4::every_kernel(&m, row, &x);
            let (_, portable) = all[0];
            for (name, got) in &all[1..] {
                // The same integer sums; only the f32 additions' order differs.
                prop_assert!((got - portable).abs() <= 1e-4 * (1.0 + portable.abs()), "{name}: {got} against {portable}");
            }
        }
    }

    #[test]
    fn a_4_bit_product_of_many_tokens_is_within_their_rounding(
        (rows, cols, tokens, bytes, x) in case(8..41)
    ) {
        let m = Q4Matrix::from_q4_1(rows, cols, &bytes).unwrap();
        let mut out = vec![f32::NAN; rows * tokens];
        m.product(&x, tokens, &mut out).unwrap();
        within_rounding(&m.dequantize(), &x, (rows, cols, tokens), &out)?;
    }
}

#[test]
fn stacked_4_bit_matrices_keep_their_rows_in_order() {
    let block = |d: f32| {
        let mut b = f16::from_f32(d).to_bits().to_le_bytes().to_vec();
        b.extend(f16::from_f32(0.5).to_bits().to_le_bytes());
        b.extend([0x21; BLOCK / 2]);
        b
    };
    let a = Q4Matrix::from_q4_1(1, BLOCK, &block(1.0)).unwrap();
    let b = Q4Matrix::from_q4_1(2, BLOCK, &[block(2.0), block(3.0)].concat()).unwrap();
    let stacked = Q4Matrix::stack(&[&a, &b]).unwrap();
    assert_eq!(stacked.rows(), 3);
    let firsts: Vec<f32> = stacked.dequantize().chunks(BLOCK).map(|r| r[0]).collect();
    assert_eq!(firsts, [1.5, 2.5, 3.5]);
    assert_eq!(stacked.bytes(), 3 * 22);
}

#[test]
fn a_4_bit_matrix_that_does_not_fit_its_bytes_or_blocks_is_refused() {
    assert_eq!(
        Q4Matrix::from_q4_1(1, 48, &[0; 40]),
        Err(ShapeError::Columns(48))
    );
    assert_eq!(
        Q4Matrix::from_q4_1(2, BLOCK, &[0; Q4_1_BYTES]),
        Err(ShapeError::Length {
            expected: 2 * Q4_1_BYTES,
            got: Q4_1_BYTES
        })
    );
    assert_eq!(
        Q4Matrix::from_q4_1(usize::MAX / 2, 64, &[]),
        Err(ShapeError::TooLarge {
            rows: usize::MAX / 2,
            cols: 64
        })
    );
    let m = Q4Matrix::from_q4_1(1, BLOCK, &[0; Q4_1_BYTES]).unwrap();
    let mut out = [0f32; 1];
    assert_eq!(
        m.row(1, &mut [0f32; BLOCK]),
        Err(ShapeError::Row { row: 1, rows: 1 })
    );
    assert!(m.product_few(&[0.0; BLOCK - 1], 1, &mut out).is_err());
    assert!(m.product(&[0.0; BLOCK], 2, &mut out).is_err());
}

#[test]
fn a_token_that_is_not_a_number_gives_no_number_through_a_4_bit_row() {
    let mut bytes = f16::from_f32(1.0).to_bits().to_le_bytes().to_vec();
    bytes.extend(f16::from_f32(0.0).to_bits().to_le_bytes());
    bytes.extend([0x11; BLOCK / 2]);
    let m = Q4Matrix::from_q4_1(1, BLOCK, &bytes).unwrap();
    let mut x = vec![1f32; BLOCK];
    x[3] = f32::NAN;
    let mut out = [0f32; 1];
    m.product_few(&x, 1, &mut out).unwrap();
    assert!(out[0].is_nan(), "{out:?}");
}

proptest! {
    /// As for 8-bit rows: a panel's 4-bit rows shared among workers give the
    /// very product of one worker (a chat prompt of a few new tokens).
    #[test]
    fn a_few_tokens_4_bit_rows_shared_among_workers_give_one_worker_s_product(
        (rows, cols, tokens, bytes, x) in case_in(64..140, 1..4, 1..40)
    ) {
        if !crate::has_int8_product() {
            return Ok(());
        }
        let m = Q4Matrix::from_q4_1(rows, cols, &bytes).unwrap();
        let mut alone = vec![f32::NAN; rows * tokens];
        super::on_pool(1, || m.product(&x, tokens, &mut alone)).unwrap();
        for threads in [2, 3] {
            let mut shared = vec![f32::NAN; rows * tokens];
            super::on_pool(threads, || m.product(&x, tokens, &mut shared)).unwrap();
            let same = alone.iter().zip(&shared).all(|(a, b)| a.to_bits() == b.to_bits());
            prop_assert!(same, "{threads} workers: {shared:?} against {alone:?}");
        }
    }
}
