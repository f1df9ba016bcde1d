//! The passages' stored text kept in memory, one copy per searcher generation. A
//! question's turn waits for its retrieval before it asks the model, and reading
//! eight passages back out of tantivy's compressed document store (decompressing
//! a block, decoding a document) was about a third of retrieval's time. Small
//! knowledge bases are the usual case for a help desk, so the text is kept when
//! it fits `LIMIT`; past it, searches read the document store as before.

use std::sync::{Arc, Mutex};

use tantivy::schema::Value;
use tantivy::{DocAddress, Searcher, TantivyDocument};

use super::index::{Fields, Passage};

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
        title: text(f.title),
        url: (!url.is_empty()).then_some(url),
        text: text(f.body),
        score: 0.0,
    }
}

fn size_of(p: &Passage) -> usize {
    p.title.len() + p.text.len() + p.url.as_ref().map_or(0, String::len)
}

/// Every document's passage by segment and document id, for one generation of
/// the searcher (document addresses mean nothing across generations). `None`
/// when the text would not fit.
pub(super) struct Generation {
    id: u64,
    segments: Option<Vec<Vec<Passage>>>,
}

/// The latest generation's passages, built when a search first meets it.
pub(super) struct Texts {
    latest: Mutex<Option<Arc<Generation>>>,
    /// Bytes of text kept at the most (`LIMIT`; smaller in tests).
    limit: usize,
}

impl Texts {
    pub(super) fn new(limit: usize) -> Texts {
        Texts {
            latest: Mutex::new(None),
            limit,
        }
    }

    /// The stored passage at `address`, from memory when the generation's text
    /// fits, else from the document store.
    pub(super) fn get(
        &self,
        searcher: &Searcher,
        fields: Fields,
        address: DocAddress,
    ) -> tantivy::Result<Passage> {
        let generation = self.of(searcher, fields)?;
        let kept = generation.segments.as_ref().and_then(|segments| {
            segments
                .get(address.segment_ord as usize)?
                .get(address.doc_id as usize)
        });
        match kept {
            Some(p) => Ok(p.clone()),
            None => Ok(passage_of(&searcher.doc(address)?, fields)),
        }
    }

    /// Whether the searcher's passages are kept in memory.
    #[cfg(test)]
    pub(super) fn kept(&self, searcher: &Searcher, fields: Fields) -> bool {
        self.of(searcher, fields)
            .is_ok_and(|g| g.segments.is_some())
    }

    /// The searcher's generation, read from its store the first time. Searches
    /// that meet a new generation wait for one reading rather than each doing it.
    pub(super) fn of(
        &self,
        searcher: &Searcher,
        fields: Fields,
    ) -> tantivy::Result<Arc<Generation>> {
        let id = searcher.generation().generation_id();
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = latest.as_ref().filter(|g| g.id == id) {
            return Ok(g.clone());
        }
        let generation = Arc::new(Generation {
            id,
            segments: read_all(searcher, fields, self.limit)?,
        });
        *latest = Some(generation.clone());
        Ok(generation)
    }
}

/// Every document of every segment, deleted ones too so that a document's id is
/// its place; `None` once the text passes `limit`.
fn read_all(
    searcher: &Searcher,
    fields: Fields,
    limit: usize,
) -> tantivy::Result<Option<Vec<Vec<Passage>>>> {
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
