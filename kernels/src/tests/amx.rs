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
    /// the same order, so the products are equal bit for bit: odd and even
    /// blocks a row, part panels, one panel's rows shared among workers, and
    /// many panels.
    #[test]
    fn amx_tiles_give_the_vnni_product_bit_for_bit(
        (rows, cols, tokens, values, x) in (1usize..7, 1usize..8, 1usize..50)
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
            return Ok(());
        }
        for threads in [1, 2, 3] {
            let (tiles, lanes) = both(&m, &x, tokens, threads);
            prop_assert!(same_bits(&tiles, &lanes), "{threads} workers: {tiles:?} against {lanes:?}");
        }
    }
}

/// A token that is not a finite number gives products that are not numbers, on
/// the tiles as on VNNI, and leaves the other tokens' products as they were.
#[test]
fn a_token_that_is_not_a_number_spoils_only_its_own_products_on_the_tiles() {
    let (rows, cols, tokens) = (32, 4 * BLOCK, 20);
    let values: Vec<f32> = (0..rows * cols).map(|i| (i % 13) as f32 - 6.0).collect();
    let m = Q8Matrix::quantize(rows, cols, &values).unwrap();
    if m.amx().is_none() {
        eprintln!("no AMX here; skipped");
        return;
    }
    let mut x: Vec<f32> = (0..tokens * cols).map(|i| (i % 7) as f32 * 0.25).collect();
    x[3 * cols + 5] = f32::NAN;
    x[17 * cols + 40] = f32::INFINITY;
    let (tiles, lanes) = both(&m, &x, tokens, 1);
    for (t, (tiles, lanes)) in tiles.chunks(rows).zip(lanes.chunks(rows)).enumerate() {
        if t == 3 || t == 17 {
            assert!(tiles.iter().all(|v| v.is_nan()), "token {t}: {tiles:?}");
        } else {
            assert!(
                same_bits(tiles, lanes),
                "token {t}: {tiles:?} against {lanes:?}"
            );
        }
    }
}
