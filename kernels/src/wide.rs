//! An 8-bit matrix packed for a product of many tokens on AVX-512 VNNI with the
//! weights, not the tokens, across a register's lanes: a passage's products at
//! ingest (SPEC §21), where every weight meets hundreds of tokens.
//!
//! [`Q8Matrix::product`] (`int8.rs`) puts sixteen tokens in a register and
//! broadcasts each weight dword from a general register to multiply them: eight
//! broadcasts beside eight `vpdpbusd` a block, and each row's sixteen results
//! then written to sixteen tokens' outputs one by one. Here a register holds
//! sixteen rows' dwords, loaded once a block and used for sixteen tokens, and each
//! token's dword is the instruction's own broadcast operand, read from memory; a
//! token's sixteen results are one store. The sums are the same integers, scaled
//! and added in the same order, so the outputs are `product`'s bit for bit.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed ones and only the signed side
//! may be broadcast, so here the weights carry the +128 (`w ^ 0x80` as a byte)
//! and each token's block its correction, −128 × the sum of its bytes.

#[cfg(target_arch = "x86_64")]
use rayon::prelude::*;

use crate::{BLOCK, Q8Matrix, ShapeError, check_len};

/// Rows whose dwords fill one register: one 32-bit lane each.
pub(crate) const ROWS: usize = 16;

/// Dwords in a block.
pub(crate) const GROUPS: usize = BLOCK / 4;

/// A [`Q8Matrix`] repacked for [`Q8Wide::product`]; only made where the CPU has
/// AVX-512 VNNI and no AMX-INT8, and the rows are a multiple of sixteen.
#[derive(Clone, Debug)]
pub struct Q8Wide {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// For each sixteen rows, each block and each of its eight dwords: the
    /// sixteen rows' four bytes, each plus 128.
    pub(crate) quants: Vec<[u8; 4 * ROWS]>,
    /// For each sixteen rows and each block, the sixteen rows' scales.
    pub(crate) scales: Vec<[f32; ROWS]>,
}

impl Q8Wide {
    /// `m` repacked, or `None` where the product would not run here: no AVX-512
    /// VNNI, rows that are not a whole number of sixteen (or none), or a CPU
    /// with AMX-INT8, where `product` takes `m`'s rows to the tiles.
    pub fn pack(m: &Q8Matrix) -> Option<Q8Wide> {
        if !crate::has_int8_product() || m.rows == 0 || !m.rows.is_multiple_of(ROWS) {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        if crate::int8::PanelWeights::amx(m).is_some() {
            return None;
        }
        let bpr = m.blocks_per_row();
        let mut quants = vec![[0u8; 4 * ROWS]; m.rows * bpr * GROUPS / ROWS];
        let mut scales = vec![[0f32; ROWS]; m.rows * bpr / ROWS];
        for r in 0..m.rows {
            let (group, lane) = (r / ROWS, r % ROWS);
            for b in 0..bpr {
                let (at, k) = (group * bpr + b, r * bpr + b);
                scales[at][lane] = m.scales[k];
                for (g, dword) in m.quants[k].chunks_exact(4).enumerate() {
                    let dest = &mut quants[at * GROUPS + g][4 * lane..4 * lane + 4];
                    for (d, w) in dest.iter_mut().zip(dword) {
                        *d = (*w as u8) ^ 0x80;
                    }
                }
            }
        }
        Some(Q8Wide {
            rows: m.rows,
            cols: m.cols,
            quants,
            scales,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `out[t * rows + r]` = row `r` · token `t`, with the tokens quantized to
    /// 8-bit blocks as [`Q8Matrix::product`] quantizes them, and the same
    /// outputs. Each task takes sixteen tokens and every row; where there are
    /// fewer panels of sixteen than workers (a question), each worker takes a
    /// part of the rows instead, as `product` shares them (here from two groups
    /// of sixteen rows on; `product` from 64 rows).
    pub fn product(&self, x: &[f32], tokens: usize, out: &mut [f32]) -> Result<(), ShapeError> {
        check_len(tokens * self.cols, x.len())?;
        check_len(tokens * self.rows, out.len())?;
        if tokens == 0 {
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        {
            use crate::int8::{PANEL, wide};
            let workers = rayon::current_num_threads();
            let groups = self.rows / ROWS;
            if tokens.div_ceil(PANEL) < workers && groups > 1 {
                let part = groups.div_ceil(workers);
                for (out, x) in out
                    .chunks_mut(PANEL * self.rows)
                    .zip(x.chunks(PANEL * self.cols))
                {
                    // SAFETY: `pack` made this matrix only where the CPU has the
                    // instructions `wide` is compiled for.
                    let panel = unsafe { wide::quantized(self, x) };
                    let mut parts = crate::int8::split_rows(out, self.rows, part * ROWS);
                    parts.par_iter_mut().enumerate().for_each(|(i, tokens)| {
                        let first = i * part;
                        let groups = first..(first + part).min(groups);
                        // SAFETY: as above.
                        unsafe { wide::groups(self, &panel, groups, tokens) }
                    });
                }
                return Ok(());
            }
            out.par_chunks_mut(PANEL * self.rows)
                .zip(x.par_chunks(PANEL * self.cols))
                .for_each(|(out, x)| {
                    // SAFETY: as above.
                    unsafe {
                        let panel = wide::quantized(self, x);
                        let mut tokens: Vec<&mut [f32]> = out.chunks_mut(self.rows).collect();
                        wide::groups(self, &panel, 0..groups, &mut tokens);
                    }
                });
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("Q8Wide::pack makes none off x86_64");
        #[cfg(target_arch = "x86_64")]
        Ok(())
    }
}
