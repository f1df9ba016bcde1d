//! Passage vectors as 8-bit integers with one scale each, and the exact search
//! over them. A vector is unit length, so each component is within ±1 and one
//! scale per vector loses little (a quarter of f32's memory: 100,000 passages of
//! 384 dimensions take 38 MB); the ranking this gives was measured against f32's
//! (BENCHMARKS.md, "Hybrid retrieval").

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

/// One segment's vectors (or a question's one), each with the document it
/// belongs to.
#[derive(Debug, Default)]
pub struct Rows {
    dim: usize,
    quants: Vec<i8>,
    scales: Vec<f32>,
    docs: Vec<u32>,
}

impl Rows {
    pub fn new(dim: usize) -> Rows {
        Rows {
            dim,
            ..Rows::default()
        }
    }

    /// A question's vector as rows of one, to be compared with passages'.
    pub fn question(vector: &[f32]) -> Rows {
        let mut rows = Rows::new(vector.len());
        rows.push(vector, 0);
        rows
    }

    /// Adds `vector` as the passage `doc`'s; one of another size is left out
    /// (it would shift every later row).
    pub fn push(&mut self, vector: &[f32], doc: u32) {
        if vector.len() != self.dim {
            return;
        }
        let top = vector.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-12);
        let scale = top / 127.0;
        self.quants
            .extend(vector.iter().map(|x| (x / scale).round() as i8));
        self.scales.push(scale);
        self.docs.push(doc);
    }

    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn doc(&self, i: usize) -> u32 {
        self.docs[i]
    }

    fn row(&self, i: usize) -> &[i8] {
        &self.quants[i * self.dim..(i + 1) * self.dim]
    }

    /// The cosine of row `i` here and row `j` of `other` (of the same size).
    pub fn cosine(&self, i: usize, other: &Rows, j: usize) -> f32 {
        let mut dot = [0i32];
        dot_rows(self.row(i), other.row(j), &mut dot);
        dot[0] as f32 * self.scales[i] * other.scales[j]
    }

    /// The `k` rows nearest to the question's one row, best first, with their
    /// document and cosine, among those whose document `keep` accepts: every row
    /// is scored (one pass over the 8-bit vectors), then the best `k` are picked
    /// without sorting the rest.
    pub fn exact(&self, question: &Rows, k: usize, keep: impl Fn(u32) -> bool) -> Vec<(u32, f32)> {
        if question.dim != self.dim || question.len() != 1 || k == 0 || self.dim == 0 {
            return Vec::new();
        }
        let mut dots = vec![0i32; self.len()];
        dot_rows(question.row(0), &self.quants, &mut dots);
        let q_scale = question.scales[0];
        let mut scored: Vec<(f32, u32)> = dots
            .iter()
            .zip(&self.scales)
            .zip(&self.docs)
            .filter(|(_, doc)| keep(**doc))
            .map(|((&d, &s), &doc)| (d as f32 * s * q_scale, doc))
            .collect();
        let k = k.min(scored.len());
        if k < scored.len() {
            scored.select_nth_unstable_by(k, |a, b| b.0.total_cmp(&a.0));
            scored.truncate(k);
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored
            .into_iter()
            .map(|(score, doc)| (doc, score))
            .collect()
    }
}

/// `n` unit vectors of `dim` around `centres` random centres, as passages on a
/// few topics are, from `seed`: the graph's test and benchmark data.
pub fn synthetic(n: usize, dim: usize, centres: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let unit = |v: Vec<f32>| {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / norm).collect::<Vec<f32>>()
    };
    let centres: Vec<Vec<f32>> = (0..centres)
        .map(|_| unit((0..dim).map(|_| next()).collect()))
        .collect();
    // Noise of about 0.8 in length: a passage's cosine with its topic's centre
    // is near 0.8, as passages on one topic are with each other's.
    let spread = 2.77 / (dim as f32).sqrt();
    (0..n)
        .map(|i| {
            let c = &centres[i % centres.len()];
            unit(c.iter().map(|x| x + spread * next()).collect())
        })
        .collect()
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

    fn unit(v: [f32; 3]) -> [f32; 3] {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.map(|x| x / n)
    }

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
    fn the_nearest_passages_come_best_first_and_dropped_ones_not_at_all() {
        let mut rows = Rows::new(3);
        for (doc, v) in [
            unit([1.0, 0.0, 0.0]),
            unit([0.0, 1.0, 0.0]),
            unit([1.0, 1.0, 0.0]),
            unit([-1.0, 0.0, 0.2]),
        ]
        .iter()
        .enumerate()
        {
            rows.push(v, doc as u32 + 10);
        }
        let q = Rows::question(&unit([0.9, 0.1, 0.0]));
        let found = rows.exact(&q, 3, |_| true);
        let order: Vec<u32> = found.iter().map(|f| f.0).collect();
        assert_eq!(order, vec![10, 12, 11]);
        assert!((found[0].1 - 0.994).abs() < 0.01, "{found:?}");
        let kept: Vec<u32> = rows.exact(&q, 3, |d| d != 10).iter().map(|f| f.0).collect();
        assert_eq!(kept, vec![12, 11, 13]);
        rows.push(&[1.0, 0.0], 99);
        assert_eq!(rows.len(), 4, "a vector of another size is left out");
        assert!(
            rows.exact(&Rows::question(&[1.0, 0.0]), 3, |_| true)
                .is_empty(),
            "another size"
        );
        assert_eq!(
            rows.exact(&Rows::question(&unit([0.0, 0.0, 1.0])), 10, |_| true)
                .len(),
            4
        );
    }

    #[test]
    fn quantized_cosines_are_close_to_exact_ones() {
        let (a, b) = (unit([0.6, 0.8, 0.1]), unit([0.3, -0.2, 0.9]));
        let mut rows = Rows::new(3);
        rows.push(&a, 0);
        rows.push(&b, 1);
        let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((rows.cosine(0, &rows, 1) - exact).abs() < 0.02);
        assert!((rows.cosine(0, &rows, 0) - 1.0).abs() < 0.02);
    }
}
