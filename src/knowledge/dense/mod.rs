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
/// rather than scanned. On clustered vectors the walk passes the scan near
/// 30,000 passages (0.74 against 0.35 ms at 50,000), but building the graph
/// takes about 0.2 ms of both cores a passage, in the reload that follows an
/// ingest or a merge, and on unclustered vectors a site of 100,000 passages in
/// several segments searched slower through graphs than by scanning. At
/// 100,000 the scan takes 1.6 ms and the walk 0.24 (BENCHMARKS.md, "An
/// approximate index for the search by meaning").
pub const GRAPH_MIN: usize = 100_000;

/// A segment with more than this share of its passages deleted is scanned even
/// when it has a graph: a walk looks at `EF_SEARCH` passages, and too many of
/// them could be dead. Merges drop dead documents, so this is rare and brief.
const GRAPH_MAX_DEAD: f64 = 0.2;

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
        let known: HashMap<SegmentId, &Arc<Vectors>> = before
            .map(|b| b.segments.iter().map(|s| (s.id, &s.vectors)).collect())
            .unwrap_or_default();
        let mut segments = Vec::new();
        for (ord, reader) in searcher.segment_readers().iter().enumerate() {
            let id = reader.segment_id();
            let vectors = match known.get(&id) {
                Some(vectors) => Arc::clone(vectors),
                None => match read_segment(reader)? {
                    Some(rows) => Arc::new(Vectors::index(rows)),
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
    fn index(rows: Rows) -> Vectors {
        let rows = Arc::new(rows);
        let graph = (rows.len() >= GRAPH_MIN).then(|| {
            // Seconds of both cores for a large segment: worth a line, since a
            // reload (the ingest follower's) waits for it.
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
/// when the segment has none. The segment's first vector sets the size; one of
/// another size, or one that does not decode, is left out, and that passage is
/// found by BM25 alone.
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
        let rows = rows.get_or_insert_with(|| Rows::new(bytes.len() / 4));
        if let Some(vector) = decode(&bytes, rows.dim()) {
            rows.push(&vector, doc);
        }
    }
    Ok(rows.filter(|r| !r.is_empty()))
}

#[cfg(test)]
mod tests {
    use tantivy::{Index, TantivyDocument, Term};

    use super::*;
    use crate::knowledge::fields::schema;

    /// A passage deleted from a segment that a later generation keeps (with the
    /// vectors read for the earlier one) is never found, and the kept segment's
    /// vectors are not read again.
    #[test]
    fn a_kept_segment_s_deleted_passage_is_not_found() {
        let (schema, fields) = schema();
        let index = Index::create_in_ram(schema);
        // One thread: one segment holding every passage.
        let mut writer: tantivy::IndexWriter =
            index.writer_with_num_threads(1, 15_000_000).unwrap();
        for (path, vector) in [("a", [1.0, 0.0]), ("b", [0.8, 0.6]), ("c", [0.0, 1.0])] {
            let mut doc = TantivyDocument::new();
            doc.add_text(fields.path, path);
            doc.add_bytes(fields.vector, &encode(&vector));
            writer.add_document(doc).unwrap();
        }
        writer.commit().unwrap();
        let reader = index.reader().unwrap();
        let first = Dense::read(reader.searcher(), None).unwrap().unwrap();
        assert_eq!(first.nearest(&[1.0, 0.0], 3).len(), 3);
        writer.delete_term(Term::from_field_text(fields.path, "a"));
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
            "b is now the nearest: {near:?}"
        );
        assert_eq!(
            Dense::read(reader.searcher(), None)
                .unwrap()
                .unwrap()
                .nearest(&[1.0, 0.0], 3),
            near
        );
    }
}
