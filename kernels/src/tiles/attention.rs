//! Attention on the tiles: each head's scores (queries by keys) and context
//! (weights by values) are two bf16 products (`tiles.rs`).
//!
//! The softmax is taken apart so that each row of scores is read twice, not
//! five times: once for its largest value, once to take each exponential, add
//! it to the row's sum and write it in bf16 where the tiles load it. Each row
//! of the context is divided by its sum afterwards (the head's 32 values, where
//! normalising the weights would touch every key).

use multiversion::multiversion;

use super::{DEPTH, Lines, Packed, TILE, WIDE, in_tiles, multiply, writable};
use crate::ShapeError;
use crate::elementwise::{exp, lanes};

/// Every token attends to every token, head by head, on the tiles: `qkv` holds
/// each of `n` tokens' query, key and value one after another (`n × 3d`); the
/// result is `n × d`. Heads must be a multiple of 32 wide (BERT's are 32 or 64).
pub fn attention(qkv: &[f32], n: usize, d: usize, heads: usize) -> Result<Lines<f32>, ShapeError> {
    if heads == 0 || !d.is_multiple_of(heads) || !(d / heads).is_multiple_of(DEPTH) || n == 0 {
        return Err(ShapeError::Heads);
    }
    crate::check_len(n * 3 * d, qkv.len())?;
    let size = d / heads;
    let scale = 1.0 / (size as f32).sqrt();
    let rows = n.next_multiple_of(TILE);
    let keys = n.next_multiple_of(WIDE);
    let mut out = Lines::zeroed(rows * d);
    let mut scores = Lines::zeroed(rows * keys);
    let mut sums = vec![0f32; n];
    // One buffer of weights for every head: each writes all its rows (the
    // padding rows stay zeros).
    let mut weights = Lines::zeroed(rows * keys);
    for h in 0..heads {
        let at = h * size;
        let part = |token: usize, which: usize| &qkv[token * 3 * d + which * d + at..][..size];
        let queries = in_tiles(&qkv[at..], n, 3 * d, rows, size);
        let keys_t = Packed::from_columns(size, n, |j| part(j, 1));
        // SAFETY: the tiles write f32 sums only.
        multiply(
            &queries,
            rows,
            &keys_t,
            None,
            unsafe { writable(&mut scores) },
            keys,
            0,
        )?;
        exponentials(
            &scores,
            n,
            keys,
            scale,
            &mut sums,
            super::fast_here(),
            &mut weights,
        );
        let values = Packed::from_rows(n, size, |j| part(j, 2));
        // SAFETY: as above.
        multiply(
            &weights,
            rows,
            &values,
            None,
            unsafe { writable(&mut out) },
            d,
            at,
        )?;
        for (row, sum) in out.chunks_exact_mut(d).zip(&sums) {
            let inverse = 1.0 / sum;
            row[at..at + size].iter_mut().for_each(|v| *v *= inverse);
        }
    }
    out.truncate(n * d);
    Ok(out)
}

/// `e^((score − the row's largest) × scale)` for the first `n` scores of each
/// of the first `n` rows (`keys` wide), in bf16 and in tiles (`in_tiles`'s
/// layout) into those rows of `a`, zeros past `n` in each; each row's sum into
/// `sums`. Where `fast`, on `simd.rs`'s instructions.
// Indexing by lane is what keeps each lane in its own register.
#[allow(clippy::needless_range_loop)]
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
pub(super) fn exponentials(
    scores: &[f32],
    n: usize,
    keys: usize,
    scale: f32,
    sums: &mut [f32],
    fast: bool,
    a: &mut [u16],
) {
    // The instructions' loads and stores stay within a row only for these.
    assert!(
        keys.is_multiple_of(WIDE) && n <= keys,
        "weights of a shape the tiles cannot take"
    );
    let chunks = keys / DEPTH;
    #[cfg(target_arch = "x86_64")]
    if fast && super::simd::here() {
        for (i, (row, sum)) in scores.chunks_exact(keys).zip(sums.iter_mut()).enumerate() {
            let tile_row = (i / TILE) * chunks * TILE * DEPTH + (i % TILE) * DEPTH;
            let dest = &mut a[tile_row..][..(chunks - 1) * TILE * DEPTH + DEPTH];
            // SAFETY: the CPU has the instructions; `row` holds `keys` scores
            // (a multiple of 32, at least `n`), and `dest` reaches the row's
            // last tile row.
            *sum = unsafe { super::simd::weights(row.as_ptr(), n, keys, scale, dest.as_mut_ptr()) };
        }
        return;
    }
    for (i, (row, sum)) in scores.chunks_exact(keys).zip(sums.iter_mut()).enumerate() {
        let top = lanes(&row[..n], f32::MIN, f32::max);
        let tile_row = (i / TILE) * chunks * TILE * DEPTH + (i % TILE) * DEPTH;
        let mut acc = [0f32; TILE];
        // Sixteen values at a time, in arrays of a known length, so that the
        // compiler keeps each step in one register.
        let (sixteens, _) = row.as_chunks::<TILE>();
        for (s, values) in sixteens.iter().enumerate() {
            let (c, half) = (s / 2, s % 2);
            let first = s * TILE;
            let mut e = [0f32; TILE];
            for l in 0..TILE {
                e[l] = exp((values[l] - top) * scale);
            }
            // Keys past the last are padding (one branch a sixteen, not one
            // a key, which the compiler would not turn into a mask).
            let valid = n.saturating_sub(first);
            if valid < TILE {
                e[valid..].fill(0.0);
            }
            let dest = &mut a[tile_row + c * TILE * DEPTH + half * TILE..][..TILE];
            // The sum is of the weights as rounded, the ones the context
            // is made of, so that they sum to one exactly as used.
            for l in 0..TILE {
                let rounded = super::bf16(e[l]);
                dest[l] = rounded;
                acc[l] += f32::from_bits(u32::from(rounded) << 16);
            }
        }
        *sum = acc.iter().sum();
    }
}
