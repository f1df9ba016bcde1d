//! A site's tools as they stand now: the file's tools with the console's
//! overrides applied (SPEC §15). Each replica caches the built toolbox with the
//! override version it was built from; one indexed read per model round tells
//! whether another replica (or this one) changed a tool since, and only then are
//! the overrides read and the toolbox rebuilt.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::Toolbox;
use crate::config::ToolConfig;
use crate::store::{Store, ToolOverride};

pub struct Catalog {
    site: String,
    file: Vec<ToolConfig>,
    current: RwLock<Current>,
}

struct Current {
    version: i64,
    toolbox: Arc<Toolbox>,
    overrides: Arc<HashMap<String, ToolOverride>>,
}

impl Catalog {
    pub fn new(site: &str, file: Vec<ToolConfig>) -> anyhow::Result<Catalog> {
        let toolbox = Arc::new(Toolbox::new(&file)?);
        Ok(Catalog {
            site: site.to_string(),
            file,
            current: RwLock::new(Current {
                version: 0,
                toolbox,
                overrides: Arc::default(),
            }),
        })
    }

    /// The toolbox as last read, without asking the database.
    pub fn snapshot(&self) -> Arc<Toolbox> {
        match self.current.read() {
            Ok(c) => Arc::clone(&c.toolbox),
            Err(poisoned) => Arc::clone(&poisoned.get_ref().toolbox),
        }
    }

    /// The toolbox with every override stored so far. If the database cannot be
    /// read the last known toolbox is used and the failure logged: a change made
    /// before the outage is already in it.
    pub async fn fresh(&self, store: &Store) -> Arc<Toolbox> {
        match self.refresh(store).await {
            Ok(toolbox) => toolbox,
            Err(e) => {
                tracing::warn!(site = %self.site, error = format!("{e:#}"), "tool changes could not be read");
                self.snapshot()
            }
        }
    }

    /// The file's configuration of each tool.
    pub fn file(&self) -> &[ToolConfig] {
        &self.file
    }

    /// The toolbox and the console's overrides it was built with, read together
    /// after bringing them up to date (for showing tools, not for running them).
    pub async fn with_overrides(
        &self,
        store: &Store,
    ) -> (Arc<Toolbox>, Arc<HashMap<String, ToolOverride>>) {
        let _ = self.fresh(store).await;
        let current = match self.current.read() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        (Arc::clone(&current.toolbox), Arc::clone(&current.overrides))
    }

    async fn refresh(&self, store: &Store) -> anyhow::Result<Arc<Toolbox>> {
        let version = store.tool_version(&self.site).await?;
        {
            let current = self.current.read().map_err(|_| poisoned())?;
            if current.version == version {
                return Ok(Arc::clone(&current.toolbox));
            }
        }
        let (version, overrides) = store.tool_overrides(&self.site).await?;
        let overrides: HashMap<String, ToolOverride> =
            overrides.into_iter().map(|o| (o.tool.clone(), o)).collect();
        let toolbox = Arc::new(Toolbox::new(&apply(&self.file, &overrides))?);
        let mut current = self.current.write().map_err(|_| poisoned())?;
        // A slower refresh must not replace a newer one.
        if version >= current.version {
            *current = Current {
                version,
                toolbox: Arc::clone(&toolbox),
                overrides: Arc::new(overrides),
            };
        }
        Ok(Arc::clone(&current.toolbox))
    }
}

fn poisoned() -> anyhow::Error {
    anyhow::anyhow!("the tool catalog's lock was poisoned")
}

/// The file's tools with each override's fields in place of the file's.
pub fn apply(file: &[ToolConfig], overrides: &HashMap<String, ToolOverride>) -> Vec<ToolConfig> {
    file.iter()
        .map(|tool| {
            let mut tool = tool.clone();
            if let Some(o) = overrides.get(&tool.name) {
                if let Some(label) = &o.label {
                    tool.label = label.clone();
                }
                if let Some(description) = &o.description {
                    tool.description = description.clone();
                }
                if let Some(policy) = o.policy {
                    tool.policy = policy;
                }
            }
            tool
        })
        .collect()
}
