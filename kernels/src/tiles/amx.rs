//! The tiles' own instructions for `tiles.rs`: a configuration, a loop of
//! `tdpbf16ps` over `k` with four tiles of sums held, and their stores.

use std::arch::asm;

use super::{DEPTH, TILE, WIDE};
use crate::int8::amx::{TileConfig, release};

/// The tiles' shapes, all eight 16 rows × 64 bytes: `tmm0..3` hold sums,
/// `tmm4..5` rows of `A`, `tmm6..7` packed `B`.
static CONFIG: TileConfig = TileConfig::new(&[(64, 16); 8]);

/// Sums start from these where a product has no bias: one tile row of zeros,
/// loaded into every row (a stride of 0), on a cache line as the rest.
#[repr(C, align(64))]
struct Zeros([f32; TILE]);
static ZEROS: Zeros = Zeros([0.0; TILE]);

/// `out[i * stride + j]` = row `i` of `a` · column `j` of `packed` +
/// `bias[j]` (none where `bias` is `None`).
///
/// # Safety
///
/// As `multiply` checks: the tiles are available, `a` is `rows × k` (`rows` a
/// multiple of 16, `k` of 32), `packed` is `k × n` packed (`n` a multiple of
/// 32), `bias` (if any) holds `n` values, and `out` holds `rows` rows of
/// `stride` from where it points, `n` of each written.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tiles(
    a: &[u16],
    rows: usize,
    k: usize,
    packed: &[u16],
    n: usize,
    bias: Option<&[f32]>,
    out: *mut f32,
    stride: usize,
) {
    let chunks = k / DEPTH;
    // The loops below count chunks down to zero: none would be 2^64 rounds.
    assert!(chunks > 0, "a product over no values");
    let out_row = stride * 4;
    // SAFETY: the caller found the tiles lent (this function's condition).
    unsafe { CONFIG.load() };
    for col in (0..n).step_by(WIDE) {
        // Two groups of sixteen columns, each `k × 16` packed in turn.
        let b = packed[col * k..].as_ptr();
        let b_next = packed[(col + TILE) * k..].as_ptr();
        // Each tile of sums starts as its sixteen columns' bias in every row,
        // so that no pass over the output adds it afterwards.
        let start = match bias {
            Some(bias) => [bias[col..].as_ptr(), bias[col + TILE..].as_ptr()],
            None => [ZEROS.0.as_ptr(); 2],
        };
        let mut row = 0;
        while row < rows {
            // SAFETY: rows `row..row + 16` (or 32) of `a` and of the output,
            // columns `col..col + 32` of `packed` and of the output: within
            // what the caller holds.
            unsafe {
                let a = a[row * k..].as_ptr();
                let c = out.add(row * stride + col);
                if row + WIDE <= rows {
                    two_by_two(a, b, b_next, start, chunks, c, out_row);
                    row += WIDE;
                } else {
                    one_by_two(a, b, b_next, start, chunks, c, out_row);
                    row += TILE;
                }
            }
        }
    }
    // SAFETY: as for `load` above; the thread then holds no tile state.
    unsafe { release() };
}

/// 32 rows by 32 columns: four tiles of sums kept across every `k`, stored once.
///
/// # Safety
///
/// The tiles are configured; `a` has two groups of sixteen rows in tiles,
/// `chunks` tiles each, one after the other; `b` and `b_next` have `chunks`
/// packed tiles; `start` two rows of sixteen sums to begin from; `c` has 32
/// rows of `c_row` bytes, 128 bytes of each written.
#[inline(always)]
unsafe fn two_by_two(
    a: *const u16,
    b: *const u16,
    b_next: *const u16,
    start: [*const f32; 2],
    chunks: usize,
    c: *mut f32,
    c_row: usize,
) {
    // SAFETY: as for this function.
    unsafe {
        asm!(
            "tileloadd tmm0, [{s0} + {same} * 1]",
            "tileloadd tmm1, [{s1} + {same} * 1]",
            "tileloadd tmm2, [{s0} + {same} * 1]",
            "tileloadd tmm3, [{s1} + {same} * 1]",
            "2:",
            "tileloadd tmm4, [{a0} + {row} * 1]",
            "tileloadd tmm6, [{b0} + {row} * 1]",
            "tileloadd tmm7, [{b1} + {row} * 1]",
            "tileloadd tmm5, [{a1} + {row} * 1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {a0}, 1024",
            "add {a1}, 1024",
            "add {b0}, 1024",
            "add {b1}, 1024",
            "dec {chunks}",
            "jnz 2b",
            "tilestored [{c0} + {c_row} * 1], tmm0",
            "tilestored [{c0} + {c_row} * 1 + 64], tmm1",
            "tilestored [{c1} + {c_row} * 1], tmm2",
            "tilestored [{c1} + {c_row} * 1 + 64], tmm3",
            a0 = inout(reg) a => _,
            a1 = inout(reg) a.byte_add(chunks * 1024) => _,
            b0 = inout(reg) b => _,
            b1 = inout(reg) b_next => _,
            chunks = inout(reg) chunks => _,
            row = in(reg) 64usize,
            s0 = in(reg) start[0],
            s1 = in(reg) start[1],
            same = in(reg) 0usize,
            c0 = in(reg) c,
            c1 = in(reg) c.byte_add(TILE * c_row),
            c_row = in(reg) c_row,
            out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
            out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _,
            options(nostack),
        );
    }
}

/// 16 rows by 32 columns, for the last rows when they are not 32.
///
/// # Safety
///
/// As for [`two_by_two`], with one group of sixteen rows of `a` and `c`.
#[inline(always)]
unsafe fn one_by_two(
    a: *const u16,
    b: *const u16,
    b_next: *const u16,
    start: [*const f32; 2],
    chunks: usize,
    c: *mut f32,
    c_row: usize,
) {
    // SAFETY: as for this function.
    unsafe {
        asm!(
            "tileloadd tmm0, [{s0} + {same} * 1]",
            "tileloadd tmm1, [{s1} + {same} * 1]",
            "2:",
            "tileloadd tmm4, [{a0} + {row} * 1]",
            "tileloadd tmm6, [{b0} + {row} * 1]",
            "tileloadd tmm7, [{b1} + {row} * 1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "add {a0}, 1024",
            "add {b0}, 1024",
            "add {b1}, 1024",
            "dec {chunks}",
            "jnz 2b",
            "tilestored [{c0} + {c_row} * 1], tmm0",
            "tilestored [{c0} + {c_row} * 1 + 64], tmm1",
            a0 = inout(reg) a => _,
            b0 = inout(reg) b => _,
            b1 = inout(reg) b_next => _,
            chunks = inout(reg) chunks => _,
            row = in(reg) 64usize,
            s0 = in(reg) start[0],
            s1 = in(reg) start[1],
            same = in(reg) 0usize,
            c0 = in(reg) c,
            c_row = in(reg) c_row,
            out("tmm0") _, out("tmm1") _, out("tmm4") _, out("tmm6") _, out("tmm7") _,
            options(nostack),
        );
    }
}
