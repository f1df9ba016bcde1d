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
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::{Index, IndexReader, ReloadPolicy, TantivyDocument, Term, doc};

use super::chunk::chunks;
use super::source::{Document, Skipped};

const MANIFEST: &str = "deskbell-manifest.json";
const WRITER_MEMORY: usize = 50_000_000;

#[derive(Clone, Copy)]
struct Fields {
    path: Field,
    title: Field,
    url: Field,
    body: Field,
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
    index: Index,
    reader: IndexReader,
    fields: Fields,
}

pub fn folder(data_dir: &Path, site: &str) -> PathBuf {
    data_dir.join("knowledge").join(site)
}

impl SiteIndex {
    pub fn open(dir: &Path) -> anyhow::Result<SiteIndex> {
        let index = Index::open_in_dir(dir)
            .with_context(|| format!("cannot open the index in {}", dir.display()))?;
        let (_, fields) = schema();
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::OnCommitWithDelay)
            .try_into()?;
        Ok(SiteIndex {
            index,
            reader,
            fields,
        })
    }

    pub fn reload(&self) -> anyhow::Result<()> {
        Ok(self.reader.reload()?)
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
        for typos in [false, true] {
            let mut parser =
                QueryParser::for_index(&self.index, vec![self.fields.title, self.fields.body]);
            parser.set_field_boost(self.fields.title, 1.5);
            if typos {
                parser.set_field_fuzzy(self.fields.body, false, 1, true);
                parser.set_field_fuzzy(self.fields.title, false, 1, true);
            }
            let (query, _) = parser.parse_query_lenient(&cleaned);
            hits = searcher.search(&query, &TopDocs::with_limit(limit.max(1)).order_by_score())?;
            if !hits.is_empty() {
                break;
            }
        }
        hits.into_iter()
            .map(|(score, address)| {
                let d: TantivyDocument = searcher.doc(address)?;
                let text = |f: Field| {
                    d.get_first(f)
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .to_string()
                };
                let url = text(self.fields.url);
                Ok(Passage {
                    title: text(self.fields.title),
                    url: (!url.is_empty()).then_some(url),
                    text: text(self.fields.body),
                    score,
                })
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
}
