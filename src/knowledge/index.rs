//! One full-text index (tantivy, BM25, English stemming) per site, in
//! `<data_dir>/knowledge/<site>`. The first build happens in a folder beside it and is
//! renamed into place; later ingests update it in one commit, which readers only see
//! once it is complete. A manifest of content hashes skips unchanged documents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::{Index, IndexReader, ReloadPolicy, Term, doc};

use super::chunk::chunks;
use super::source::{Document, Skipped};
use super::texts::{self, Texts};

const MANIFEST: &str = "deskbell-manifest.json";
const WRITER_MEMORY: usize = 50_000_000;

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
    /// The question parsers, exact and allowing one typo per word, made once:
    /// each holds the index's schema and tokenizers.
    exact: QueryParser,
    fuzzy: QueryParser,
    texts: Texts,
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
        let parser = |typos: bool| {
            let mut parser = QueryParser::for_index(&index, vec![fields.title, fields.body]);
            parser.set_field_boost(fields.title, 1.5);
            if typos {
                parser.set_field_fuzzy(fields.body, false, 1, true);
                parser.set_field_fuzzy(fields.title, false, 1, true);
            }
            parser
        };
        let site = SiteIndex {
            exact: parser(false),
            fuzzy: parser(true),
            reader,
            fields,
            texts: Texts::new(limit),
        };
        site.texts.read(&site.reader.searcher(), fields)?;
        Ok(site)
    }

    /// Sees the latest commit now, and reads its passages before a question
    /// needs them.
    pub fn reload(&self) -> anyhow::Result<()> {
        self.reader.reload()?;
        self.texts.read(&self.reader.searcher(), self.fields)?;
        Ok(())
    }

    /// The best `limit` passages by BM25; when no word matches exactly, a second
    /// try allows one typo per word.
    pub fn search(&self, question: &str, limit: usize) -> anyhow::Result<Vec<Passage>> {
        let searcher = self.reader.searcher();
        // Only words: the query language's operators are not for visitors.
        let cleaned: String = question
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { ' ' })
            .collect();
        let mut hits = Vec::new();
        for parser in [&self.exact, &self.fuzzy] {
            let (query, _) = parser.parse_query_lenient(&cleaned);
            hits = searcher.search(&query, &TopDocs::with_limit(limit.max(1)).order_by_score())?;
            if !hits.is_empty() {
                break;
            }
        }
        hits.into_iter()
            .map(|(score, address)| {
                let mut passage = self.texts.get(&searcher, self.fields, address)?;
                passage.score = score;
                Ok(passage)
            })
            .collect()
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
}
