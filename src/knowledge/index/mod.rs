//! One full-text index (tantivy, BM25, English stemming) per site, in
//! `<data_dir>/knowledge/<site>`, with each passage's vector stored beside its
//! text when embedding is on (SPEC §21). Building and updating it is
//! `ingest.rs`; searching it is here: BM25 over the text, and the vectors kept in
//! memory (`dense/`) for the search by meaning.

mod ingest;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{DocAddress, Index, IndexReader, ReloadPolicy, Searcher, Term};

use super::dense::Dense;
use super::fields::{Fields, schema};
pub use super::fields::{Found, Passage};
use super::source::Skipped;
use super::texts::{self, Texts};
#[cfg(test)]
pub(crate) use ingest::MANIFEST;
pub use ingest::{Embed, current, ingest};
/// How much a word in a passage's heading counts on its own, beside the same
/// word counted in the `flat` field (heading and body together, as Pyserini's
/// "flat" BM25 index has them). A help desk's headings name the topic, so the
/// heading alone, scored by its own short length, picks the section a question
/// is about ("How long does shipping take?" ranks `Shipping` before `Shipping ›
/// Express`; the knowledge API test). Measured on two public labelled sets
/// (BENCHMARKS.md, "BM25 over the heading and body together"): the heading
/// apart at 1.5 with the body alone scored nDCG@10 0.632 on SciFact; flat
/// with no heading apart 0.678, hybrid 0.708; flat with the heading at 0.5
/// 0.669, hybrid 0.710, and the best hybrid on Semanlink too.
const TITLE_BOOST: f32 = 0.5;

/// Up to this many passages and words, a question's exact search runs on the
/// async thread that asked (`search_in_place`). It took some 30 µs for a few
/// words over 3,000 passages and 0.4–0.7 ms over 100,000 (BENCHMARKS.md), so
/// up to here it is estimated to stay within the 10–100 µs a task may run
/// between awaits; a question's words each add two term queries. A hand-off to
/// a blocking thread costs two thread switches and sends the turn to the back
/// of the run queue. On a server pinned to one core, with a hundred questions
/// at once, this and a lighter model request (measured together) halved the
/// opening wave's first-token p99 (BENCHMARKS.md, "Searching in place").
const IN_PLACE_PASSAGES: u64 = 10_000;
const IN_PLACE_WORDS: usize = 32;

/// The question's words with everything else made a space: the query
/// language's operators are not for visitors.
pub(super) fn words_only(question: &str) -> String {
    question
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { ' ' })
        .collect()
}

/// What an ingest did, for `deskbell ingest` and the logs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub added: usize,
    pub updated: usize,
    pub unchanged: usize,
    pub removed: usize,
    pub chunks: usize,
    pub skipped: Vec<Skipped>,
}

pub struct SiteIndex {
    reader: IndexReader,
    fields: Fields,
    /// The fields' analyzer (English stemming), which turns a question into the
    /// index's terms for the exact pass.
    words: TextAnalyzer,
    /// The parser of the second pass, allowing one typo per word, made once: it
    /// holds the index's schema and tokenizers.
    fuzzy: QueryParser,
    texts: Texts,
    /// The passages' vectors of the latest generation read, if they have any.
    dense: RwLock<Option<Arc<Dense>>>,
    /// How often the index was reloaded (each reload reads every passage's
    /// text again): the ingest follower's work, never a request's.
    reloads: std::sync::atomic::AtomicUsize,
}

pub fn folder(data_dir: &Path, site: &str) -> PathBuf {
    data_dir.join("knowledge").join(site)
}

impl SiteIndex {
    pub fn open(dir: &Path) -> anyhow::Result<SiteIndex> {
        Self::open_keeping(dir, texts::LIMIT)
    }

    /// Opens the index keeping at most `limit` bytes of passage text in memory,
    /// and reads them now rather than in the first question's turn.
    fn open_keeping(dir: &Path, limit: usize) -> anyhow::Result<SiteIndex> {
        let index = Index::open_in_dir(dir)
            .with_context(|| format!("cannot open the index in {}", dir.display()))?;
        let (_, fields) = schema();
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::OnCommitWithDelay)
            .try_into()?;
        let mut fuzzy = QueryParser::for_index(&index, vec![fields.title, fields.flat]);
        fuzzy.set_field_boost(fields.title, TITLE_BOOST);
        fuzzy.set_field_fuzzy(fields.flat, false, 1, true);
        fuzzy.set_field_fuzzy(fields.title, false, 1, true);
        let site = SiteIndex {
            words: index.tokenizer_for_field(fields.flat)?,
            fuzzy,
            reader,
            fields,
            texts: Texts::new(limit),
            dense: RwLock::default(),
            reloads: Default::default(),
        };
        site.read_generation()?;
        Ok(site)
    }

    /// Sees the latest commit now, and reads its passages before a question
    /// needs them.
    pub fn reload(&self) -> anyhow::Result<()> {
        self.reloads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.reader.reload()?;
        self.read_generation()
    }

    /// Reads the latest generation's passages and vectors into memory.
    fn read_generation(&self) -> anyhow::Result<()> {
        let searcher = self.reader.searcher();
        // The segments this generation shares with the last keep their vectors
        // and graphs. The vectors come first: building a new segment's graph
        // takes seconds, during which searches keep the old generation whole,
        // text included, rather than meeting text of a newer one.
        let before = self.dense();
        let dense = Dense::read(searcher.clone(), before.as_deref())?.map(Arc::new);
        *self.dense.write().unwrap_or_else(|e| e.into_inner()) = dense;
        self.texts.read(&searcher, self.fields)?;
        Ok(())
    }

    /// The vectors of the latest generation read, with its searcher.
    pub fn dense(&self) -> Option<Arc<Dense>> {
        self.dense.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The best `limit` passages by BM25 in `searcher`'s generation, with their
    /// scores, as `search` finds them.
    pub fn bm25(
        &self,
        searcher: &Searcher,
        question: &str,
        limit: usize,
        fuzzy: bool,
    ) -> anyhow::Result<Vec<(DocAddress, f32)>> {
        self.hits(searcher, &words_only(question), limit, fuzzy)
    }

    /// Whether a BM25 search of `question` in `searcher` is cheap enough for an
    /// async thread (see `IN_PLACE_PASSAGES`).
    pub fn cheap(&self, searcher: &Searcher, question: &str) -> bool {
        searcher.num_docs() <= IN_PLACE_PASSAGES
            && words_only(question).split_whitespace().count() <= IN_PLACE_WORDS
            && self.texts.kept(searcher)
    }

    /// The passages at `found`, in order, with the score and ranks given.
    pub fn passages(
        &self,
        searcher: &Searcher,
        found: Vec<(DocAddress, f32, Found)>,
    ) -> anyhow::Result<Vec<Passage>> {
        found
            .into_iter()
            .map(|(address, score, by)| {
                let mut passage = self.texts.get(searcher, self.fields, address)?;
                passage.score = score;
                passage.found = by;
                Ok(passage)
            })
            .collect()
    }

    pub fn reloads(&self) -> usize {
        self.reloads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The best `limit` passages by BM25; when no word matches exactly, a second
    /// try allows one typo per word.
    pub fn search(&self, question: &str, limit: usize) -> anyhow::Result<Vec<Passage>> {
        self.find(&self.reader.searcher(), &words_only(question), limit, true)
    }

    /// The exact search alone, when it is cheap enough for the async thread
    /// that asked: a small index whose text is in memory (so nothing is read
    /// from disk) and a question of a few words. `None` when it is not, or when
    /// no word matched as written; `search` then does the whole of it.
    pub fn search_in_place(
        &self,
        question: &str,
        limit: usize,
    ) -> anyhow::Result<Option<Vec<Passage>>> {
        // One searcher for the checks and the search. (Should another generation
        // be read between them, the text comes from the store, as for any
        // search meeting a generation not read: on an index this small, briefly.)
        let searcher = self.reader.searcher();
        if !self.cheap(&searcher, question) {
            return Ok(None);
        }
        let found = self.find(&searcher, &words_only(question), limit, false)?;
        Ok((!found.is_empty()).then_some(found))
    }

    /// The exact pass over `cleaned` (words only), then, when `fuzzy` and
    /// nothing matched, the typo-forgiving one.
    fn find(
        &self,
        searcher: &Searcher,
        cleaned: &str,
        limit: usize,
        fuzzy: bool,
    ) -> anyhow::Result<Vec<Passage>> {
        let hits = self.hits(searcher, cleaned, limit, fuzzy)?;
        let found = hits
            .into_iter()
            .enumerate()
            .map(|(i, (address, score))| {
                let by = Found {
                    bm25: Some(i as u32 + 1),
                    dense: None,
                };
                (address, score, by)
            })
            .collect();
        self.passages(searcher, found)
    }

    /// The exact pass's hits, or the typo-forgiving pass's when `fuzzy` and
    /// nothing matched exactly.
    fn hits(
        &self,
        searcher: &Searcher,
        cleaned: &str,
        limit: usize,
        fuzzy: bool,
    ) -> anyhow::Result<Vec<(DocAddress, f32)>> {
        let top = TopDocs::with_limit(limit.max(1)).order_by_score();
        let mut hits = searcher.search(&self.exact_query(cleaned), &top)?;
        if hits.is_empty() && fuzzy {
            // Lower case, so that the parser takes no word for an operator.
            let (query, _) = self.fuzzy.parse_query_lenient(&cleaned.to_lowercase());
            hits = searcher.search(&query, &top)?;
        }
        Ok(hits.into_iter().map(|(s, a)| (a, s)).collect())
    }

    /// Every word of the question in the heading path (boosted) or the `flat`
    /// field, as one flat disjunction of term queries. It scores each passage as
    /// the query parser's `(title:w OR flat:w) OR …` does, BM25 summed over the same terms,
    /// but only a flat one lets tantivy skip blocks of passages that cannot reach
    /// the top (block-max WAND); the nested groups made every question score
    /// every passage holding any of its words. Words are never operators here.
    fn exact_query(&self, cleaned: &str) -> BooleanQuery {
        let mut words = self.words.clone();
        let mut stream = words.token_stream(cleaned);
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        // A word asked twice counts once, as with the parser.
        let mut seen = std::collections::HashSet::new();
        while let Some(token) = stream.next() {
            if !seen.insert(token.text.clone()) {
                continue;
            }
            let term = |field| {
                TermQuery::new(
                    Term::from_field_text(field, &token.text),
                    IndexRecordOption::WithFreqs,
                )
            };
            let title = BoostQuery::new(Box::new(term(self.fields.title)), TITLE_BOOST);
            clauses.push((Occur::Should, Box::new(title)));
            clauses.push((Occur::Should, Box::new(term(self.fields.flat))));
        }
        BooleanQuery::new(clauses)
    }
}

#[cfg(test)]
mod tests;
