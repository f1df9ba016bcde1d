//! A site's tools as they stand now: the file's tools and its MCP servers'
//! (SPEC §17), with the console's overrides applied (SPEC §15). Each replica
//! caches the built toolbox with the override version and the servers' list
//! generation it was built from; one indexed read per model round tells whether
//! another replica (or this one) changed a tool since, and only then are the
//! overrides read and the toolbox rebuilt — as it is when a server's list moved.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use super::Toolbox;
use crate::config::ToolConfig;
use crate::mcp::{Server, Target};
use crate::store::{Store, ToolOverride};

pub struct Catalog {
    site: String,
    file: Vec<ToolConfig>,
    servers: Vec<Arc<Server>>,
    current: RwLock<Current>,
}

struct Current {
    version: i64,
    /// The sum of the servers' list generations (each only grows).
    listing: u64,
    /// The tools before the console's changes: the file's, then the servers'.
    base: Arc<Base>,
    toolbox: Arc<Toolbox>,
    overrides: Arc<HashMap<String, ToolOverride>>,
}

/// A site's tools as the console shows them, read together.
pub struct View {
    pub toolbox: Arc<Toolbox>,
    pub overrides: Arc<HashMap<String, ToolOverride>>,
    pub base: Arc<Base>,
}

/// The tools before the console's changes, as configuration (data), and where
/// each MCP tool's calls go (the live servers), by tool name.
pub struct Base {
    pub tools: Vec<ToolConfig>,
    pub targets: HashMap<String, Target>,
}

impl Catalog {
    pub fn new(
        site: &str,
        file: Vec<ToolConfig>,
        servers: Vec<Arc<Server>>,
    ) -> anyhow::Result<Catalog> {
        let listing = listing(&servers);
        let base = Arc::new(base(&file, &servers));
        let toolbox = Arc::new(Toolbox::new(&base.tools, &base.targets)?);
        Ok(Catalog {
            site: site.to_string(),
            file,
            servers,
            current: RwLock::new(Current {
                version: 0,
                listing,
                base,
                toolbox,
                overrides: Arc::default(),
            }),
        })
    }

    /// The toolbox as last read, without asking the database.
    pub fn last_read(&self) -> Arc<Toolbox> {
        match self.current.read() {
            Ok(c) => Arc::clone(&c.toolbox),
            Err(poisoned) => Arc::clone(&poisoned.get_ref().toolbox),
        }
    }

    /// The toolbox with every override stored so far. If the database cannot be
    /// read the last known toolbox is used and the failure logged: a change made
    /// before the outage is already in it.
    pub async fn current(&self, store: &Store) -> Arc<Toolbox> {
        match self.refresh(store).await {
            Ok(toolbox) => toolbox,
            Err(e) => {
                tracing::warn!(site = %self.site, error = format!("{e:#}"), "tool changes could not be read");
                self.last_read()
            }
        }
    }

    /// The toolbox, the console's overrides it was built with and the tools as
    /// they were before those, read together after bringing them up to date (for
    /// showing tools, not for running them).
    pub async fn for_console(&self, store: &Store) -> View {
        let _ = self.current(store).await;
        let current = match self.current.read() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        View {
            toolbox: Arc::clone(&current.toolbox),
            overrides: Arc::clone(&current.overrides),
            base: Arc::clone(&current.base),
        }
    }

    /// The toolbox brought up to `version`, the site's tool version just read
    /// by the caller (a question's turn reads it with its budget, in one round
    /// trip); the overrides are read only when it moved.
    pub async fn current_at(&self, store: &Store, version: i64) -> Arc<Toolbox> {
        match self.refresh_to(store, version).await {
            Ok(toolbox) => toolbox,
            Err(e) => {
                tracing::warn!(site = %self.site, error = format!("{e:#}"), "tool changes could not be read");
                self.last_read()
            }
        }
    }

    async fn refresh(&self, store: &Store) -> anyhow::Result<Arc<Toolbox>> {
        let version = store.tools().version(&self.site).await?;
        self.refresh_to(store, version).await
    }

    async fn refresh_to(&self, store: &Store, version: i64) -> anyhow::Result<Arc<Toolbox>> {
        let listing = listing(&self.servers);
        {
            let current = self.current.read().map_err(|_| poisoned())?;
            if current.version == version && current.listing == listing {
                return Ok(Arc::clone(&current.toolbox));
            }
        }
        let (version, overrides) = store.tools().overrides(&self.site).await?;
        let overrides: HashMap<String, ToolOverride> =
            overrides.into_iter().map(|o| (o.tool.clone(), o)).collect();
        let base = Arc::new(base(&self.file, &self.servers));
        let toolbox = Arc::new(Toolbox::new(
            &apply(&base.tools, &overrides),
            &base.targets,
        )?);
        let mut current = self.current.write().map_err(|_| poisoned())?;
        // A slower refresh must not replace a newer one.
        if version >= current.version && listing >= current.listing {
            *current = Current {
                version,
                listing,
                base,
                toolbox: Arc::clone(&toolbox),
                overrides: Arc::new(overrides),
            };
        }
        Ok(Arc::clone(&current.toolbox))
    }
}

fn listing(servers: &[Arc<Server>]) -> u64 {
    servers.iter().map(|s| s.generation()).sum()
}

/// The file's tools, then those the site's MCP servers list now.
fn base(file: &[ToolConfig], servers: &[Arc<Server>]) -> Base {
    let taken: HashSet<String> = file.iter().map(|t| t.name.clone()).collect();
    let mut tools = file.to_vec();
    let mut targets = HashMap::new();
    for (config, target) in crate::mcp::tools::site_tools(&taken, servers) {
        targets.insert(config.name.clone(), target);
        tools.push(config);
    }
    Base { tools, targets }
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
                if let Some(rule) = &o.confirm_when {
                    tool.confirm_when = (!rule.is_empty()).then(|| rule.clone());
                }
            }
            tool
        })
        .collect()
}
