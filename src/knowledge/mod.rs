//! The operator's knowledge: sources read into documents (`source.rs`, `html.rs`),
//! chunked by structure (`chunk.rs`) and indexed per site (`index/`). A question
//! is searched by BM25 and, when the embedding model is loaded (`embed/`), by
//! meaning over the passages' vectors (`dense/`), the two fused by reciprocal
//! rank (`fuse.rs`; SPEC §21). A question's turn gives the best passages to the
//! model as numbered sources; the answer's `[n]` markers become its citations.

mod chunk;
pub mod dense;
mod document;
pub mod embed;
mod fetch_guard;
mod fields;
mod fuse;
mod html;
mod index;
mod progress;
pub mod shared;
mod source;
mod texts;
mod web;

pub use document::Document;
pub use index::Embed;
pub use index::{Found, Passage, Report};
pub use progress::Progress;
pub use source::Skipped;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use crate::config::{Config, SiteConfig};

/// Passages given to the model per question.
pub const PASSAGES: usize = 6;

/// How deep each of the two searches goes before fusion: a passage ranked this
/// far down by one search still counts when the other ranks it high.
const DEPTH: usize = 40;

/// Each site's search index. With `open_shared` (the server's way) the indexes
/// are caches of the database's documents, kept current by `follow_forever`.
#[derive(Default)]
pub struct Knowledge {
    sites: RwLock<HashMap<String, Arc<index::SiteIndex>>>,
    /// The database's knowledge version each site's index was last brought to.
    versions: std::sync::Mutex<HashMap<String, i64>>,
    /// One writer of the local indexes at a time.
    writing: tokio::sync::Mutex<()>,
    /// The embedding model, when loaded; without it, search is BM25 alone.
    embedding: Option<Arc<embed::Embedding>>,
}

impl Knowledge {
    /// Opens every site's index, building first those that are missing or of
    /// another version's schema (which `SiteIndex::open` would refuse).
    pub async fn open(config: &Config) -> anyhow::Result<Knowledge> {
        let embedding = embed::open(config).await;
        let mut sites = HashMap::new();
        for site in config.sites.iter().filter(|s| !s.knowledge.is_empty()) {
            let dir = index::folder(&config.server.data_dir, &site.id);
            if !index::current(&dir) {
                let report = ingest_site(&config.server.data_dir, site, embedding.clone()).await?;
                log_report(&site.id, &report);
            }
            // Opening reads every vector and builds the graphs of large
            // segments (some 40 s of one core a 100,000 passages): not on an
            // async thread.
            let index = tokio::task::spawn_blocking(move || index::SiteIndex::open(&dir)).await??;
            sites.insert(site.id.clone(), Arc::new(index));
        }
        Ok(Knowledge {
            sites: RwLock::new(sites),
            embedding,
            ..Default::default()
        })
    }

    /// No index yet, and the embedding model the configuration asks for: for
    /// `deskbell ingest`, which builds the indexes it publishes.
    pub async fn embedding_with(config: &Config) -> Knowledge {
        Knowledge {
            embedding: embed::open(config).await,
            ..Knowledge::default()
        }
    }

    /// The embedding model, when loaded.
    pub fn embedding(&self) -> Option<&Arc<embed::Embedding>> {
        self.embedding.as_ref()
    }

    fn index(&self, site: &str) -> Option<Arc<index::SiteIndex>> {
        let sites = self.sites.read().unwrap_or_else(|e| e.into_inner());
        sites.get(site).cloned()
    }

    /// The passages most relevant to a question.
    pub async fn search(&self, site: &str, question: &str) -> anyhow::Result<Vec<Passage>> {
        self.search_top(site, question, PASSAGES).await
    }

    /// The `limit` best passages: in place when the exact search is cheap
    /// (`SiteIndex::search_in_place`), otherwise on a blocking thread.
    pub async fn search_top(
        &self,
        site: &str,
        question: &str,
        limit: usize,
    ) -> anyhow::Result<Vec<Passage>> {
        let Some(index) = self.index(site) else {
            return Ok(Vec::new());
        };
        if let (Some(dense), Some(embedding)) = (index.dense(), self.embedding.clone()) {
            return hybrid(index, dense, embedding, question, limit, Mode::Hybrid).await;
        }
        // When nothing matched as written, the blocking search repeats this
        // (cheap, as it was in place) before its typo-forgiving try.
        if let Some(found) = index.search_in_place(question, limit)? {
            return Ok(found);
        }
        let question = question.to_string();
        tokio::task::spawn_blocking(move || index.search(&question, limit)).await?
    }

    /// The `limit` best passages by one search alone, or both fused, for the
    /// retrieval benchmark (`deskbell-bench --only retrieval-quality`).
    pub async fn search_by(
        &self,
        site: &str,
        question: &str,
        limit: usize,
        mode: Mode,
    ) -> anyhow::Result<Vec<Passage>> {
        let Some(index) = self.index(site) else {
            return Ok(Vec::new());
        };
        match (mode, index.dense(), self.embedding.clone()) {
            (Mode::Bm25, _, _) => {
                let question = question.to_string();
                tokio::task::spawn_blocking(move || index.search(&question, limit)).await?
            }
            (_, Some(dense), Some(embedding)) => {
                hybrid(index, dense, embedding, question, limit, mode).await
            }
            _ => anyhow::bail!("the site has no vectors, or no embedding model is loaded"),
        }
    }

    /// Makes a site's searches see its latest ingest at once, rather than after
    /// the reader's own reload delay.
    /// How often a site's index was reloaded since it was opened.
    pub fn reloads(&self, site: &str) -> usize {
        self.index(site).map_or(0, |index| index.reloads())
    }

    pub fn has(&self, site: &str) -> bool {
        self.index(site).is_some()
    }
}

/// Which searches a question goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Bm25,
    Dense,
    Hybrid,
}

/// BM25 and the search by meaning at once, fused: the question is embedded
/// and its nearest passages found on a kernels' worker (its result awaited
/// here, with no blocking thread between) while BM25 runs (in place when
/// cheap), both in the generation the vectors were read from.
async fn hybrid(
    index: Arc<index::SiteIndex>,
    dense: Arc<dense::Dense>,
    embedding: Arc<embed::Embedding>,
    question: &str,
    limit: usize,
    mode: Mode,
) -> anyhow::Result<Vec<Passage>> {
    // A question of no words finds nothing, as with BM25 alone.
    if index::words_only(question).trim().is_empty() {
        return Ok(Vec::new());
    }
    let owned = question.to_string();
    let depth = DEPTH.max(limit);
    let asked = Instant::now();
    // Handed to the kernels' workers now, so that it runs while BM25 does.
    let near = {
        let dense = dense.clone();
        embedding.embed_one_then(owned, move |vector, started| {
            let embedded = Instant::now();
            let near = dense.nearest(&vector, depth);
            let times = SearchTimes {
                asked,
                started,
                embedded,
                found: Instant::now(),
            };
            (near, times)
        })
    };
    let bm25 = if mode == Mode::Dense {
        Vec::new()
    } else if index.cheap(&dense.searcher, question) {
        index.bm25(&dense.searcher, question, depth, true)?
    } else {
        let (index, dense, question) = (index.clone(), dense.clone(), question.to_string());
        tokio::task::spawn_blocking(move || index.bm25(&dense.searcher, &question, depth, true))
            .await??
    };
    let bm25_done = Instant::now();
    let near = match near.await {
        Ok((near, times)) => {
            times.log(bm25_done);
            near
        }
        Err(e) => {
            // The model failing on one question leaves it to BM25.
            tracing::warn!(error = format!("{e:#}"), "a question could not be embedded");
            Vec::new()
        }
    };
    index.passages(&dense.searcher, fuse::rrf(&bm25, &near, limit))
}

/// When a hybrid search's parts began and ended, for one debug line under the
/// first token's target (`ask/turn/phases.rs`): it says whether the embedding,
/// the search by meaning or the hand-offs between threads took the time.
struct SearchTimes {
    asked: Instant,
    started: Instant,
    embedded: Instant,
    found: Instant,
}

impl SearchTimes {
    fn log(&self, bm25_done: Instant) {
        let us = |from: Instant, to: Instant| to.saturating_duration_since(from).as_micros() as u64;
        tracing::debug!(
            target: "deskbell::first_token",
            queued_us = us(self.asked, self.started),
            embed_us = us(self.started, self.embedded),
            nearest_us = us(self.embedded, self.found),
            bm25_us = us(self.asked, bm25_done),
            joined_us = us(self.found, Instant::now()),
            "hybrid search"
        );
    }
}

/// Reads a site's sources and brings its index up to date, embedding new
/// passages when a model is given.
pub async fn ingest_site(
    data_dir: &Path,
    site: &SiteConfig,
    embedding: Option<Arc<embed::Embedding>>,
) -> anyhow::Result<Report> {
    let embed = embedding.map(|e| Arc::new(embed::Cached::new(e, None)) as Arc<dyn Embed>);
    ingest_site_with(data_dir, site, embed).await
}

/// `ingest_site` with vectors from `embed` (the benchmark's stand-in vectors
/// for 100,000 passages).
pub async fn ingest_site_with(
    data_dir: &Path,
    site: &SiteConfig,
    embed: Option<Arc<dyn Embed>>,
) -> anyhow::Result<Report> {
    let (documents, skipped) = source::read_sources(&site.knowledge, &Default::default()).await;
    let dir = index::folder(data_dir, &site.id);
    tokio::task::spawn_blocking(move || index::ingest(&dir, documents, skipped, embed.as_deref()))
        .await?
}

pub fn log_report(site: &str, r: &Report) {
    tracing::info!(
        site,
        added = r.added,
        updated = r.updated,
        unchanged = r.unchanged,
        removed = r.removed,
        chunks = r.chunks,
        "knowledge indexed"
    );
    for s in &r.skipped {
        tracing::warn!(
            site,
            path = %crate::secret::loggable_url(&s.path),
            reason = %s.reason,
            "knowledge source skipped"
        );
    }
}

#[cfg(test)]
mod tests;
