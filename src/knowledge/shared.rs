//! Knowledge shared by replicas (SPEC §16): an ingest, on whichever replica or
//! from the command line, writes the documents it read to the database and moves
//! the site's knowledge version; every replica's index is a cache of those
//! documents, brought up to date (incrementally: unchanged documents are skipped
//! by hash) when the version moves, checked every `FOLLOW_EVERY`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{Knowledge, Report, index, log_report, source};
use crate::config::{Config, SiteConfig};
use crate::store::Store;

/// How often a replica looks for knowledge ingested elsewhere.
pub const FOLLOW_EVERY: Duration = Duration::from_secs(2);

impl Knowledge {
    /// Opens every site's index from the database's documents; a site whose
    /// documents the database does not have yet (a first start) is read from its
    /// sources and published first.
    pub async fn open_shared(config: &Config, store: &Store) -> anyhow::Result<Knowledge> {
        let knowledge = Knowledge::embedding_with(config).await;
        for site in config.sites.iter().filter(|s| !s.knowledge.is_empty()) {
            if store.knowledge().version(&site.id).await? == 0 {
                let (documents, skipped) =
                    source::read_sources(&site.knowledge, &Default::default()).await;
                store.knowledge().save(&site.id, &documents).await?;
                for s in &skipped {
                    tracing::warn!(site = %site.id, path = %crate::secret::loggable_url(&s.path), reason = %s.reason, "knowledge source skipped");
                }
            }
            if let Some(report) = knowledge
                .follow(store, &config.server.data_dir, &site.id)
                .await?
            {
                log_report(&site.id, &report);
            }
        }
        Ok(knowledge)
    }

    /// Reads a site's sources, publishes what they hold to every replica, and
    /// brings this replica's index up to date at once.
    pub async fn ingest(
        &self,
        store: &Store,
        data_dir: &Path,
        site: &SiteConfig,
    ) -> anyhow::Result<Report> {
        self.ingest_with(store, data_dir, site, &Default::default())
            .await
    }

    /// Like `ingest`, counting what was read in `progress` as it goes.
    pub async fn ingest_with(
        &self,
        store: &Store,
        data_dir: &Path,
        site: &SiteConfig,
        progress: &super::Progress,
    ) -> anyhow::Result<Report> {
        let (documents, skipped) = source::read_sources(&site.knowledge, progress).await;
        // Published and indexed under the writer's lock: the follower must not
        // bring the index up to the new version first, or this ingest would find
        // nothing left to do and report every document as unchanged.
        let _one = self.writing.lock().await;
        store.knowledge().save(&site.id, &documents).await?;
        let mut report = self
            .follow_locked(store, data_dir, &site.id)
            .await?
            .unwrap_or_else(|| {
                // Nothing moved: every document is as the index has it.
                Report {
                    unchanged: documents.len(),
                    ..Report::default()
                }
            });
        report.skipped = skipped;
        Ok(report)
    }

    /// Brings one site's index to the database's version, if it is behind.
    async fn follow(
        &self,
        store: &Store,
        data_dir: &Path,
        site: &str,
    ) -> anyhow::Result<Option<Report>> {
        let _one = self.writing.lock().await;
        self.follow_locked(store, data_dir, site).await
    }

    /// `follow`, for a caller that holds `writing`.
    async fn follow_locked(
        &self,
        store: &Store,
        data_dir: &Path,
        site: &str,
    ) -> anyhow::Result<Option<Report>> {
        let version = store.knowledge().version(site).await?;
        let known = self.known_version(site);
        if version == 0 || Some(version) == known {
            return Ok(None);
        }
        let (version, documents) = store.knowledge().documents(site).await?;
        let dir = index::folder(data_dir, site);
        let building = dir.clone();
        let embed = self.embedding.clone().map(|e| {
            Arc::new(super::embed::Cached::new(e, Some(store.clone()))) as Arc<dyn index::Embed>
        });
        let report = tokio::task::spawn_blocking(move || {
            index::ingest(&building, documents, Vec::new(), embed.as_deref())
        })
        .await??;
        // A reload reads every passage's text and may build a segment's search
        // graph (seconds): a blocking thread's work, not an async worker's.
        let existing = self.index(site);
        let opened = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            Ok(match existing {
                Some(index) => {
                    index.reload()?;
                    index
                }
                None => Arc::new(index::SiteIndex::open(&dir)?),
            })
        })
        .await??;
        self.sites
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(site.to_string(), opened);
        self.versions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(site.to_string(), version);
        Ok(Some(report))
    }

    fn known_version(&self, site: &str) -> Option<i64> {
        let versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        versions.get(site).copied()
    }
}

/// Follows the database's knowledge for every site with sources, forever.
pub async fn follow_forever(app: crate::app::App) {
    let mut tick = tokio::time::interval(FOLLOW_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for site in app.config.sites.iter().filter(|s| !s.knowledge.is_empty()) {
            match app
                .knowledge
                .follow(&app.store, &app.config.server.data_dir, &site.id)
                .await
            {
                Ok(Some(report)) => log_report(&site.id, &report),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(site = %site.id, error = format!("{e:#}"), "knowledge could not be brought up to date")
                }
            }
        }
    }
}
