//! An approximate index over one segment's vectors: a hierarchical navigable
//! small-world graph (HNSW; the `instant-distance` crate), which finds a
//! question's nearest passages by walking a few hundred of them instead of
//! scoring all. It is built only for segments of at least `GRAPH_MIN` passages
//! (BENCHMARKS.md, "An approximate index for the search by meaning").

use std::sync::{Arc, Mutex};

use instant_distance::{Builder, Hnsw, Point, Search};

use super::rows::Rows;

/// How many candidates a question's walk keeps (HNSW's `ef`): the larger, the
/// closer to the exact answer and the slower. With 100 a walk found 0.994 of
/// the exact top 8 among 100,000 clustered vectors and 0.936 among 200,000
/// (`deskbell-bench --only retrieval-graph`; the unit test holds a smaller case
/// to 0.9).
const EF_SEARCH: usize = 100;
/// The same while building. 40 built 100,000 vectors in 22 s on two cores
/// where 100 took 73 s, and the walks it gave were faster and as exact.
const EF_CONSTRUCTION: usize = 40;

/// Walks' scratch spaces kept for the next questions (each 100 KB for 100,000
/// passages); more walks at once than this allocate their own.
const MAX_KEPT_SEARCHES: usize = 4;

/// A passage in the graph: its row in the segment's vectors.
#[derive(Clone)]
struct Row {
    rows: Arc<Rows>,
    i: u32,
}

impl Point for Row {
    fn distance(&self, other: &Self) -> f32 {
        1.0 - self
            .rows
            .cosine(self.i as usize, &other.rows, other.i as usize)
    }
}

/// One segment's graph, and scratch space for the walks through it.
pub struct Graph {
    hnsw: Hnsw<Row>,
    /// Walks' scratch space (a visited mark per passage), kept for the next
    /// question rather than allocated and cleared each time.
    searches: Mutex<Vec<Search>>,
}

impl Graph {
    /// Builds the graph of `rows` on a thread of its own. Not on rayon's global
    /// pool: the kernels' workers are there, and a question's embedding or a chat
    /// model's token would wait behind seconds of building. One thread also
    /// makes the build deterministic (the crate inserts in parallel under
    /// per-passage locks, in whatever order threads get there), so with its
    /// fixed seed the same vectors give the same graph and the same answers.
    pub fn build(rows: &Arc<Rows>) -> Graph {
        let points: Vec<Row> = (0..rows.len() as u32)
            .map(|i| Row {
                rows: rows.clone(),
                i,
            })
            .collect();
        let builder = Builder::default()
            .ef_construction(EF_CONSTRUCTION)
            .ef_search(EF_SEARCH)
            .seed(0x5eed);
        let hnsw = match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
            Ok(pool) => pool.install(|| builder.build_hnsw(points).0),
            // No thread to be had: build on the caller's, through the global pool.
            Err(_) => builder.build_hnsw(points).0,
        };
        Graph {
            hnsw,
            searches: Mutex::default(),
        }
    }

    /// The `k` passages nearest to the question's one row, best first, with
    /// their document and cosine, among those `keep` accepts; at most
    /// `EF_SEARCH` are looked at, so fewer may come back when many are dropped.
    pub fn nearest(
        &self,
        question: &Arc<Rows>,
        k: usize,
        keep: impl Fn(u32) -> bool,
    ) -> Vec<(u32, f32)> {
        let dim = self.hnsw.iter().next().map_or(0, |(_, p)| p.rows.dim());
        if question.len() != 1 || question.dim() != dim || k == 0 {
            return Vec::new();
        }
        let point = Row {
            rows: question.clone(),
            i: 0,
        };
        let mut search = self
            .searches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default();
        let found = self
            .hnsw
            .search(&point, &mut search)
            .map(|item| {
                (
                    item.point.rows.doc(item.point.i as usize),
                    1.0 - item.distance,
                )
            })
            .filter(|(doc, _)| keep(*doc))
            .take(k)
            .collect();
        let mut searches = self.searches.lock().unwrap_or_else(|e| e.into_inner());
        // As many as walks ran at once, up to a few: each holds a mark per passage.
        if searches.len() < MAX_KEPT_SEARCHES {
            searches.push(search);
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knowledge::dense::synthetic;

    fn rows(vectors: &[Vec<f32>]) -> Arc<Rows> {
        let mut rows = Rows::new(vectors[0].len());
        for (doc, v) in vectors.iter().enumerate() {
            rows.push(v, doc as u32);
        }
        Arc::new(rows)
    }

    #[test]
    fn the_graph_finds_most_of_the_exact_nearest_passages() {
        // The last 50 are questions near the same topics, not in the graph.
        let vectors = synthetic(4_050, 64, 40, 7);
        let rows = rows(&vectors[..4_000]);
        let graph = Graph::build(&rows);
        let (mut hits, mut asked) = (0, 0);
        for q in &vectors[4_000..] {
            let q = Arc::new(Rows::question(q));
            let exact: Vec<u32> = rows.exact(&q, 8, |_| true).iter().map(|f| f.0).collect();
            let near = graph.nearest(&q, 8, |_| true);
            assert_eq!(near.len(), 8);
            assert!(
                near.windows(2).all(|w| w[0].1 >= w[1].1),
                "best first: {near:?}"
            );
            hits += near.iter().filter(|f| exact.contains(&f.0)).count();
            asked += 8;
        }
        let recall = hits as f64 / asked as f64;
        assert!(recall >= 0.9, "recall of the exact top 8: {recall}");
    }

    /// Two builds of the same vectors answer every question alike, 40 deep. A
    /// build on rayon's two global threads links passages in whatever order the
    /// threads get there, and failed this in three runs of three.
    #[test]
    fn the_same_vectors_give_the_same_answers() {
        // Each vector its own topic: no clusters, the walk's hardest case,
        // where answers depend most on how passages were linked. The last 50
        // are questions, not in the graph.
        let vectors = synthetic(8_050, 32, 8_050, 5);
        let rows = rows(&vectors[..8_000]);
        let (a, b) = (Graph::build(&rows), Graph::build(&rows));
        for q in &vectors[8_000..] {
            let q = Arc::new(Rows::question(q));
            assert_eq!(a.nearest(&q, 40, |_| true), b.nearest(&q, 40, |_| true));
        }
    }

    #[test]
    fn dropped_passages_are_not_found() {
        let vectors = synthetic(1_000, 32, 10, 3);
        let rows = rows(&vectors);
        let a = Graph::build(&rows);
        let q = Arc::new(Rows::question(&vectors[5]));
        let found = a.nearest(&q, 8, |doc| doc % 3 == 0);
        assert!(
            !found.is_empty() && found.iter().all(|f| f.0 % 3 == 0),
            "{found:?}"
        );
        let first = a.nearest(&q, 8, |_| true);
        assert_eq!(first[0].0, 5, "a passage is its own nearest");
        assert!(
            a.nearest(&Arc::new(Rows::new(32)), 8, |_| true).is_empty(),
            "no question row"
        );
    }
}
