//! [`Q8Matrix::product_few`]: a few tokens (a generated one) rounded to 8-bit
//! blocks and multiplied by 8-bit rows block by block in integers (`q8_x86.rs`
//! where the CPU has AVX2, plain Rust elsewhere).

use multiversion::multiversion;

#[cfg(target_arch = "x86_64")]
use crate::q8_x86;
use crate::{BLOCK, Q8Matrix, ShapeError, check_len, tokens};

impl Q8Matrix {
    /// The product of [`Q8Matrix::matmul`] with the tokens rounded to 8-bit
    /// blocks (as [`Q8Matrix::product`] rounds them), multiplied block by block in
    /// integers: generating a token, where `matmul` spent more on widening each
    /// weight to f32 than on reading it.
    pub fn product_few(&self, x: &[f32], tokens: usize, out: &mut [f32]) -> Result<(), ShapeError> {
        check_len(tokens * self.cols, x.len())?;
        check_len(tokens * self.rows, out.len())?;
        if tokens == 0 || self.rows == 0 {
            return Ok(());
        }
        let x = tokens::Quantized::of(x);
        let bpr = self.blocks_per_row();
        tokens::each_row_and_token(self.rows, tokens, out, |r, t| {
            let (row, token) = (r * bpr..(r + 1) * bpr, t * bpr..(t + 1) * bpr);
            self.dot_quantized(row, &x.quants[token.clone()], &x.scales[token])
        });
        Ok(())
    }

    /// The rows' blocks `row` · a token's quantized blocks.
    fn dot_quantized(&self, row: std::ops::Range<usize>, xq: &[[i8; BLOCK]], xd: &[f32]) -> f32 {
        let (ws, wq) = (&self.scales[row.clone()], &self.quants[row]);
        #[cfg(target_arch = "x86_64")]
        if let Some(dot) = q8_x86::dot() {
            // SAFETY: `dot` returns a kernel only where the CPU has its features.
            return unsafe { dot(ws, wq, xq, xd) };
        }
        dot_i8_blocks(ws, wq, xq, xd)
    }
}

/// Blocks of 8-bit weights · blocks of an 8-bit token, in plain Rust compiled for
/// several targets.
#[multiversion(targets("x86_64+avx2+fma", "aarch64+neon"))]
fn dot_i8_blocks(ws: &[f32], wq: &[[i8; BLOCK]], xq: &[[i8; BLOCK]], xd: &[f32]) -> f32 {
    let mut total = 0f32;
    for ((ws, wq), (xq, xd)) in ws.iter().zip(wq).zip(xq.iter().zip(xd)) {
        let sum: i32 = wq
            .iter()
            .zip(xq)
            .map(|(w, x)| i32::from(*w) * i32::from(*x))
            .sum();
        total += ws * xd * sum as f32;
    }
    total
}

/// Each kernel this CPU runs for [`Q8Matrix::product_few`]'s rows, the portable one
/// first: row `row` · token `x`.
#[cfg(test)]
pub(crate) fn every_q8_kernel(m: &Q8Matrix, row: usize, x: &[f32]) -> Vec<(&'static str, f32)> {
    let x = tokens::Quantized::of(x);
    let bpr = m.blocks_per_row();
    let at = row * bpr..(row + 1) * bpr;
    let (ws, wq) = (&m.scales[at.clone()], &m.quants[at]);
    #[allow(unused_mut)]
    let mut all = vec![("portable", dot_i8_blocks(ws, wq, &x.quants, &x.scales))];
    #[cfg(target_arch = "x86_64")]
    for (name, dot) in q8_x86::all() {
        // SAFETY: `all` lists only kernels whose features the CPU has.
        all.push((name, unsafe { dot(ws, wq, &x.quants, &x.scales) }));
    }
    all
}
