//! The model's weight matrices on Deskbell's own kernels (`deskbell-kernels`).
//!
//! A matrix the file holds as Q4_1 (most layers of a 4-bit GGUF) stays in that
//! layout, so generating a token reads 0.625 bytes a weight, not 1.125; every
//! other matrix is converted at load to 8-bit blocks. A step that reads a few
//! tokens (generating, or the end of a prompt whose prefix is cached) rounds them
//! to 8-bit blocks and multiplies block by block in integers, with SIMD picked at
//! run time. A step that reads many tokens (a prompt) quantizes the tokens to 8
//! bits too and multiplies in integers where the CPU has AVX-512 VNNI; elsewhere it
//! expands one matrix at a time to f32 and lets candle's GEMM multiply, which is
//! faster than the few-token kernel when each weight meets many tokens.
//! So the model is held in about a quarter of the memory of f32 weights, and no
//! path falls back to scalar code on a portable build (see DECISIONS.md, "The
//! embedded model's own kernels").

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{CpuStorage, Device, Error, Result, Storage, Tensor};
use deskbell_kernels::{BLOCK, Q4Matrix, Q8Matrix};

/// From this many tokens in one step, a layer multiplies with the 8-bit product of
/// many tokens (or, without AVX-512 VNNI, expands its weights for the GEMM), and
/// attention uses candle's matrix products (`decoder.rs`).
pub const BATCH_FROM_TOKENS: usize = 8;

/// A weight matrix of `rows` outputs by `cols` inputs.
#[derive(Clone, Debug)]
pub enum Linear {
    Quantized(Arc<Q8Matrix>),
    /// A matrix the file holds in 4-bit Q4_1 blocks, kept so.
    Q4(Arc<Q4Matrix>),
    /// A matrix whose rows are not whole blocks stays f32 (no common model has one).
    Dense(Tensor),
}

impl Linear {
    pub fn from_qtensor(weights: QTensor) -> Result<Self> {
        if weights.dtype() == GgmlDType::Q4_1
            && let Ok((rows, cols)) = weights.shape().dims2()
            && cols.is_multiple_of(BLOCK)
        {
            let matrix = Q4Matrix::from_q4_1(rows, cols, &weights.data()?);
            return Ok(Linear::Q4(Arc::new(matrix.map_err(Error::wrap)?)));
        }
        Self::from_tensor(weights.dequantize(&Device::Cpu)?)
    }

    fn from_tensor(values: Tensor) -> Result<Self> {
        let (rows, cols) = values.dims2()?;
        if !cols.is_multiple_of(BLOCK) {
            return Ok(Linear::Dense(values));
        }
        // Read in place: a copy would double the largest tensor's memory at load.
        let (storage, layout) = values.storage_and_layout();
        let matrix = match (&*storage, layout.contiguous_offsets()) {
            (Storage::Cpu(CpuStorage::F32(data)), Some((start, end))) => {
                Q8Matrix::quantize(rows, cols, &data[start..end])
            }
            _ => Q8Matrix::quantize(rows, cols, &values.flatten_all()?.to_vec1::<f32>()?),
        };
        Ok(Linear::Quantized(Arc::new(matrix.map_err(Error::wrap)?)))
    }

    /// The rows for `ids`, one after another, as an embedding table.
    pub fn embed(&self, ids: &[u32]) -> Result<Vec<f32>> {
        match self {
            Linear::Dense(table) => {
                let ids = Tensor::new(ids, &Device::Cpu)?;
                table.index_select(&ids, 0)?.flatten_all()?.to_vec1::<f32>()
            }
            Linear::Quantized(table) => rows_of(ids, table.cols(), |id, row| table.row(id, row)),
            Linear::Q4(table) => rows_of(ids, table.cols(), |id, row| table.row(id, row)),
        }
    }

    /// The memory the weights take.
    pub fn bytes(&self) -> usize {
        match self {
            Linear::Quantized(m) => m.bytes(),
            Linear::Q4(m) => m.bytes(),
            Linear::Dense(t) => t.elem_count() * size_of::<f32>(),
        }
    }

    pub fn rows(&self) -> usize {
        match self {
            Linear::Quantized(m) => m.rows(),
            Linear::Q4(m) => m.rows(),
            Linear::Dense(t) => t.dims().first().copied().unwrap_or(0),
        }
    }

    /// The rows of `parts` one after another, as one matrix: in their own layout
    /// where all share one, else expanded and converted to 8-bit blocks.
    pub fn stack(parts: &[&Linear]) -> Result<Self> {
        let q8 = all_of(parts, |p| match p {
            Linear::Quantized(m) => Some(&**m),
            _ => None,
        });
        if let Some(matrices) = q8 {
            let matrix = Q8Matrix::stack(&matrices).map_err(Error::wrap)?;
            return Ok(Linear::Quantized(Arc::new(matrix)));
        }
        let q4 = all_of(parts, |p| match p {
            Linear::Q4(m) => Some(&**m),
            _ => None,
        });
        if let Some(matrices) = q4 {
            let matrix = Q4Matrix::stack(&matrices).map_err(Error::wrap)?;
            return Ok(Linear::Q4(Arc::new(matrix)));
        }
        let dense: Vec<Tensor> = parts.iter().map(|p| p.to_tensor()).collect::<Result<_>>()?;
        Self::from_tensor(Tensor::cat(&dense, 0)?)
    }

    fn to_tensor(&self) -> Result<Tensor> {
        match self {
            Linear::Dense(t) => Ok(t.clone()),
            Linear::Quantized(m) => {
                Tensor::from_vec(m.dequantize(), (m.rows(), m.cols()), &Device::Cpu)
            }
            Linear::Q4(m) => Tensor::from_vec(m.dequantize(), (m.rows(), m.cols()), &Device::Cpu),
        }
    }

    /// `x` holds `tokens` vectors of the matrix's width; returns `tokens × rows`.
    pub fn apply(&self, x: &[f32], tokens: usize) -> Result<Vec<f32>> {
        let few = tokens < BATCH_FROM_TOKENS;
        if !few && !deskbell_kernels::has_int8_product() {
            return self.expanded(x, tokens);
        }
        let mut out = vec![0f32; tokens * self.rows()];
        let done = match (self, few) {
            (Linear::Dense(_), _) => return self.expanded(x, tokens),
            (Linear::Quantized(m), true) => m.product_few(x, tokens, &mut out),
            (Linear::Quantized(m), false) => m.product(x, tokens, &mut out),
            (Linear::Q4(m), true) => m.product_few(x, tokens, &mut out),
            (Linear::Q4(m), false) => m.product(x, tokens, &mut out),
        };
        done.map_err(Error::wrap)?;
        Ok(out)
    }

    /// The product with the weights expanded to f32 and candle's GEMM: a dense
    /// matrix, or many tokens on a CPU without the 8-bit product.
    fn expanded(&self, x: &[f32], tokens: usize) -> Result<Vec<f32>> {
        let w = self.to_tensor()?;
        let x = Tensor::from_slice(x, (tokens, w.dim(1)?), &Device::Cpu)?;
        x.matmul(&w.t()?)?.flatten_all()?.to_vec1::<f32>()
    }
}

/// Each part's matrix of one layout, if every part has that layout.
fn all_of<'a, T>(
    parts: &[&'a Linear],
    pick: impl Fn(&'a Linear) -> Option<&'a T>,
) -> Option<Vec<&'a T>> {
    parts.iter().map(|p| pick(p)).collect()
}

/// The rows for `ids` of a table of `cols` columns, each expanded by `row`.
fn rows_of(
    ids: &[u32],
    cols: usize,
    row: impl Fn(usize, &mut [f32]) -> std::result::Result<(), deskbell_kernels::ShapeError>,
) -> Result<Vec<f32>> {
    let mut out = vec![0f32; ids.len() * cols];
    for (id, values) in ids.iter().zip(out.chunks_exact_mut(cols)) {
        row(*id as usize, values).map_err(Error::wrap)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 2654435761 + seed * 97) % 2000) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// A 4-bit matrix from the file stays 4-bit, and its product of a few tokens
    /// and of many agrees with its expanded weights within the tokens' rounding.
    #[test]
    fn a_4_bit_matrix_is_kept_and_multiplies_as_its_expanded_weights() {
        let (rows, cols) = (37, 96);
        let weights = Tensor::from_vec(values(rows * cols, 2), (rows, cols), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&weights, GgmlDType::Q4_1).unwrap();
        let linear = Linear::from_qtensor(q).unwrap();
        assert!(matches!(linear, Linear::Q4(_)));
        let stacked = Linear::stack(&[&linear, &linear]).unwrap();
        assert!(matches!(&stacked, Linear::Q4(m) if m.rows() == 2 * rows));
        agrees_with_expanded(&linear, cols, &[1, 3, BATCH_FROM_TOKENS, 40]);
    }

    /// Every strategy gives the same product within the rounding of the tokens to
    /// 8 bits, so a CPU without AVX-512 VNNI answers as this one does.
    #[test]
    fn few_tokens_many_tokens_and_expanded_weights_give_the_same_product() {
        let (rows, cols) = (37, 96);
        let weights = Tensor::from_vec(values(rows * cols, 1), (rows, cols), &Device::Cpu).unwrap();
        let linear = Linear::from_tensor(weights).unwrap();
        assert!(matches!(linear, Linear::Quantized(_)));
        agrees_with_expanded(
            &linear,
            cols,
            &[1, BATCH_FROM_TOKENS - 1, BATCH_FROM_TOKENS, 40],
        );
    }

    /// `linear`'s product of each number of tokens is its expanded weights' within
    /// the tokens' rounding to 8 bits: rounding 96 values within ±1 moves a
    /// product with weights within ±1 by at most 96 × 0.5 / 127; in practice far
    /// less.
    fn agrees_with_expanded(linear: &Linear, cols: usize, counts: &[usize]) {
        for &tokens in counts {
            let x = values(tokens * cols, tokens);
            let ours = linear.apply(&x, tokens).unwrap();
            let expanded = linear.expanded(&x, tokens).unwrap();
            let worst = ours
                .iter()
                .zip(&expanded)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 0.05, "{tokens} tokens: differ by {worst}");
        }
    }
}
