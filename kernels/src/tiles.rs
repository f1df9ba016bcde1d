//! A passage's products on AMX tiles in bf16 (`tdpbf16ps`), for CPUs that have
//! AMX-BF16 (Intel Xeon since Sapphire Rapids): the encoder's four weight
//! products and attention's two, for texts of many tokens (SPEC §21's ingest).
//!
//! The 8-bit tiles (`int8/amx.rs`) must store their sums after every block of 32,
//! since each block has its own scale: the tile unit spent most of its time on
//! loads and stores and the product ran at 1.5× VNNI. bf16 values carry their own
//! exponent, so here the sums stay in the tiles across a whole row (every `k`),
//! four tiles of 16 × 16 sums at once, and are stored once, straight into the
//! output. Attention's products, f32 on the GEMM before, go to the same tiles.
//!
//! Rounding: every input is rounded to bf16 (8 bits of mantissa, to nearest
//! even) and the sums are f32. An 8-bit block keeps a small weight beside a large
//! one to within the large one's 1/254; bf16 keeps each to 1/512 of itself.
//!
//! Layouts: `A` is bf16 in tiles (`in_tiles`), `rows` a multiple of 16 and `k`
//! of 32 (zeros pad both). `B` is packed once (the weights at load): for each 16 columns and
//! each 32 values of `k`, a 1 KB tile whose row `p` holds, for each column, its
//! values `2p` and `2p + 1`, the pairs `tdpbf16ps` multiplies. The output is
//! row-major f32, written by the tiles' stores.

use std::mem::MaybeUninit;
use std::sync::OnceLock;

use multiversion::multiversion;

use crate::ShapeError;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx;
mod attention;
pub use attention::attention;

/// Rows of a tile, and columns of its f32 sums.
const TILE: usize = 16;

/// Values of `k` a tile row holds (64 bytes of bf16).
const DEPTH: usize = 32;

/// Columns multiplied together: two tiles of sixteen.
const WIDE: usize = 2 * TILE;

/// Whether passages' products run here: the CPU has AMX-BF16, Linux lends the
/// tiles, and `DESKBELL_AMX` is neither `off` nor `int8` (switches for measuring
/// one path against another on one build).
pub fn available() -> bool {
    static USABLE: OnceLock<bool> = OnceLock::new();
    *USABLE.get_or_init(|| {
        let asked = std::env::var("DESKBELL_AMX").unwrap_or_default();
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        if asked != "off" && asked != "int8" {
            // Leaf 7's EDX bit 22: AMX-BF16.
            return crate::int8::amx::cpu_has(22) && crate::int8::amx::lent();
        }
        let _ = asked;
        false
    })
}

/// `x` rounded to the nearest bf16, ties to even; not a number stays one.
#[inline(always)]
pub(crate) fn bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) >> 16;
    if x.is_nan() {
        ((bits >> 16) | 0x40) as u16
    } else {
        rounded as u16
    }
}

/// `n` rows of `used` values (row `i` at `x[i * stride..]`) in bf16, in the
/// order the tiles load them: for each sixteen rows and each 32 columns, a 1 KB
/// tile of sixteen rows of 64 bytes, so that every tile load reads one stretch
/// of memory. Zeros pad to `rows × k` (multiples of 16 and 32).
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn in_tiles(x: &[f32], n: usize, stride: usize, used: usize, rows: usize, k: usize) -> Vec<u16> {
    let mut a = vec![0u16; rows * k];
    let chunks = k / DEPTH;
    for i in 0..n {
        let row = &x[i * stride..][..used];
        let group = &mut a[(i / TILE) * chunks * TILE * DEPTH + (i % TILE) * DEPTH..];
        for (c, values) in row.chunks(DEPTH).enumerate() {
            let out = &mut group[c * TILE * DEPTH..][..values.len()];
            out.iter_mut().zip(values).for_each(|(o, v)| *o = bf16(*v));
        }
    }
    a
}

/// A `k × n` right-hand side packed for the tiles, zeros added to make `k` and
/// `n` multiples of 32.
#[derive(Clone, Debug)]
struct Packed {
    k: usize,
    n: usize,
    tiles: Vec<u16>,
}

impl Packed {
    fn zeros(k: usize, n: usize) -> Packed {
        let (kp, np) = (k.next_multiple_of(DEPTH), n.next_multiple_of(WIDE));
        Packed {
            k: kp,
            n: np,
            tiles: vec![0u16; kp * np],
        }
    }

    /// Where column `j`'s tiles begin, and its place in their rows.
    fn column_at(&self, j: usize) -> usize {
        (j / TILE) * self.k * TILE + 2 * (j % TILE)
    }

    /// Where row `i`'s values are in its tile: its pair's row and its place.
    fn row_at(i: usize) -> usize {
        (i / DEPTH) * DEPTH * TILE + (i % DEPTH / 2) * DEPTH + i % 2
    }

    /// `n` columns of `k` values each, column `j` being `column(j)`: a weight
    /// matrix's rows, or attention's keys.
    fn from_columns<'a>(k: usize, n: usize, column: impl Fn(usize) -> &'a [f32]) -> Packed {
        let mut packed = Packed::zeros(k, n);
        for j in 0..n {
            let at = packed.column_at(j);
            // A pair of values is one 32-bit lane of a tile row, a row 64 bytes on.
            for (p, pair) in column(j)[..k].chunks(2).enumerate() {
                let dest = at + (p / TILE) * DEPTH * TILE + (p % TILE) * DEPTH;
                for (o, v) in packed.tiles[dest..dest + pair.len()].iter_mut().zip(pair) {
                    *o = bf16(*v);
                }
            }
        }
        packed
    }

    /// `k` rows of `n` values each, row `i` being `row(i)`: attention's values.
    fn from_rows<'a>(k: usize, n: usize, row: impl Fn(usize) -> &'a [f32]) -> Packed {
        let mut packed = Packed::zeros(k, n);
        let group = packed.k * TILE;
        for i in 0..k {
            let at = Packed::row_at(i);
            for (g, values) in row(i)[..n].chunks(TILE).enumerate() {
                let dest = &mut packed.tiles[g * group + at..];
                for (c, v) in values.iter().enumerate() {
                    dest[2 * c] = bf16(*v);
                }
            }
        }
        packed
    }
}

/// A linear layer's weight (`rows × cols`, one row per output, as a model file
/// stores it) packed for the tiles: `x · Wᵀ` for many tokens.
#[derive(Clone, Debug)]
pub struct Bf16Matrix {
    rows: usize,
    cols: usize,
    packed: Packed,
}

impl Bf16Matrix {
    /// Needs `rows` and `cols` to be multiples of 32 (every BERT width is).
    pub fn pack(rows: usize, cols: usize, values: &[f32]) -> Result<Bf16Matrix, ShapeError> {
        if cols == 0 || !cols.is_multiple_of(DEPTH) {
            return Err(ShapeError::Columns(cols));
        }
        if rows == 0 || !rows.is_multiple_of(WIDE) {
            return Err(ShapeError::Multiple {
                of: WIDE,
                got: rows,
            });
        }
        let expected = rows
            .checked_mul(cols)
            .ok_or(ShapeError::TooLarge { rows, cols })?;
        crate::check_len(expected, values.len())?;
        let packed = Packed::from_columns(cols, rows, |r| &values[r * cols..][..cols]);
        Ok(Bf16Matrix { rows, cols, packed })
    }

    /// `out[t * rows + r]` = row `r` · token `t` + `bias[r]` (none if `bias`
    /// is empty) for `tokens` tokens of `x`, on the calling thread. Only where
    /// [`available`]: an error elsewhere.
    pub fn product(&self, x: &[f32], tokens: usize, bias: &[f32]) -> Result<Vec<f32>, ShapeError> {
        crate::check_len(tokens * self.cols, x.len())?;
        if !bias.is_empty() {
            crate::check_len(self.rows, bias.len())?;
        }
        if tokens == 0 {
            return Ok(Vec::new());
        }
        let padded = tokens.next_multiple_of(TILE);
        let a = in_tiles(x, tokens, self.cols, self.cols, padded, self.cols);
        let len = padded * self.rows;
        // Not zeroed first: the tiles write every value (a tenth of a
        // passage's time went to zeroing buffers).
        let mut out = Vec::with_capacity(len);
        multiply(
            &a,
            padded,
            &self.packed,
            &mut out.spare_capacity_mut()[..len],
            self.rows,
            0,
        )?;
        // SAFETY: `multiply` succeeded, so the tiles wrote all `padded` rows of
        // `packed.n` = `rows` columns (a multiple of 32), each of the `len`.
        unsafe { out.set_len(len) };
        out.truncate(tokens * self.rows);
        if !bias.is_empty() {
            add_bias(&mut out, bias);
        }
        Ok(out)
    }
}

/// Each row of `out` (`bias.len()` wide) plus `bias`.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn add_bias(out: &mut [f32], bias: &[f32]) {
    for row in out.chunks_exact_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

/// An initialised buffer seen as one the tiles may write.
///
/// # Safety
///
/// Only initialised values may be written through the result (`multiply`
/// writes f32 sums), so that `out` stays initialised.
unsafe fn writable(out: &mut [f32]) -> &mut [MaybeUninit<f32>] {
    // SAFETY: `MaybeUninit<f32>` has `f32`'s layout; the caller keeps it
    // initialised.
    unsafe { &mut *(out as *mut [f32] as *mut [MaybeUninit<f32>]) }
}

/// `out[i * stride + at + j]` = row `i` of `a` · column `j` of `packed`, for
/// every row of `a` (`rows × packed.k`, bf16 in tiles, `rows` a multiple of 16) and
/// column of `packed`. Checks every length, then runs the tiles.
fn multiply(
    a: &[u16],
    rows: usize,
    packed: &Packed,
    out: &mut [MaybeUninit<f32>],
    stride: usize,
    at: usize,
) -> Result<(), ShapeError> {
    let (k, n) = (packed.k, packed.n);
    let shape = || ShapeError::Product {
        left: (rows, k),
        right: (k, n),
        out: (rows, stride),
    };
    if !available() {
        return Err(ShapeError::NoTiles);
    }
    if !rows.is_multiple_of(TILE) || rows == 0 || k == 0 || at + n > stride {
        return Err(shape());
    }
    crate::check_len(rows * k, a.len())?;
    if out.len() < (rows - 1) * stride + at + n {
        return Err(shape());
    }
    // Elsewhere nothing is written, so `product` must not take it as done.
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    return Err(ShapeError::NoTiles);
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    // SAFETY: `available` found the tiles and Linux lent them; every tile load
    // reads within `a` (rows × k) and `packed` (k × n), and every store writes
    // within `out`, as checked above.
    unsafe {
        amx::tiles(
            a,
            rows,
            k,
            &packed.tiles,
            n,
            out[at..].as_mut_ptr().cast(),
            stride,
        )
    };
    Ok(())
}
