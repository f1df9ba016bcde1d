//! Bringing a site's index in line with its documents: the first build happens in
//! a folder beside it and is renamed into place; later ingests delete and add
//! what changed in one commit, which readers only see once it is complete. A
//! manifest of content hashes skips unchanged documents.
//!
//! With embedding on (SPEC §21), each new passage's vector is stored in the same
//! document as its text, so a commit holds a passage and its vector or neither:
//! an ingest killed part way leaves the previous generation whole. The manifest
//! records the embedding model with each document's hash, so turning embedding on,
//! or changing the model, re-adds every document with new vectors.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use tantivy::{Index, TantivyDocument, Term};

use super::super::chunk::chunks;
use super::super::dense::encode;
use super::super::fields::schema;
use super::super::source::{Document, Skipped};
use super::Report;

pub(crate) const MANIFEST: &str = "deskbell-manifest.json";
const WRITER_MEMORY: usize = 50_000_000;

/// Makes passages' vectors at ingest.
pub trait Embed: Send + Sync {
    /// The model's name, recorded with each document in the manifest.
    fn model(&self) -> &str;
    /// One unit vector per text, in order.
    fn vectors(&self, texts: &[String]) -> anyhow::Result<Vec<Vec<f32>>>;
}

/// The text a passage's vector is made from: its heading, then its body.
pub fn embedded_text(heading: &str, body: &str) -> String {
    format!("{heading}\n{body}")
}

/// Brings a site's index in line with its documents, holding the folder's lock
/// file meanwhile: processes sharing a data folder (replicas on one machine, or
/// `deskbell ingest` beside a running server) write an index one at a time, so
/// none reads a manifest another is about to replace.
pub fn ingest(
    dir: &Path,
    documents: Vec<Document>,
    skipped: Vec<Skipped>,
    embed: Option<&dyn Embed>,
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
    let report = ingest_locked(dir, documents, skipped, embed);
    let _ = lock.unlock();
    report
}

/// Whether `dir` holds an index this version can add to: one with a manifest
/// and the schema of `fields.rs` (an index from before SPEC §21, or with the
/// vector stored rather than a fast field, or without the `flat` field, is
/// built again).
pub fn current(dir: &Path) -> bool {
    dir.join(MANIFEST).exists() && Index::open_in_dir(dir).is_ok_and(|i| i.schema() == schema().0)
}

fn ingest_locked(
    dir: &Path,
    documents: Vec<Document>,
    skipped: Vec<Skipped>,
    embed: Option<&dyn Embed>,
) -> anyhow::Result<Report> {
    let mut report = Report {
        skipped,
        ..Report::default()
    };
    if !current(dir) {
        // The first build happens aside and is renamed into place, so a reader never
        // finds a half-built index.
        let building = dir.with_extension("building");
        let _ = std::fs::remove_dir_all(&building);
        std::fs::create_dir_all(&building)?;
        let (schema, _) = schema();
        Index::create_in_dir(&building, schema)?;
        let manifest = update(&building, &BTreeMap::new(), &documents, embed, &mut report)?;
        write_manifest(&building, &manifest)?;
        let _ = std::fs::remove_dir_all(dir);
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(&building, dir)?;
        return Ok(report);
    }
    let old = read_manifest(dir)?;
    let manifest = update(dir, &old, &documents, embed, &mut report)?;
    write_manifest(dir, &manifest)?;
    Ok(report)
}

/// A document's hash as the manifest keeps it: with the model that embedded
/// its passages, if one did.
fn kept_hash(document: &Document, model: Option<&str>) -> String {
    match model {
        Some(model) => format!("{}+{model}", document.hash),
        None => document.hash.clone(),
    }
}

/// A passage to add, and its vector once made.
struct New {
    path: String,
    url: String,
    heading: String,
    own_heading: String,
    text: String,
}

/// Deletes changed and vanished documents, adds new and changed ones, one commit.
fn update(
    dir: &Path,
    old: &BTreeMap<String, String>,
    documents: &[Document],
    embed: Option<&dyn Embed>,
    report: &mut Report,
) -> anyhow::Result<BTreeMap<String, String>> {
    let index = Index::open_in_dir(dir)?;
    let (_, f) = schema();
    let mut writer: tantivy::IndexWriter = index.writer(WRITER_MEMORY)?;
    writer.set_merge_policy(Box::new(merge_policy()));
    let mut manifest = BTreeMap::new();
    let mut new = Vec::new();
    let mut changed = Vec::new();
    let model = embed.map(|e| e.model());
    for document in documents {
        manifest.insert(document.path.clone(), kept_hash(document, model));
        match old.get(&document.path) {
            Some(hash) if *hash == kept_hash(document, model) => {
                report.unchanged += 1;
                continue;
            }
            Some(_) => {
                writer.delete_term(Term::from_field_text(f.path, &document.path));
                report.updated += 1;
            }
            None => report.added += 1,
        }
        changed.push(document);
        for chunk in chunks(&document.title, &document.text) {
            new.push(New {
                path: document.path.clone(),
                url: document.url.clone().unwrap_or_default(),
                heading: chunk.heading,
                own_heading: chunk.own_heading,
                text: chunk.text,
            });
        }
    }
    let vectors = vectors_of(&new, embed);
    if vectors.is_none() && embed.is_some() {
        // Recorded without the model, so the next ingest embeds them again.
        for d in changed {
            manifest.insert(d.path.clone(), kept_hash(d, None));
        }
    }
    report.chunks += new.len();
    for (i, n) in new.into_iter().enumerate() {
        let mut doc = TantivyDocument::new();
        doc.add_text(f.path, &n.path);
        doc.add_text(f.title, &n.heading);
        doc.add_text(f.url, &n.url);
        doc.add_text(f.body, &n.text);
        // BM25's `flat` field: the passage's own heading, not its whole path.
        // A parent heading's words say where a section sits, not what it says;
        // counted as text, they made a short subsection outrank its parent on
        // the parent's own topic ("How long does shipping take?" found
        // `Shipping › Express` before `Shipping`). The path is in `title`.
        doc.add_text(f.flat, embedded_text(&n.own_heading, &n.text));
        if let Some(vector) = vectors.as_ref().and_then(|v| v.get(i)) {
            doc.add_bytes(f.vector, &encode(vector));
        }
        writer.add_document(doc)?;
    }
    for path in old.keys().filter(|p| !manifest.contains_key(*p)) {
        writer.delete_term(Term::from_field_text(f.path, path));
        report.removed += 1;
    }
    crate::crashpoint::reached("ingest_before_commit");
    writer.commit()?;
    // The commit may start a merge (a segment past a fifth dead): a crash
    // here lands while it runs.
    crate::crashpoint::reached("ingest_merging");
    writer.wait_merging_threads()?;
    Ok(manifest)
}

/// tantivy's default policy, except that a segment with more than a fifth of
/// its passages dead is merged (rewritten without them, with the other
/// segments of its size level) even when too few segments share its size: the
/// default never merges for deletes alone, and
/// such a segment would keep its dead passages' vectors in memory and be
/// scanned rather than walked for as long as it lasts (`dense::GRAPH_MAX_DEAD`).
fn merge_policy() -> tantivy::merge_policy::LogMergePolicy {
    let mut policy = tantivy::merge_policy::LogMergePolicy::default();
    policy.set_del_docs_ratio_before_merge(super::super::dense::GRAPH_MAX_DEAD as f32);
    policy
}

/// The new passages' vectors, or `None` when embedding is off or failed (the
/// passages are then found by BM25 alone, and embedded at the next ingest).
fn vectors_of(new: &[New], embed: Option<&dyn Embed>) -> Option<Vec<Vec<f32>>> {
    let embed = embed?;
    if new.is_empty() {
        return Some(Vec::new());
    }
    let texts: Vec<String> = new
        .iter()
        .map(|n| embedded_text(&n.heading, &n.text))
        .collect();
    match embed.vectors(&texts) {
        Ok(vectors) if vectors.len() == texts.len() => Some(vectors),
        Ok(_) => {
            tracing::warn!("the embedding model gave a wrong number of vectors; BM25 only");
            None
        }
        Err(e) => {
            tracing::warn!(
                error = format!("{e:#}"),
                "passages could not be embedded; they are found by BM25 alone until the next ingest"
            );
            None
        }
    }
}

pub(super) fn read_manifest(dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
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
