//! One full-text index (tantivy, BM25, English stemming) per site, in
//! `<data_dir>/knowledge/<site>`. The first build happens in a folder beside it and is
//! renamed into place; later ingests update it in one commit, which readers only see
//! once it is complete. A manifest of content hashes skips unchanged documents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexReader, ReloadPolicy, Searcher, Term, doc};

use super::chunk::chunks;
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

#[derive(Clone, Copy)]
pub(super) struct Fields {
    pub path: Field,
    pub title: Field,
    pub url: Field,
    pub body: Field,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let stemmed = TextOptions::default()
        .set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("en_stem")
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        )
        .set_stored();
    let fields = Fields {
        path: builder.add_text_field("path", STRING | STORED),
        title: builder.add_text_field("title", stemmed.clone()),
        url: builder.add_text_field("url", STORED),
        body: builder.add_text_field("body", stemmed),
    };
    (builder.build(), fields)
}

/// A passage found for a question.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    pub title: String,
    pub url: Option<String>,
    pub text: String,
    pub score: f32,
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
mod tests {
    use super::*;

    fn document(path: &str, text: &str, version: u32) -> Document {
        Document {
            path: path.into(),
            title: path.into(),
            url: None,
            text: text.into(),
            hash: format!("{path}-{version}"),
        }
    }

    /// Writers of one folder (replicas on one machine, the CLI beside a server)
    /// take turns: whatever their order, the index holds each document once.
    #[test]
    fn writers_of_one_folder_take_turns_and_leave_no_duplicates() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("knowledge").join("acme");
        let writers: Vec<_> = (0..4)
            .map(|i| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    let docs = vec![
                        document("kettle.md", "Descale the kettle with citric acid.", i % 2),
                        document("returns.md", "Return anything within thirty days.", 0),
                    ];
                    ingest(&dir, docs, Vec::new()).unwrap()
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let index = SiteIndex::open(&dir).unwrap();
        index.reload().unwrap();
        let found = index.search("citric acid kettle", 10).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(read_manifest(&dir).unwrap().len(), 2);
    }

    /// A search never waits for the kept text: one that meets an update first
    /// (here tantivy's own reload, as after an ingest by another process) reads
    /// the document store, and the new generation is kept soon after.
    #[test]
    fn a_search_meeting_an_update_first_reads_the_store_and_the_text_is_kept_after() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("knowledge").join("acme");
        let kettle = |fix: &str, version| {
            vec![document(
                "kettle.md",
                &format!("Descale the kettle with {fix}."),
                version,
            )]
        };
        ingest(&dir, kettle("citric acid", 0), Vec::new()).unwrap();
        let index = SiteIndex::open(&dir).unwrap();
        assert!(index.texts.kept(&index.reader.searcher()));
        ingest(&dir, kettle("white vinegar", 1), Vec::new()).unwrap();
        index.reader.reload().unwrap();
        assert!(!index.texts.kept(&index.reader.searcher()));
        let found = index.search("descale the kettle", 5).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].text, "Descale the kettle with white vinegar.");
        let waited = std::time::Instant::now();
        while !index.texts.kept(&index.reader.searcher()) {
            assert!(
                waited.elapsed().as_secs() < 10,
                "the new text was never kept"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let again = index.search("descale the kettle", 5).unwrap();
        assert_eq!(again, found);
    }

    /// Passages come back the same from memory as from the document store, and
    /// an update is seen after a reload: the kept text follows the searcher's
    /// generation, whose document addresses are its own.
    #[test]
    fn kept_passages_match_the_store_and_follow_each_update() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("knowledge").join("acme");
        let docs = |version, fix: &str| {
            vec![
                document(
                    "kettle.md",
                    &format!("Descale the kettle with {fix}."),
                    version,
                ),
                document("returns.md", "Return anything within thirty days.", version),
                document("shipping.md", "Parcels leave the warehouse daily.", version),
            ]
        };
        ingest(&dir, docs(0, "citric acid"), Vec::new()).unwrap();
        let kept = SiteIndex::open(&dir).unwrap();
        let stored = SiteIndex::open_keeping(&dir, 0).unwrap();
        assert!(kept.texts.kept(&kept.reader.searcher()));
        assert!(!stored.texts.kept(&stored.reader.searcher()));
        for question in ["citric acid kettle", "return days", "warehuose", "nothing"] {
            assert_eq!(
                kept.search(question, 5).unwrap(),
                stored.search(question, 5).unwrap(),
                "{question}"
            );
        }
        // Every document changes, so the old segment goes and the new one's
        // addresses are the old ones: kept text read for the old generation
        // would be the wrong text at the right address.
        ingest(&dir, docs(1, "white vinegar"), Vec::new()).unwrap();
        kept.reload().unwrap();
        stored.reload().unwrap();
        for question in ["descale the kettle", "vinegar", "parcels"] {
            let found = kept.search(question, 5).unwrap();
            assert_eq!(found, stored.search(question, 5).unwrap(), "{question}");
            assert!(
                !found.iter().any(|p| p.text.contains("citric")),
                "{found:?}"
            );
        }
        let found = kept.search("descale the kettle", 1).unwrap();
        assert!(found[0].text.contains("white vinegar"), "{found:?}");
    }

    /// A site's index of `docs` in a fresh folder, which the first value keeps.
    fn index_of(docs: Vec<Document>) -> (tempfile::TempDir, SiteIndex) {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("knowledge").join("acme");
        ingest(&dir, docs, Vec::new()).unwrap();
        let index = SiteIndex::open(&dir).unwrap();
        (data, index)
    }

    /// tantivy reloads with nothing changed too (its watcher's first look at a
    /// just-written index): the new generation has the same segments, so the
    /// kept text still serves it.
    #[test]
    fn a_reload_with_nothing_changed_keeps_the_text() {
        let (_data, index) = index_of(vec![document("kettle.md", "Descale the kettle.", 0)]);
        let before = index.reader.searcher().generation().generation_id();
        index.reader.reload().unwrap();
        let searcher = index.reader.searcher();
        assert_ne!(searcher.generation().generation_id(), before);
        assert!(index.texts.kept(&searcher));
    }

    /// The query language is not for visitors: a question's `NOT`, `AND` or `OR`
    /// is a word like any other, and excludes nothing.
    #[test]
    fn a_question_s_operator_words_are_only_words() {
        let (_data, index) = index_of(vec![document("shipping.md", "Shipping takes two days.", 0)]);
        for question in [
            "NOT shipping",
            "shipping AND returns",
            "-shipping",
            "shipping OR",
            "NOT shiping",
        ] {
            assert_eq!(index.search(question, 5).unwrap().len(), 1, "{question}");
        }
    }

    /// The in-place search (`Knowledge::search_top`) tries the words only as
    /// written, only for a short question and only when the passages' text is
    /// in memory (the document store would be a read from disk); the rest is
    /// left to the full search, which forgives a typo.
    #[test]
    fn only_a_short_exact_question_is_searched_in_place() {
        let (data, index) = index_of(vec![document("shipping.md", "Shipping takes two days.", 0)]);
        let stored =
            SiteIndex::open_keeping(&data.path().join("knowledge").join("acme"), 0).unwrap();
        assert_eq!(stored.search_in_place("shipping", 5).unwrap(), None);
        assert_eq!(stored.search("shipping", 5).unwrap().len(), 1);
        let in_place = |q: &str| index.search_in_place(q, 5).unwrap().map(|p| p.len());
        assert_eq!(in_place("shipping"), Some(1));
        assert_eq!(in_place("shiping"), None);
        assert_eq!(index.search("shiping", 5).unwrap().len(), 1);
        let long = format!("shipping{}", " and".repeat(IN_PLACE_WORDS));
        assert_eq!(in_place(&long), None);
        assert_eq!(index.search(&long, 5).unwrap().len(), 1);
    }

    /// A larger index is searched on a blocking thread, however short the
    /// question: its search may take longer than a task should hold a thread.
    #[test]
    fn a_large_index_is_not_searched_in_place() {
        let passages = IN_PLACE_PASSAGES as usize + 1;
        let docs = (0..passages)
            .map(|i| {
                document(
                    &format!("doc{i}.md"),
                    &format!("Parcel {i} ships daily."),
                    0,
                )
            })
            .collect();
        let (_data, index) = index_of(docs);
        assert_eq!(index.reader.searcher().num_docs(), passages as u64);
        assert_eq!(index.search_in_place("parcel", 5).unwrap(), None);
        assert_eq!(index.search("parcel", 5).unwrap().len(), 5);
    }

    /// The question parser's exact query as it was: one group per word over the
    /// title (boosted) and the body.
    fn parsed_query(index: &SiteIndex, cleaned: &str) -> Box<dyn Query> {
        let tantivy = index.reader.searcher().index().clone();
        let mut parser =
            QueryParser::for_index(&tantivy, vec![index.fields.title, index.fields.body]);
        parser.set_field_boost(index.fields.title, TITLE_BOOST);
        parser.parse_query_lenient(cleaned).0
    }

    fn scored(
        index: &SiteIndex,
        query: &dyn Query,
        limit: usize,
    ) -> Vec<(f32, tantivy::DocAddress)> {
        let top = TopDocs::with_limit(limit).order_by_score();
        index.reader.searcher().search(query, &top).unwrap()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

        /// The flat exact query finds the passages the parser's nested one finds,
        /// with the same scores, for every limit: skipping blocks changes the work,
        /// never the answer.
        #[test]
        fn the_flat_exact_query_scores_as_the_parsed_one(
            texts in proptest::collection::vec(proptest::collection::vec(0usize..40, 1..30), 1..400),
            questions in proptest::collection::vec(proptest::collection::vec(0usize..45, 0..6), 1..12),
            limit in 1usize..6,
        ) {
            let word = |w: usize| format!("w{}ord{}", w % 7, w);
            let docs = texts
                .iter()
                .enumerate()
                .map(|(i, words)| {
                    let text: Vec<String> = words.iter().map(|&w| word(w)).collect();
                    let mut doc = document(&format!("doc{i}.md"), &text.join(" "), 0);
                    doc.title = word(words[0]);
                    doc
                })
                .collect();
            let (_data, index) = index_of(docs);
            for question in &questions {
                let words: Vec<String> = question.iter().map(|&w| word(w)).collect();
                let cleaned = words.join(" ");
                let flat = index.exact_query(&cleaned);
                let parsed = parsed_query(&index, &cleaned);
                // With room for every passage, the same passages with the same scores.
                let mut everything = scored(&index, &flat, texts.len());
                let mut before = scored(&index, parsed.as_ref(), texts.len());
                everything.sort_by_key(|(_, address)| *address);
                before.sort_by_key(|(_, address)| *address);
                proptest::prop_assert_eq!(everything.len(), before.len(), "{}", cleaned);
                for ((a, x), (b, y)) in everything.iter().zip(&before) {
                    proptest::prop_assert_eq!(x, y);
                    proptest::prop_assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{} {} {}", cleaned, a, b);
                }
                // With a small limit, the same best scores (ties may pick either passage).
                let best = scored(&index, &flat, limit);
                let best_before = scored(&index, parsed.as_ref(), limit);
                proptest::prop_assert_eq!(best.len(), best_before.len());
                for ((a, _), (b, _)) in best.iter().zip(&best_before) {
                    proptest::prop_assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{} {} {}", cleaned, a, b);
                }
            }
        }
    }
}
