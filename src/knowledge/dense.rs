//! The passages' vectors in memory for one searcher generation (SPEC §21), and the
//! nearest ones to a question's vector.
//!
//! A vector is kept as 8-bit integers with one scale (a quarter of f32's memory:
//! 100,000 passages of 384 dimensions take 38 MB), and a question is compared with
//! every passage. The vectors are unit length, so each component is within ±1
//! and one scale per vector loses little; the ranking this gives was measured
//! against f32's on the labelled set (BENCHMARKS.md, "Hybrid retrieval").

use tantivy::{DocAddress, Searcher};

/// The vectors of one generation, with the searcher they were read from, so that
/// a question's two searches and its passages' text all come from one generation.
pub(super) struct Dense {
    pub searcher: Searcher,
    vectors: Vectors,
}

/// The vectors as 8-bit integers with a scale each, and where each passage is.
#[derive(Default)]
struct Vectors {
    dim: usize,
    quants: Vec<i8>,
    scales: Vec<f32>,
    addresses: Vec<DocAddress>,
}

/// A vector's bytes as stored: little-endian f32s.
pub fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The vector in `bytes`, when they hold `dim` finite f32s of about unit length;
/// anything else (a cut row, a row of another model, garbage) is `None`.
pub fn decode(bytes: &[u8], dim: usize) -> Option<Vec<f32>> {
    if dim == 0 || bytes.len() != dim * 4 {
        return None;
    }
    let vector: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let norm: f32 = vector.iter().map(|x| x * x).sum();
    (vector.iter().all(|x| x.is_finite()) && (norm - 1.0).abs() < 1e-3).then_some(vector)
}

/// A unit vector as 8-bit integers and the scale that gives them back.
fn quantize(vector: &[f32], out: &mut Vec<i8>) -> f32 {
    let top = vector.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-12);
    let scale = top / 127.0;
    out.extend(vector.iter().map(|x| (x / scale).round() as i8));
    scale
}

impl Dense {
    /// Reads every live passage's vector from the index's `vector` fast field
    /// (a column beside the stored text, so the text kept in memory does not pay
    /// for it); `None` when no passage has one (an index built with embedding
    /// off). The first vector sets the size; one of another size is skipped.
    pub fn read(searcher: Searcher) -> tantivy::Result<Option<Dense>> {
        let mut dense = Vectors::default();
        let mut bytes = Vec::new();
        for (ord, reader) in searcher.segment_readers().iter().enumerate() {
            let Some(column) = reader.fast_fields().bytes("vector")? else {
                continue;
            };
            let alive = reader.alive_bitset();
            for id in 0..reader.max_doc() {
                if alive.is_some_and(|a| !a.is_alive(id)) {
                    continue;
                }
                let Some(term) = column.term_ords(id).next() else {
                    continue;
                };
                bytes.clear();
                if !column.ord_to_bytes(term, &mut bytes)? {
                    continue;
                }
                if dense.dim == 0 {
                    dense.dim = bytes.len() / 4;
                }
                // A passage whose vector does not decode is found by BM25 alone.
                let Some(vector) = decode(&bytes, dense.dim) else {
                    continue;
                };
                dense.scales.push(quantize(&vector, &mut dense.quants));
                dense.addresses.push(DocAddress::new(ord as u32, id));
            }
        }
        Ok((!dense.addresses.is_empty()).then_some(Dense {
            searcher,
            vectors: dense,
        }))
    }

    /// The `k` passages nearest to `question`, best first, with their cosine.
    pub fn nearest(&self, question: &[f32], k: usize) -> Vec<(DocAddress, f32)> {
        self.vectors.nearest(question, k)
    }
}

impl Vectors {
    /// The `k` passages nearest to `question`, best first, with their cosine:
    /// every passage is scored (one pass over the 8-bit vectors), then the best
    /// `k` are picked without sorting the rest.
    pub fn nearest(&self, question: &[f32], k: usize) -> Vec<(DocAddress, f32)> {
        if question.len() != self.dim || k == 0 {
            return Vec::new();
        }
        let mut q = Vec::with_capacity(self.dim);
        let q_scale = quantize(question, &mut q);
        let mut dots = vec![0i32; self.addresses.len()];
        dot_rows(&q, &self.quants, &mut dots);
        let mut scored: Vec<(f32, usize)> = dots
            .iter()
            .zip(&self.scales)
            .enumerate()
            .map(|(i, (&d, &s))| (d as f32 * s * q_scale, i))
            .collect();
        let k = k.min(scored.len());
        if k < scored.len() {
            scored.select_nth_unstable_by(k, |a, b| b.0.total_cmp(&a.0));
            scored.truncate(k);
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored
            .into_iter()
            .map(|(score, i)| (self.addresses[i], score))
            .collect()
    }
}

/// Each row of `rows` · `q`, on the kernels' SIMD where the build has them.
#[cfg(feature = "local-model")]
fn dot_rows(q: &[i8], rows: &[i8], out: &mut [i32]) {
    if deskbell_kernels::dot_i8_rows(q, rows, out).is_err() {
        out.fill(0);
    }
}

#[cfg(not(feature = "local-model"))]
fn dot_rows(q: &[i8], rows: &[i8], out: &mut [i32]) {
    for (row, out) in rows.chunks_exact(q.len()).zip(out) {
        *out = row
            .iter()
            .zip(q)
            .map(|(&a, &b)| i32::from(a) * i32::from(b))
            .sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_survives_its_bytes_and_bad_bytes_are_refused() {
        let v = vec![0.6f32, 0.8, 0.0];
        assert_eq!(decode(&encode(&v), 3), Some(v.clone()));
        assert_eq!(decode(&encode(&v)[..8], 3), None, "cut");
        assert_eq!(decode(&encode(&v), 4), None, "another model's size");
        assert_eq!(
            decode(&encode(&[f32::NAN, 0.0, 1.0]), 3),
            None,
            "not a number"
        );
        assert_eq!(
            decode(&encode(&[2.0, 0.0, 0.0]), 3),
            None,
            "not unit length"
        );
        assert_eq!(decode(&[], 0), None);
    }

    #[test]
    fn the_nearest_passages_come_best_first() {
        let unit = |v: [f32; 3]| {
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.map(|x| x / n)
        };
        let vectors = [
            unit([1.0, 0.0, 0.0]),
            unit([0.0, 1.0, 0.0]),
            unit([1.0, 1.0, 0.0]),
            unit([-1.0, 0.0, 0.2]),
        ];
        let mut dense = Vectors {
            dim: 3,
            ..Vectors::default()
        };
        for (i, v) in vectors.iter().enumerate() {
            dense.scales.push(quantize(v, &mut dense.quants));
            dense.addresses.push(DocAddress::new(0, i as u32));
        }
        let found = dense.nearest(&unit([0.9, 0.1, 0.0]), 3);
        let order: Vec<u32> = found.iter().map(|f| f.0.doc_id).collect();
        assert_eq!(order, vec![0, 2, 1]);
        assert!((found[0].1 - 0.994).abs() < 0.01, "{found:?}");
        assert!(dense.nearest(&[1.0, 0.0], 3).is_empty(), "another size");
        assert_eq!(dense.nearest(&unit([0.0, 0.0, 1.0]), 10).len(), 4);
    }

    #[test]
    fn quantized_scores_keep_the_order_of_exact_ones() {
        let v = [0.6f32, 0.8, 0.0];
        let mut q = Vec::new();
        let s = quantize(&v, &mut q);
        let back: Vec<f32> = q.iter().map(|&x| f32::from(x) * s).collect();
        for (a, b) in v.iter().zip(&back) {
            assert!((a - b).abs() < 0.01, "{v:?} {back:?}");
        }
    }
}
