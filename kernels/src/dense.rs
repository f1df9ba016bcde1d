//! f32 matrix products on the `gemm` crate (the GEMM candle itself calls), behind
//! a safe view of strided slices that is checked before the product runs.
//!
//! For a passage to embed (SPEC §21): hundreds of tokens, so each weight meets
//! every token and an f32 GEMM runs near the CPU's peak. Through candle's BERT the
//! GEMM was a third of the time; the rest went to a fresh allocation per
//! operation (page faults) and its element-wise passes (issue 40). Strides let
//! attention read each head's queries, keys and values where the stacked product
//! wrote them, with no copy.

use crate::ShapeError;

/// A matrix in a slice: element `(i, j)` is `data[i * row_stride + j * col_stride]`.
#[derive(Clone, Copy, Debug)]
pub struct Strided<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

/// A matrix to write, laid out as [`Strided`].
#[derive(Debug)]
pub struct StridedMut<'a> {
    pub data: &'a mut [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a> Strided<'a> {
    /// A row-major `rows × cols` matrix.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Strided {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transpose of a row-major `rows × cols` matrix (`cols × rows`), without
    /// a copy: a linear layer's weight as the right-hand side of `x · Wᵀ`.
    pub fn transposed(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Strided {
            data,
            rows: cols,
            cols: rows,
            row_stride: 1,
            col_stride: cols,
        }
    }
}

impl<'a> StridedMut<'a> {
    /// A row-major `rows × cols` matrix.
    pub fn rows(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        StridedMut {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }
}

/// Checks that every element of the view lies in a slice of `len` values and
/// that the strides fit the pointer arithmetic's `isize`.
fn fits(
    len: usize,
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
) -> Result<(isize, isize), ShapeError> {
    let strides = (isize::try_from(rs), isize::try_from(cs));
    let (Ok(rs_i), Ok(cs_i)) = strides else {
        return Err(ShapeError::TooLarge { rows, cols });
    };
    if rows == 0 || cols == 0 {
        return Ok((rs_i, cs_i));
    }
    let last = (rows - 1)
        .checked_mul(rs)
        .zip((cols - 1).checked_mul(cs))
        .and_then(|(a, b)| a.checked_add(b));
    match last {
        // A slice never holds more than `isize::MAX` bytes, so `last` fits too.
        Some(last) if last < len => Ok((rs_i, cs_i)),
        Some(last) => Err(ShapeError::Length {
            expected: last.saturating_add(1),
            got: len,
        }),
        None => Err(ShapeError::TooLarge { rows, cols }),
    }
}

/// `out = a · b`, or `out += a · b` when `accumulate` (a bias already in `out`),
/// on the calling thread alone: a caller embedding several passages runs one on
/// each worker, which keeps the element-wise work between products parallel too.
pub fn gemm(
    out: StridedMut<'_>,
    a: Strided<'_>,
    b: Strided<'_>,
    accumulate: bool,
) -> Result<(), ShapeError> {
    if a.rows != out.rows || b.cols != out.cols || a.cols != b.rows {
        return Err(ShapeError::Product {
            left: (a.rows, a.cols),
            right: (b.rows, b.cols),
            out: (out.rows, out.cols),
        });
    }
    let (o_rs, o_cs) = fits(
        out.data.len(),
        out.rows,
        out.cols,
        out.row_stride,
        out.col_stride,
    )?;
    let (a_rs, a_cs) = fits(a.data.len(), a.rows, a.cols, a.row_stride, a.col_stride)?;
    let (b_rs, b_cs) = fits(b.data.len(), b.rows, b.cols, b.row_stride, b.col_stride)?;
    if out.rows == 0 || out.cols == 0 {
        return Ok(());
    }
    if a.cols == 0 {
        if !accumulate {
            for i in 0..out.rows {
                for j in 0..out.cols {
                    out.data[i * out.row_stride + j * out.col_stride] = 0.0;
                }
            }
        }
        return Ok(());
    }
    // SAFETY: `fits` checked that every element each view addresses lies in its
    // slice and that the strides fit `isize`; `out` is borrowed mutably, so it
    // overlaps neither input; the shapes were checked to multiply.
    unsafe {
        gemm::gemm(
            out.rows,
            out.cols,
            a.cols,
            out.data.as_mut_ptr(),
            o_cs,
            o_rs,
            accumulate,
            a.data.as_ptr(),
            a_cs,
            a_rs,
            b.data.as_ptr(),
            b_cs,
            b_rs,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(a: Strided<'_>, b: Strided<'_>) -> Vec<f32> {
        let mut out = vec![0f32; a.rows * b.cols];
        for i in 0..a.rows {
            for j in 0..b.cols {
                for k in 0..a.cols {
                    out[i * b.cols + j] += a.data[i * a.row_stride + k * a.col_stride]
                        * b.data[k * b.row_stride + j * b.col_stride];
                }
            }
        }
        out
    }

    proptest! {
        #[test]
        fn a_strided_product_is_the_schoolbook_product(
            m in 1usize..20, k in 0usize..40, n in 1usize..20,
            transposed in any::<bool>(), accumulate in any::<bool>(), seed in any::<u32>(),
        ) {
            let value = |i: usize| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5;
            let a_data: Vec<f32> = (0..m * k).map(value).collect();
            let b_data: Vec<f32> = (0..k * n).map(|i| value(i + 7)).collect();
            let a = Strided::rows(&a_data, m, k);
            let b = if transposed { Strided::transposed(&b_data, n, k) } else { Strided::rows(&b_data, k, n) };
            let mut out = vec![1f32; m * n];
            gemm(StridedMut::rows(&mut out, m, n), a, b, accumulate).unwrap();
            let want = naive(a, b);
            for (got, want) in out.iter().zip(&want) {
                let want = want + if accumulate { 1.0 } else { 0.0 };
                prop_assert!((got - want).abs() < 1e-4, "{got} against {want}");
            }
        }
    }

    #[test]
    fn a_view_past_its_slice_or_shapes_that_do_not_multiply_are_refused() {
        let data = vec![0f32; 12];
        let mut out = vec![0f32; 12];
        let short = Strided::rows(&data[..11], 3, 4);
        let b = Strided::rows(&data, 4, 3);
        let err = gemm(StridedMut::rows(&mut out, 3, 3), short, b, false);
        assert!(matches!(err, Err(ShapeError::Length { .. })));
        let a = Strided::rows(&data, 3, 4);
        let err = gemm(StridedMut::rows(&mut out, 3, 3), a, a, false);
        assert!(matches!(err, Err(ShapeError::Product { .. })));
        let huge = Strided {
            data: &data,
            rows: 2,
            cols: 2,
            row_stride: usize::MAX,
            col_stride: 1,
        };
        let err = gemm(StridedMut::rows(&mut out, 2, 2), huge, huge, false);
        assert!(matches!(err, Err(ShapeError::TooLarge { .. })));
    }
}
