//! The 8-bit product on AMX tiles against the same product on VNNI.

use proptest::prelude::*;

use super::on_pool;
use crate::int8::{self, PanelWeights};
use crate::{BLOCK, Q8Matrix};

/// A matrix whose rows never take AMX: every call goes to `vpdpbusd`.
struct OnVnni<'a>(&'a Q8Matrix);

impl PanelWeights for OnVnni<'_> {
    const OFFSET: bool = false;
    fn rows(&self) -> usize {
        self.0.rows()
    }
    fn blocks_per_row(&self) -> usize {
        self.0.blocks_per_row()
    }
    fn dwords(&self, k: usize) -> ([i32; BLOCK / 4], i32) {
        self.0.dwords(k)
    }
    fn scale_min(&self, k: usize) -> (f32, f32) {
        self.0.scale_min(k)
    }
}

/// Both products of `m` by `x` on a pool of `threads` workers.
fn both(m: &Q8Matrix, x: &[f32], tokens: usize, threads: usize) -> (Vec<f32>, Vec<f32>) {
    let mut tiles = vec![f32::NAN; m.rows() * tokens];
    let mut lanes = vec![f32::NAN; m.rows() * tokens];
    on_pool(threads, || {
        // SAFETY: the callers run this only where `m.amx()` is some, so where
        // the CPU has VNNI too (`amx::available` requires it).
        unsafe {
            int8::product(m, x, tokens, &mut tiles);
            int8::product(&OnVnni(m), x, tokens, &mut lanes);
        }
    });
    (tiles, lanes)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
}

proptest! {
    /// The tiles' sums are the integer sums `vpdpbusd` gives and are scaled in
    /// the same order, so the products are equal bit for bit: one to thirteen
    /// blocks a row, part panels, one panel's rows shared among workers, and
    /// many panels.
    #[test]
    fn amx_tiles_give_the_vnni_product_bit_for_bit(
        (rows, cols, tokens, values, x) in (1usize..7, 1usize..14, 1usize..50)
            .prop_flat_map(|(groups, blocks, tokens)| {
                let (rows, cols) = (groups * 16, blocks * BLOCK);
                (
                    Just(rows),
                    Just(cols),
                    Just(tokens),
                    prop::collection::vec(-4f32..4.0, rows * cols),
                    prop::collection::vec(-4f32..4.0, tokens * cols),
                )
            })
    ) {
        let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
        if m.amx().is_none() {
            eprintln!("no AMX here (or DESKBELL_AMX=off); skipped");
            return Ok(());
        }
        for threads in [1, 2, 3] {
            let (tiles, lanes) = both(&m, &x, tokens, threads);
            prop_assert!(same_bits(&tiles, &lanes), "{threads} workers: {tiles:?} against {lanes:?}");
        }
    }
}

/// A token that is not a finite number gives products that are not numbers, on
/// the tiles as on VNNI, and leaves the other tokens' products as they were:
/// on many panels, and on one whose rows are shared among workers.
#[test]
fn a_token_that_is_not_a_number_spoils_only_its_own_products_on_the_tiles() {
    let (rows, cols) = (64, 4 * BLOCK);
    let values: Vec<f32> = (0..rows * cols).map(|i| (i % 13) as f32 - 6.0).collect();
    let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
    if m.amx().is_none() {
        eprintln!("no AMX here (or DESKBELL_AMX=off); skipped");
        return;
    }
    for (tokens, spoiled, threads) in [(20, [3, 17], 1), (10, [0, 9], 2)] {
        let mut x: Vec<f32> = (0..tokens * cols).map(|i| (i % 7) as f32 * 0.25).collect();
        x[spoiled[0] * cols + 5] = f32::NAN;
        x[spoiled[1] * cols + 40] = f32::INFINITY;
        let (tiles, lanes) = both(&m, &x, tokens, threads);
        for (t, (tiles, lanes)) in tiles.chunks(rows).zip(lanes.chunks(rows)).enumerate() {
            if spoiled.contains(&t) {
                assert!(tiles.iter().all(|v| v.is_nan()), "token {t}: {tiles:?}");
            } else {
                assert!(
                    same_bits(tiles, lanes),
                    "token {t}: {tiles:?} against {lanes:?}"
                );
            }
        }
    }
}

/// A matrix whose rows are not a multiple of a tile's stays on VNNI, with its
/// tokens stored plus 128 as VNNI needs: its product is within the tokens'
/// rounding of the f64 one (a signed panel on VNNI would be 128 steps off).
#[test]
fn rows_not_a_multiple_of_sixteen_stay_on_vnni() {
    let (rows, cols, tokens) = (40, 2 * BLOCK, 18);
    let values: Vec<f32> = (0..rows * cols).map(|i| (i % 11) as f32 - 5.0).collect();
    let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
    assert!(m.amx().is_none());
    let x: Vec<f32> = (0..tokens * cols).map(|i| (i % 5) as f32 - 2.0).collect();
    let mut out = vec![f32::NAN; rows * tokens];
    on_pool(2, || m.product(&x, tokens, &mut out)).unwrap();
    super::within_rounding(&m.dequantize(), &x, (rows, cols, tokens), &out).unwrap();
}
