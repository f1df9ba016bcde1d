//! MCP servers as tool sources (SPEC §17). Each `[[site.mcp]]` is a `Server`: a
//! supervised connection (a child process over stdio, or streamable HTTP) with the
//! tools it last listed. `tools.rs` turns those into site tools under the
//! operator's policy; the turn engine then treats them like any other tool, and
//! `tools::http::Executor` sends their calls here instead of to a URL.
//!
//! Nothing a server says is trusted: its annotations only choose a default the
//! operator's word overrides, its titles and descriptions are cleaned and cut,
//! and its stderr is logged at debug level only.

mod client;
mod listed;
mod server;
pub mod tools;

use std::sync::Arc;

pub use listed::Listed;
pub use server::Server;

use crate::config::SiteConfig;

/// Where an MCP tool's calls go: the server and the tool's name there.
#[derive(Clone)]
pub struct Target {
    pub server: Arc<Server>,
    pub tool: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mcp:{}/{}", self.server.name(), self.tool)
    }
}

/// Every MCP server of the installation. Dropping it stops their supervisors,
/// which closes the connections and kills the child processes.
#[derive(Default)]
pub struct Servers {
    all: Vec<Arc<Server>>,
    stop: tokio_util::sync::CancellationToken,
}

impl Servers {
    /// Starts every site's servers and waits (a bounded time) for each one's
    /// first attempt to connect and list its tools, so the first turn sees them.
    /// A server that cannot start is logged and retried; it never stops Deskbell.
    pub async fn start(sites: &[SiteConfig]) -> Servers {
        let stop = tokio_util::sync::CancellationToken::new();
        let mut all = Vec::new();
        let mut first = Vec::new();
        for site in sites {
            for config in &site.mcp {
                let (server, ready) = Server::spawn(&site.id, config.clone(), stop.child_token());
                all.push(server);
                first.push(ready);
            }
        }
        let _ =
            tokio::time::timeout(FIRST_LISTING_WAIT, futures_util::future::join_all(first)).await;
        Servers { all, stop }
    }

    /// The servers of one site, in the file's order.
    pub fn of_site(&self, site: &str) -> Vec<Arc<Server>> {
        self.all
            .iter()
            .filter(|s| s.site() == site)
            .cloned()
            .collect()
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// How long start-up waits for servers' first tool lists before serving anyway.
const FIRST_LISTING_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Tries each of a configuration's servers once (connect, list tools, close) and
/// returns a line for each that could not start: what `deskbell check` reports.
pub async fn check(sites: &[SiteConfig]) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, site) in sites.iter().enumerate() {
        for (j, config) in site.mcp.iter().enumerate() {
            match server::probe(config).await {
                Ok(count) => {
                    tracing::info!(site = %site.id, server = %config.name, tools = count, "MCP server answered")
                }
                Err(e) => {
                    let mut why = format!("{e:#}");
                    // A URL may carry a token in its query: never printed.
                    if let Some(url) = &config.url {
                        why = why.replace(url.as_str(), &crate::secret::loggable_url(url));
                    }
                    problems.push(format!(
                        "site[{i}].mcp[{j}] ({}): the MCP server could not be started: {why}",
                        config.name
                    ))
                }
            }
        }
    }
    problems
}
