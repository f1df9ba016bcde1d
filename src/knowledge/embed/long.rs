//! A long text's layers (a passage at ingest): f32 products on the GEMM
//! (`deskbell_kernels::dense`), on the calling worker alone, since ingest runs
//! one passage on each worker.

use deskbell_kernels::dense::{Strided, StridedMut, gemm};
use deskbell_kernels::elementwise::softmax;

/// `x · Wᵀ + bias` for `n` tokens: `weight` is row-major, one row per output
/// (as the model file stores a linear layer), `bias` one value per output.
pub fn linear(weight: &[f32], bias: &[f32], x: &[f32], n: usize) -> anyhow::Result<Vec<f32>> {
    let rows = bias.len();
    anyhow::ensure!(
        rows > 0 && weight.len().is_multiple_of(rows),
        "a layer's weight does not fit its bias"
    );
    let cols = weight.len() / rows;
    // The bias in every token's row, which the product adds to.
    let mut out = bias.repeat(n);
    gemm(
        StridedMut::rows(&mut out, n, rows),
        Strided::rows(x, n, cols),
        Strided::transposed(weight, rows, cols),
        true,
    )?;
    Ok(out)
}

/// Every token attends to every token, head by head; `qkv` holds each token's
/// query, key and value one after another (`n × 3d`). Each head's queries, keys
/// and values are read in place through strides.
pub fn attention(qkv: &[f32], n: usize, d: usize, heads: usize) -> anyhow::Result<Vec<f32>> {
    anyhow::ensure!(
        heads > 0 && d.is_multiple_of(heads) && qkv.len() == n * 3 * d,
        "the attention's buffers do not fit"
    );
    let size = d / heads;
    let scale = 1.0 / (size as f32).sqrt();
    let mut out = vec![0f32; n * d];
    let mut scores = vec![0f32; n * n];
    let part = |offset: usize, rows: usize, cols: usize, row_stride, col_stride| Strided {
        data: &qkv[offset..],
        rows,
        cols,
        row_stride,
        col_stride,
    };
    for h in 0..heads {
        let at = h * size;
        let queries = part(at, n, size, 3 * d, 1);
        let keys_t = part(d + at, size, n, 1, 3 * d);
        gemm(StridedMut::rows(&mut scores, n, n), queries, keys_t, false)?;
        for row in scores.chunks_exact_mut(n) {
            softmax(row, scale);
        }
        let values = part(2 * d + at, n, size, 3 * d, 1);
        let context = StridedMut {
            data: &mut out[at..],
            rows: n,
            cols: size,
            row_stride: d,
            col_stride: 1,
        };
        gemm(context, Strided::rows(&scores, n, n), values, false)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gemm_attention_matches_the_few_token_loop() {
        let (n, d, heads) = (60, 64, 4);
        let qkv: Vec<f32> = (0..n * 3 * d)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let many = attention(&qkv, n, d, heads).unwrap();
        let few = super::super::short::attention(&qkv, n, d, heads).unwrap();
        for (a, b) in many.iter().zip(&few) {
            assert!((a - b).abs() < 1e-4, "{a} against {b}");
        }
        assert!(attention(&qkv[1..], n, d, heads).is_err());
    }
}
