//! The passages' stored text kept in memory, one copy per searcher generation. A
//! question's turn waits for its retrieval before it asks the model, and reading
//! eight passages back out of tantivy's compressed document store (decompressing
//! a block, decoding a document) was about a third of retrieval's time. Small
//! knowledge bases are the usual case for a help desk, so the text is kept when
//! it fits `LIMIT`; past it, searches read the document store as before.

use std::sync::{Arc, Mutex};

use tantivy::index::SegmentId;
use tantivy::schema::Value;
use tantivy::{DocAddress, Opstamp, Searcher, TantivyDocument};

use super::fields::{Fields, Passage};

/// Passage text kept in memory at the most, per site.
pub(super) const LIMIT: usize = 64 << 20;

/// A document's passage as stored, with no score yet.
fn passage_of(d: &TantivyDocument, f: Fields) -> Passage {
    let text = |field| {
        d.get_first(field)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let url = text(f.url);
    Passage {
        path: text(f.path),
        title: text(f.title),
        url: (!url.is_empty()).then_some(url),
        text: text(f.body),
        score: 0.0,
        found: Default::default(),
    }
}

fn size_of(p: &Passage) -> usize {
    p.path.len() + p.title.len() + p.text.len() + p.url.as_ref().map_or(0, String::len)
}

/// Every document's passage by segment and document id, for one generation of
/// the searcher (document addresses mean nothing across generations). `None`
/// when the text would not fit.
pub(super) struct Generation {
    id: u64,
    /// The generation's segments in order, with their deletes: a later
    /// generation with the same ones has the same addresses. tantivy reloads
    /// without any change too (its watcher's first look at a just-written
    /// index), and that must not drop the kept text.
    layout: Vec<(SegmentId, Option<Opstamp>)>,
    segments: Option<Vec<Vec<Passage>>>,
}

/// The searcher's segments in order, with their deletes.
fn layout(searcher: &Searcher) -> impl Iterator<Item = (SegmentId, Option<Opstamp>)> + '_ {
    searcher
        .segment_readers()
        .iter()
        .map(|r| (r.segment_id(), r.delete_opstamp()))
}

impl Generation {
    fn serves(&self, searcher: &Searcher) -> bool {
        self.layout.iter().copied().eq(layout(searcher))
    }
}

/// The latest generation read, and the one being read, if any.
#[derive(Default)]
struct State {
    latest: Option<Arc<Generation>>,
    reading: Option<u64>,
}

/// The latest generation's passages. A search never waits for them: one that
/// meets a generation not read yet reads its passages from the document store
/// and has the generation read on a thread of its own, so reading up to `LIMIT`
/// of text after an update delays no question. Opening and reloading (an
/// ingest, not a question) read it at once.
pub(super) struct Texts {
    state: Arc<Mutex<State>>,
    /// Bytes of text kept at the most (`LIMIT`; smaller in tests).
    limit: usize,
}

/// A poisoned lock only means a reader thread panicked between two plain
/// assignments; the state is still whole.
fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Texts {
    pub(super) fn new(limit: usize) -> Texts {
        Texts {
            state: Arc::default(),
            limit,
        }
    }

    /// The stored passage at `address`, from memory when the searcher's
    /// generation has been read and fits, else from the document store.
    pub(super) fn get(
        &self,
        searcher: &Searcher,
        fields: Fields,
        address: DocAddress,
    ) -> tantivy::Result<Passage> {
        let generation = self.current(searcher);
        if generation.is_none() {
            self.read_aside(searcher, fields);
        }
        let kept = generation.as_ref().and_then(|g| {
            g.segments
                .as_ref()?
                .get(address.segment_ord as usize)?
                .get(address.doc_id as usize)
        });
        match kept {
            Some(p) => Ok(p.clone()),
            None => Ok(passage_of(&searcher.doc(address)?, fields)),
        }
    }

    /// Whether the searcher's passages are kept in memory.
    pub(super) fn kept(&self, searcher: &Searcher) -> bool {
        self.current(searcher).is_some_and(|g| g.segments.is_some())
    }

    /// Reads the searcher's generation now, unless it has been read.
    /// Searches meanwhile read the document store without starting a reading
    /// of their own.
    pub(super) fn read(&self, searcher: &Searcher, fields: Fields) -> tantivy::Result<()> {
        if self.current(searcher).is_some() {
            return Ok(());
        }
        let id = searcher.generation().generation_id();
        lock(&self.state).reading = Some(id);
        match read_all(searcher, fields, self.limit) {
            Ok(segments) => {
                keep(&self.state, id, layout(searcher).collect(), segments);
                Ok(())
            }
            Err(e) => {
                let mut state = lock(&self.state);
                if state.reading == Some(id) {
                    state.reading = None;
                }
                Err(e)
            }
        }
    }

    /// The searcher's generation (or one with the same segments), if it has
    /// been read.
    fn current(&self, searcher: &Searcher) -> Option<Arc<Generation>> {
        let latest = lock(&self.state).latest.clone();
        latest.filter(|g| g.serves(searcher))
    }

    /// Has the searcher's generation read on a thread of its own, unless one
    /// is reading it already.
    fn read_aside(&self, searcher: &Searcher, fields: Fields) {
        let id = searcher.generation().generation_id();
        {
            let mut state = lock(&self.state);
            if state.reading == Some(id) {
                return;
            }
            state.reading = Some(id);
        }
        let (state, searcher, limit) = (self.state.clone(), searcher.clone(), self.limit);
        let layout = layout(&searcher).collect();
        let spawned = std::thread::Builder::new()
            .name("deskbell-texts".into())
            .spawn(move || match read_all(&searcher, fields, limit) {
                Ok(segments) => keep(&state, id, layout, segments),
                Err(e) => {
                    // Searched from the document store until the next update,
                    // rather than read again for every search.
                    tracing::warn!(error = %e, "knowledge texts could not be read");
                    keep(&state, id, layout, None);
                }
            });
        if spawned.is_err() {
            lock(&self.state).reading = None;
        }
    }
}

/// Keeps a generation read, unless a later one is kept already.
fn keep(
    state: &Mutex<State>,
    id: u64,
    layout: Vec<(SegmentId, Option<Opstamp>)>,
    segments: Option<Vec<Vec<Passage>>>,
) {
    let mut state = lock(state);
    if state.reading == Some(id) {
        state.reading = None;
    }
    if state.latest.as_ref().is_none_or(|g| g.id < id) {
        state.latest = Some(Arc::new(Generation {
            id,
            layout,
            segments,
        }));
    }
}

/// Every document of every segment, deleted ones too so that a document's id is
/// its place; `None` once the text passes `limit`.
fn read_all(
    searcher: &Searcher,
    fields: Fields,
    limit: usize,
) -> tantivy::Result<Option<Vec<Vec<Passage>>>> {
    // Text is no smaller than its compressed store (the other stored field, the
    // path, is short), so a store already over the limit is not read at all.
    let mut stored = 0;
    for reader in searcher.segment_readers() {
        stored += reader
            .get_store_reader(0)?
            .space_usage()
            .total()
            .get_bytes();
    }
    if stored > limit as u64 {
        return Ok(None);
    }
    let mut size = 0;
    let mut segments = Vec::new();
    for reader in searcher.segment_readers() {
        let store = reader.get_store_reader(1)?;
        let mut docs = Vec::with_capacity(reader.max_doc() as usize);
        for d in store.iter::<TantivyDocument>(None) {
            let passage = passage_of(&d?, fields);
            size += size_of(&passage);
            if size > limit {
                return Ok(None);
            }
            docs.push(passage);
        }
        segments.push(docs);
    }
    Ok(Some(segments))
}
