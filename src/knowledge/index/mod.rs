//! One full-text index (tantivy, BM25, English stemming) per site, in
//! `<data_dir>/knowledge/<site>`. The first build happens in a folder beside it and is
//! renamed into place; later ingests update it in one commit, which readers only see
//! once it is complete. A manifest of content hashes skips unchanged documents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexReader, ReloadPolicy, Searcher, Term, doc};

use super::chunk::chunks;
pub use super::fields::Passage;
use super::fields::{Fields, schema};
use super::source::{Document, Skipped};
use super::texts::{self, Texts};

const MANIFEST: &str = "deskbell-manifest.json";
const WRITER_MEMORY: usize = 50_000_000;
/// How much more a word in a passage's title counts than one in its body.
const TITLE_BOOST: f32 = 1.5;

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
fn words_only(question: &str) -> String {
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
        let mut fuzzy = QueryParser::for_index(&index, vec![fields.title, fields.body]);
        fuzzy.set_field_boost(fields.title, TITLE_BOOST);
        fuzzy.set_field_fuzzy(fields.body, false, 1, true);
        fuzzy.set_field_fuzzy(fields.title, false, 1, true);
        let site = SiteIndex {
            words: index.tokenizer_for_field(fields.body)?,
            fuzzy,
            reader,
            fields,
            texts: Texts::new(limit),
            reloads: Default::default(),
        };
        site.texts.read(&site.reader.searcher(), fields)?;
        Ok(site)
    }

    /// Sees the latest commit now, and reads its passages before a question
    /// needs them.
    pub fn reload(&self) -> anyhow::Result<()> {
        self.reloads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.reader.reload()?;
        self.texts.read(&self.reader.searcher(), self.fields)?;
        Ok(())
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
        let cleaned = words_only(question);
        if searcher.num_docs() > IN_PLACE_PASSAGES
            || cleaned.split_whitespace().count() > IN_PLACE_WORDS
            || !self.texts.kept(&searcher)
        {
            return Ok(None);
        }
        let found = self.find(&searcher, &cleaned, limit, false)?;
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
        let top = TopDocs::with_limit(limit.max(1)).order_by_score();
        let mut hits = searcher.search(&self.exact_query(cleaned), &top)?;
        if hits.is_empty() && fuzzy {
            // Lower case, so that the parser takes no word for an operator.
            let (query, _) = self.fuzzy.parse_query_lenient(&cleaned.to_lowercase());
            hits = searcher.search(&query, &top)?;
        }
        hits.into_iter()
            .map(|(score, address)| {
                let mut passage = self.texts.get(searcher, self.fields, address)?;
                passage.score = score;
                Ok(passage)
            })
            .collect()
    }

    /// Every word of the question in the title (boosted) or the body, as one
    /// flat disjunction of term queries. It scores each passage as the query
    /// parser's `(title:w OR body:w) OR …` does, BM25 summed over the same terms,
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
            clauses.push((Occur::Should, Box::new(term(self.fields.body))));
        }
        BooleanQuery::new(clauses)
    }
}

/// Brings a site's index in line with its documents, holding the folder's lock
/// file meanwhile: processes sharing a data folder (replicas on one machine, or
/// `deskbell ingest` beside a running server) write an index one at a time, so
/// none reads a manifest another is about to replace.
pub fn ingest(
    dir: &Path,
    documents: Vec<Document>,
    skipped: Vec<Skipped>,
) -> anyhow::Result<Report> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.with_extension("lock"))
        .with_context(|| format!("cannot open the lock file beside {}", dir.display()))?;
    lock.lock()?;
    let report = ingest_locked(dir, documents, skipped);
    let _ = lock.unlock();
    report
}

fn ingest_locked(
    dir: &Path,
    documents: Vec<Document>,
    skipped: Vec<Skipped>,
) -> anyhow::Result<Report> {
    let mut report = Report {
        skipped,
        ..Report::default()
    };
    if !dir.join(MANIFEST).exists() {
        // The first build happens aside and is renamed into place, so a reader never
        // finds a half-built index.
        let building = dir.with_extension("building");
        let _ = std::fs::remove_dir_all(&building);
        std::fs::create_dir_all(&building)?;
        let (schema, _) = schema();
        Index::create_in_dir(&building, schema)?;
        let manifest = update(&building, &BTreeMap::new(), &documents, &mut report)?;
        write_manifest(&building, &manifest)?;
        let _ = std::fs::remove_dir_all(dir);
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(&building, dir)?;
        return Ok(report);
    }
    let old = read_manifest(dir)?;
    let manifest = update(dir, &old, &documents, &mut report)?;
    write_manifest(dir, &manifest)?;
    Ok(report)
}

/// Deletes changed and vanished documents, adds new and changed ones, one commit.
fn update(
    dir: &Path,
    old: &BTreeMap<String, String>,
    documents: &[Document],
    report: &mut Report,
) -> anyhow::Result<BTreeMap<String, String>> {
    let index = Index::open_in_dir(dir)?;
    let (_, f) = schema();
    let mut writer: tantivy::IndexWriter = index.writer(WRITER_MEMORY)?;
    let mut manifest = BTreeMap::new();
    for document in documents {
        manifest.insert(document.path.clone(), document.hash.clone());
        match old.get(&document.path) {
            Some(hash) if *hash == document.hash => {
                report.unchanged += 1;
                continue;
            }
            Some(_) => {
                writer.delete_term(Term::from_field_text(f.path, &document.path));
                report.updated += 1;
            }
            None => report.added += 1,
        }
        for chunk in chunks(&document.title, &document.text) {
            report.chunks += 1;
            writer.add_document(doc!(
                f.path => document.path.clone(),
                f.title => chunk.heading,
                f.url => document.url.clone().unwrap_or_default(),
                f.body => chunk.text,
            ))?;
        }
    }
    for path in old.keys().filter(|p| !manifest.contains_key(*p)) {
        writer.delete_term(Term::from_field_text(f.path, path));
        report.removed += 1;
    }
    writer.commit()?;
    writer.wait_merging_threads()?;
    Ok(manifest)
}

fn read_manifest(dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(dir.join(MANIFEST))?;
    Ok(serde_json::from_str(&text)?)
}

/// Written aside and renamed, so a crash leaves the old manifest or the new one.
fn write_manifest(dir: &Path, manifest: &BTreeMap<String, String>) -> anyhow::Result<()> {
    let tmp = dir.join(format!("{MANIFEST}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(manifest)?)?;
    std::fs::rename(&tmp, dir.join(MANIFEST))?;
    Ok(())
}

#[cfg(test)]
mod tests;
