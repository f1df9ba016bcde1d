//! The passages' vectors in memory for one searcher generation (SPEC §21), and the
//! nearest ones to a question's vector.
//!
//! Vectors are kept per tantivy segment (`rows.rs`), and a segment of at least
//! `GRAPH_MIN` passages also gets an approximate index (`graph.rs`). Segments
//! never change once written (a delete only marks a document dead), so a new
//! generation reuses the vectors and graphs of the segments it shares with the
//! one before: an ingest that changes a few documents reads and indexes only
//! the new segment, not the site's 100,000 passages again.

mod graph;
mod rows;

use std::collections::HashMap;
use std::sync::Arc;

use tantivy::index::SegmentId;
use tantivy::{DocAddress, Searcher, SegmentReader};

pub use graph::Graph;
pub use rows::{Rows, decode, encode, synthetic};

/// A segment of this many passages or more is searched through its graph
/// rather than scanned. On clustered vectors the walk passes the scan between
/// 10,000 and 50,000 passages (0.74 against 0.35 ms at 50,000), but building
/// the graph takes about 0.45 ms of one thread a passage (44 s for 100,000),
/// in the reload that follows an ingest or a merge, and on unclustered vectors
/// a site of 100,000 passages in several segments searched slower through
/// graphs than by scanning. At 100,000 the scan takes
/// 1.6 ms and the walk 0.24 (BENCHMARKS.md, "An approximate index for the
/// search by meaning").
pub const GRAPH_MIN: usize = 100_000;

/// A segment with more than this share of its passages deleted is scanned even
/// when it has a graph: a walk looks at `EF_SEARCH` passages, and too many of
/// them could be dead. Only a merge drops dead documents; the ingest's merge
/// policy (`index::ingest::merge_policy`) merges any segment past this share,
/// so such a segment is scanned only until that merge ends.
pub(super) const GRAPH_MAX_DEAD: f64 = 0.2;

/// The vectors of one generation, with the searcher they were read from, so that
/// a question's two searches and its passages' text all come from one generation.
pub(crate) struct Dense {
    pub searcher: Searcher,
    segments: Vec<Segment>,
}

/// One segment's vectors, shared by every generation that has the segment.
struct Segment {
    id: SegmentId,
    ord: u32,
    vectors: Arc<Vectors>,
}

struct Vectors {
    rows: Arc<Rows>,
    graph: Option<Graph>,
}

impl Dense {
    /// Reads every passage's vector from the index's `vector` fast field (a
    /// column beside the stored text, so the text kept in memory does not pay
    /// for it), reusing `before`'s for the segments it already read; `None`
    /// when no passage has one (an index built with embedding off).
    pub fn read(searcher: Searcher, before: Option<&Dense>) -> tantivy::Result<Option<Dense>> {
        Self::read_with(searcher, before, GRAPH_MIN)
    }

    /// `read` with graphs for segments of `graph_min` passages or more.
    fn read_with(
        searcher: Searcher,
        before: Option<&Dense>,
        graph_min: usize,
    ) -> tantivy::Result<Option<Dense>> {
        let known: HashMap<SegmentId, &Arc<Vectors>> = before
            .map(|b| b.segments.iter().map(|s| (s.id, &s.vectors)).collect())
            .unwrap_or_default();
        let mut segments = Vec::new();
        for (ord, reader) in searcher.segment_readers().iter().enumerate() {
            let id = reader.segment_id();
            let vectors = match known.get(&id) {
                Some(vectors) => Arc::clone(vectors),
                None => match read_segment(reader)? {
                    Some(rows) => Arc::new(Vectors::index(rows, graph_min)),
                    None => continue,
                },
            };
            segments.push(Segment {
                id,
                ord: ord as u32,
                vectors,
            });
        }
        Ok((!segments.is_empty()).then_some(Dense { searcher, segments }))
    }

    /// The `k` passages nearest to `question`, best first, with their cosine:
    /// each segment's best `k` (through its graph or every vector), merged.
    pub fn nearest(&self, question: &[f32], k: usize) -> Vec<(DocAddress, f32)> {
        let question = Arc::new(Rows::question(question));
        let mut found = Vec::new();
        for segment in &self.segments {
            let rows = &segment.vectors.rows;
            if rows.dim() != question.dim() {
                continue;
            }
            let reader = self.searcher.segment_reader(segment.ord);
            let alive = reader.alive_bitset();
            let keep = |doc: u32| alive.is_none_or(|a| a.is_alive(doc));
            let near = match &segment.vectors.graph {
                Some(graph) if mostly_alive(reader) => graph.nearest(&question, k, keep),
                _ => rows.exact(&question, k, keep),
            };
            found.extend(
                near.into_iter()
                    .map(|(doc, score)| (DocAddress::new(segment.ord, doc), score)),
            );
        }
        found.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        found.truncate(k);
        found
    }

    /// How many segments' vectors this generation shares with `before`'s.
    #[cfg(test)]
    pub fn shared_with(&self, before: &Dense) -> usize {
        self.segments
            .iter()
            .filter(|s| {
                before
                    .segments
                    .iter()
                    .any(|b| Arc::ptr_eq(&s.vectors, &b.vectors))
            })
            .count()
    }
}

impl Vectors {
    fn index(rows: Rows, graph_min: usize) -> Vectors {
        let rows = Arc::new(rows);
        let graph = (rows.len() >= graph_min).then(|| {
            // Some 40 seconds of one core for 100,000 passages: worth a line,
            // since a reload (the ingest follower's, on a blocking thread) waits
            // for it.
            let started = std::time::Instant::now();
            let graph = Graph::build(&rows);
            tracing::info!(
                passages = rows.len(),
                seconds = started.elapsed().as_secs_f64(),
                "search graph built"
            );
            graph
        });
        Vectors { rows, graph }
    }
}

fn mostly_alive(reader: &SegmentReader) -> bool {
    f64::from(reader.num_deleted_docs()) <= GRAPH_MAX_DEAD * f64::from(reader.max_doc())
}

/// Every vector of one segment, dead documents' too (whether a document is dead
/// changes with each generation; the question's search checks it), or `None`
/// when the segment has none. The segment's first vector that decodes sets the
/// size; one of another size, or one that does not decode, is left out, and
/// that passage is found by BM25 alone.
fn read_segment(reader: &SegmentReader) -> tantivy::Result<Option<Rows>> {
    let Some(column) = reader.fast_fields().bytes("vector")? else {
        return Ok(None);
    };
    let mut rows: Option<Rows> = None;
    let mut bytes = Vec::new();
    for doc in 0..reader.max_doc() {
        let Some(term) = column.term_ords(doc).next() else {
            continue;
        };
        bytes.clear();
        if !column.ord_to_bytes(term, &mut bytes)? {
            continue;
        }
        let dim = rows.as_ref().map_or(bytes.len() / 4, Rows::dim);
        if let Some(vector) = decode(&bytes, dim) {
            rows.get_or_insert_with(|| Rows::new(dim))
                .push(&vector, doc);
        }
    }
    Ok(rows.filter(|r| !r.is_empty()))
}

#[cfg(test)]
mod tests {
    use tantivy::{Index, TantivyDocument, Term};

    use super::*;
    use crate::knowledge::dense::synthetic;
    use crate::knowledge::fields::schema;

    /// A passage deleted from a segment that a later generation keeps (with the
    /// vectors read for the earlier one) is never found, and the kept segment's
    /// vectors are not read again.
    #[test]
    fn a_kept_segment_s_deleted_passage_is_not_found() {
        let rows = [[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]].map(|v| encode(&v));
        let (index, mut writer, fields) = segment_of(&rows);
        let reader = index.reader().unwrap();
        let first = Dense::read(reader.searcher(), None).unwrap().unwrap();
        assert_eq!(first.nearest(&[1.0, 0.0], 3).len(), 3);
        writer.delete_term(Term::from_field_text(fields.path, "p0"));
        writer.commit().unwrap();
        reader.reload().unwrap();
        let second = Dense::read(reader.searcher(), Some(&first))
            .unwrap()
            .unwrap();
        assert_eq!(
            second.shared_with(&first),
            1,
            "the segment's vectors are kept"
        );
        let near = second.nearest(&[1.0, 0.0], 3);
        assert_eq!(near.len(), 2, "{near:?}");
        assert!(
            (near[0].1 - 0.8).abs() < 0.01,
            "p1 is now the nearest: {near:?}"
        );
        assert_eq!(
            Dense::read(reader.searcher(), None)
                .unwrap()
                .unwrap()
                .nearest(&[1.0, 0.0], 3),
            near
        );
    }

    /// A cut first row does not set the segment's size: the rows after it,
    /// whole, are still searched (the first row's length used to decide, and a
    /// cut one left the whole segment to BM25).
    #[test]
    fn a_cut_first_vector_leaves_the_rest_of_its_segment_searched() {
        let rows = [
            encode(&[1.0, 0.0])[..5].to_vec(),
            encode(&[0.8, 0.6]),
            encode(&[0.0, 1.0]),
        ];
        let (index, _, _) = segment_of(&rows);
        let dense = Dense::read(index.reader().unwrap().searcher(), None)
            .unwrap()
            .expect("the whole rows are read");
        let near = dense.nearest(&[1.0, 0.0], 3);
        let docs: Vec<u32> = near.iter().map(|(a, _)| a.doc_id).collect();
        assert_eq!(docs, vec![1, 2], "{near:?}");
    }

    /// A fresh index of one segment (one writer thread), passage `i` at path
    /// `p<i>` with the vector bytes `rows[i]`, and its writer for deletes.
    fn segment_of(
        rows: &[Vec<u8>],
    ) -> (
        Index,
        tantivy::IndexWriter,
        crate::knowledge::fields::Fields,
    ) {
        let (schema, fields) = schema();
        let index = Index::create_in_ram(schema);
        let mut writer: tantivy::IndexWriter =
            index.writer_with_num_threads(1, 15_000_000).unwrap();
        for (i, bytes) in rows.iter().enumerate() {
            let mut doc = TantivyDocument::new();
            doc.add_text(fields.path, format!("p{i}"));
            doc.add_bytes(fields.vector, bytes);
            writer.add_document(doc).unwrap();
        }
        writer.commit().unwrap();
        (index, writer, fields)
    }

    /// Through a graph as by the scan: the same passages for a question near
    /// them, never a deleted one, and a segment with too many dead scanned.
    #[test]
    fn a_segment_s_graph_answers_as_its_scan_and_skips_the_dead() {
        let vectors = synthetic(400, 16, 10, 11);
        let rows: Vec<Vec<u8>> = vectors.iter().map(|v| encode(v)).collect();
        let (index, mut writer, fields) = segment_of(&rows);
        let reader = index.reader().unwrap();
        // Passage 27 itself, deleted from the second round on.
        let question = &vectors[27];
        for (dead, scanned) in [(0, false), (20, false), (120, true)] {
            for i in 0..dead {
                writer.delete_term(Term::from_field_text(fields.path, &format!("p{}", i * 3)));
            }
            writer.commit().unwrap();
            reader.reload().unwrap();
            let walked = Dense::read_with(reader.searcher(), None, 100)
                .unwrap()
                .unwrap();
            assert!(walked.segments[0].vectors.graph.is_some());
            let segment = reader.searcher().segment_reader(0).clone();
            assert_eq!(!mostly_alive(&segment), scanned, "{dead} dead");
            let exact = Dense::read_with(reader.searcher(), None, usize::MAX)
                .unwrap()
                .unwrap();
            let (near, best) = (walked.nearest(question, 5), exact.nearest(question, 5));
            assert_eq!(near.len(), 5);
            let alive = segment.alive_bitset();
            assert!(
                near.iter()
                    .all(|(a, _)| alive.is_none_or(|b| b.is_alive(a.doc_id)))
            );
            let same = near
                .iter()
                .filter(|n| best.iter().any(|b| b.0 == n.0))
                .count();
            assert!(same >= 4, "{near:?} against {best:?}");
        }
    }
}
