//! The operator's knowledge: sources read into documents (`source.rs`, `html.rs`),
//! chunked by structure (`chunk.rs`) and indexed per site for BM25 search
//! (`index.rs`). A question's turn gives the best passages to the model as numbered
//! sources; the answer's `[n]` markers become its citations.

mod chunk;
mod document;
mod fetch_guard;
mod fields;
mod html;
mod index;
mod progress;
pub mod shared;
mod source;
mod texts;
mod web;

pub use document::Document;
pub use index::{Passage, Report};
pub use progress::Progress;
pub use source::Skipped;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::config::{Config, SiteConfig};

/// Passages given to the model per question.
pub const PASSAGES: usize = 6;

/// Each site's search index. With `open_shared` (the server's way) the indexes
/// are caches of the database's documents, kept current by `follow_forever`.
#[derive(Default)]
pub struct Knowledge {
    sites: RwLock<HashMap<String, Arc<index::SiteIndex>>>,
    /// The database's knowledge version each site's index was last brought to.
    versions: std::sync::Mutex<HashMap<String, i64>>,
    /// One writer of the local indexes at a time.
    writing: tokio::sync::Mutex<()>,
}

impl Knowledge {
    /// Opens every site's index, building those that are missing first.
    pub async fn open(config: &Config) -> anyhow::Result<Knowledge> {
        let mut sites = HashMap::new();
        for site in config.sites.iter().filter(|s| !s.knowledge.is_empty()) {
            let dir = index::folder(&config.server.data_dir, &site.id);
            if !dir.exists() {
                let report = ingest_site(&config.server.data_dir, site).await?;
                log_report(&site.id, &report);
            }
            sites.insert(site.id.clone(), Arc::new(index::SiteIndex::open(&dir)?));
        }
        Ok(Knowledge {
            sites: RwLock::new(sites),
            ..Default::default()
        })
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
        // When nothing matched as written, the blocking search repeats this
        // (cheap, as it was in place) before its typo-forgiving try.
        if let Some(found) = index.search_in_place(question, limit)? {
            return Ok(found);
        }
        let question = question.to_string();
        tokio::task::spawn_blocking(move || index.search(&question, limit)).await?
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

/// Reads a site's sources and brings its index up to date.
pub async fn ingest_site(data_dir: &Path, site: &SiteConfig) -> anyhow::Result<Report> {
    let (documents, skipped) = source::read_sources(&site.knowledge, &Default::default()).await;
    let dir = index::folder(data_dir, &site.id);
    tokio::task::spawn_blocking(move || index::ingest(&dir, documents, skipped)).await?
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
