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
mod lines;
#[cfg(target_arch = "x86_64")]
mod simd;
#[cfg(all(test, target_arch = "x86_64"))]
mod tests;
pub use attention::attention;
pub use lines::{Lines, Plain};

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

/// `x` rounded to the nearest bf16, ties to even; not a number stays one, and a
/// number too small to be normal is zero (of its sign), as AVX-512's
/// `vcvtne2ps2bf16` gives and as the tiles take such inputs anyway.
#[inline(always)]
pub(crate) fn bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) >> 16;
    if x.is_nan() {
        ((bits >> 16) | 0x40) as u16
    } else if x.is_subnormal() {
        (bits >> 16) as u16 & 0x8000
    } else {
        rounded as u16
    }
}

/// `n` rows of `k` values (row `i` at `x[i * stride..]`) in bf16, in the
/// order the tiles load them: for each sixteen rows and each 32 columns, a 1 KB
/// tile of sixteen rows of 64 bytes, so that every tile load reads one stretch
/// of memory. Zeros pad to `rows × k` (multiples of 16 and 32).
fn in_tiles(x: &[f32], n: usize, stride: usize, rows: usize, k: usize) -> Lines<u16> {
    in_tiles_with(x, n, stride, rows, k, fast_here())
}

/// Whether the passes around the tiles take AVX-512's bf16 instructions
/// (`simd.rs`); the plain Rust below gives the same values bit for bit. Each
/// pass that takes a `fast` switch checks it against this again, so that no
/// caller can run the instructions where the CPU lacks them.
fn fast_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    return simd::here();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// [`in_tiles`], with the instructions of `simd.rs` where `fast`.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn in_tiles_with(
    x: &[f32],
    n: usize,
    stride: usize,
    rows: usize,
    k: usize,
    fast: bool,
) -> Lines<u16> {
    // The raw writes below stay within `rows × k` only for these shapes.
    assert!(
        n <= rows && rows.is_multiple_of(TILE) && k.is_multiple_of(DEPTH),
        "rows in tiles of a shape they cannot take"
    );
    let fast = fast && fast_here();
    let chunks = k / DEPTH;
    let at = |i: usize, c: usize| ((i / TILE) * chunks + c) * TILE * DEPTH + (i % TILE) * DEPTH;
    // Writes the `n` rows' values through `a`, which holds `rows × k`.
    let fill = |a: *mut u16| {
        for i in 0..n {
            for (c, values) in x[i * stride..][..k].chunks_exact(DEPTH).enumerate() {
                // SAFETY: chunk `c` of row `i` < `n` ≤ `rows` is within `rows × k`.
                unsafe { rounded(values, a.add(at(i, c)), fast) };
            }
        }
    };
    // Zeros for the padding rows past `n`.
    let pad = |a: *mut u16| {
        for i in n..rows {
            for c in 0..chunks {
                // SAFETY: within `rows × k`, as above.
                unsafe { a.add(at(i, c)).write_bytes(0, DEPTH) };
            }
        }
    };
    // Not zeroed first, since every value is written: each row's `k` values,
    // then the padding rows' zeros (zeroing whole buffers was a twentieth of
    // a passage).
    // SAFETY: as that says.
    let written = unsafe {
        Lines::written(rows * k, |a| {
            let a = a.as_mut_ptr().cast::<u16>();
            fill(a);
            pad(a);
            Ok::<(), std::convert::Infallible>(())
        })
    };
    match written {
        Ok(a) => a,
        Err(never) => match never {},
    }
}

/// 32 values rounded to bf16 into `out`.
///
/// # Safety
///
/// `values` holds 32 values and `out` room for them, and `fast` is set only
/// where `simd::here()`.
#[inline(always)]
unsafe fn rounded(values: &[f32], out: *mut u16, fast: bool) {
    #[cfg(target_arch = "x86_64")]
    if fast {
        // SAFETY: `fast` only where the CPU has the instructions; 32 values
        // each way.
        unsafe { simd::row(values.as_ptr(), out) };
        return;
    }
    let _ = fast;
    for (j, v) in values.iter().enumerate() {
        // SAFETY: within the room the caller gave.
        unsafe { out.add(j).write(bf16(*v)) };
    }
}

/// A `k × n` right-hand side packed for the tiles, zeros added to make `k` and
/// `n` multiples of 32.
#[derive(Clone, Debug)]
struct Packed {
    k: usize,
    n: usize,
    tiles: Lines<u16>,
}

impl Packed {
    fn zeros(k: usize, n: usize) -> Packed {
        let (kp, np) = (k.next_multiple_of(DEPTH), n.next_multiple_of(WIDE));
        Packed {
            k: kp,
            n: np,
            tiles: Lines::zeroed(kp * np),
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
        Packed::from_columns_with(k, n, column, fast_here())
    }

    /// [`Packed::from_columns`], with the instructions of `simd.rs` where `fast`.
    fn from_columns_with<'a>(
        k: usize,
        n: usize,
        column: impl Fn(usize) -> &'a [f32],
        fast: bool,
    ) -> Packed {
        let mut packed = Packed::zeros(k, n);
        #[cfg(target_arch = "x86_64")]
        if k.is_multiple_of(DEPTH) && fast && fast_here() {
            for j in 0..n {
                let tile = (j / TILE) * packed.k * TILE;
                for (c, values) in column(j)[..k].chunks_exact(DEPTH).enumerate() {
                    let dest = &mut packed.tiles[tile + c * TILE * DEPTH..][..TILE * DEPTH];
                    // SAFETY: the CPU has the instructions; 32 values, a whole
                    // tile, and `j % 16` < 16.
                    unsafe { simd::key(values.as_ptr(), dest.as_mut_ptr(), j % TILE) };
                }
            }
            return packed;
        }
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
        Packed::from_rows_with(k, n, row, fast_here())
    }

    /// [`Packed::from_rows`], with the instructions of `simd.rs` where `fast`.
    fn from_rows_with<'a>(
        k: usize,
        n: usize,
        row: impl Fn(usize) -> &'a [f32],
        fast: bool,
    ) -> Packed {
        let mut packed = Packed::zeros(k, n);
        let group = packed.k * TILE;
        #[cfg(target_arch = "x86_64")]
        if n.is_multiple_of(WIDE) && fast && fast_here() {
            // A token past the last (`k` odd) pairs with zeros, as the
            // padding does.
            let zeros = if k % 2 == 1 {
                vec![0f32; n]
            } else {
                Vec::new()
            };
            for i in (0..k).step_by(2) {
                let at = Packed::row_at(i);
                let second = if i + 1 < k { row(i + 1) } else { &zeros[..] };
                for (g, (first, second)) in row(i)[..n]
                    .chunks_exact(WIDE)
                    .zip(second[..n].chunks_exact(WIDE))
                    .enumerate()
                {
                    let (low, high) = packed.tiles[2 * g * group + at..].split_at_mut(group);
                    // SAFETY: the CPU has the instructions; 32 values each,
                    // and a tile row of room in each group from `at`.
                    unsafe {
                        simd::value_pair(
                            first.as_ptr(),
                            second.as_ptr(),
                            low.as_mut_ptr(),
                            high[..2 * TILE].as_mut_ptr(),
                        )
                    };
                }
            }
            return packed;
        }
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
    pub fn product(
        &self,
        x: &[f32],
        tokens: usize,
        bias: &[f32],
    ) -> Result<Lines<f32>, ShapeError> {
        crate::check_len(tokens * self.cols, x.len())?;
        if !bias.is_empty() {
            crate::check_len(self.rows, bias.len())?;
        }
        if tokens == 0 {
            return Ok(Lines::zeroed(0));
        }
        let padded = tokens.next_multiple_of(TILE);
        let a = in_tiles(x, tokens, self.cols, padded, self.cols);
        // Not zeroed first: the tiles write every value (a tenth of a
        // passage's time went to zeroing buffers).
        // SAFETY: when `multiply` succeeds the tiles wrote all `padded` rows of
        // `packed.n` = `rows` columns (a multiple of 32): every value.
        let mut out = unsafe {
            Lines::written(padded * self.rows, |out| {
                let bias = (!bias.is_empty()).then_some(bias);
                multiply(&a, padded, &self.packed, bias, out, self.rows, 0)
            })?
        };
        out.truncate(tokens * self.rows);
        Ok(out)
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

/// `out[i * stride + at + j]` = row `i` of `a` · column `j` of `packed` (+
/// `bias[j]` where there is one), for every row of `a` (`rows × packed.k`,
/// bf16 in tiles, `rows` a multiple of 16) and column of `packed`. Checks
/// every length, then runs the tiles.
fn multiply(
    a: &[u16],
    rows: usize,
    packed: &Packed,
    bias: Option<&[f32]>,
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
    if out.len() < (rows - 1) * stride + at + n || bias.is_some_and(|b| b.len() != n) {
        return Err(shape());
    }
    // Elsewhere nothing is written, so `product` must not take it as done.
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    return Err(ShapeError::NoTiles);
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    // SAFETY: `available` found the tiles and Linux lent them; every tile load
    // reads within `a` (rows × k), `packed` (k × n) and `bias` (n), and every
    // store writes within `out`, as checked above.
    unsafe {
        amx::tiles(
            a,
            rows,
            k,
            &packed.tiles,
            n,
            bias,
            out[at..].as_mut_ptr().cast(),
            stride,
        )
    };
    Ok(())
}
