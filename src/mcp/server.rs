//! One MCP server: its supervisor keeps a connection open (restarting a child
//! process that exits, with back-off), re-reads the tool list when the server
//! says it changed, and calls go through the connection of the moment.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rmcp::Peer;
use rmcp::RoleClient;
use rmcp::model::{CallToolRequestParams, PaginatedRequestParams};
use serde_json::Value;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use super::client::{self, Listener};
use super::listed::{self, Listed};
use crate::config::McpConfig;
use crate::states::Reason;
use crate::tools::http::Outcome;

pub struct Server {
    site: String,
    config: McpConfig,
    /// The open connection's handle for requests; `None` while (re)connecting.
    peer: Mutex<Option<Live>>,
    listed: RwLock<Arc<Vec<Listed>>>,
    /// Moves on every new tool list, so a site's catalog knows to rebuild.
    generation: AtomicU64,
}

/// An open connection as calls see it.
#[derive(Clone)]
struct Live {
    peer: Peer<RoleClient>,
    /// Rung by a call that found this connection broken: an HTTP connection
    /// does not notice by itself (a restarted server forgets its session), so
    /// the supervisor drops it and connects anew.
    broken: Arc<Notify>,
}

/// The first wait before a restart; it doubles up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A connection that stayed up this long resets the back-off.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// How long connecting and listing may take before the attempt counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a listing asked for while a card is answered may take.
const RELIST_TIMEOUT: Duration = Duration::from_secs(5);
/// A server's tool list is read at most this many pages deep, and at most this
/// many tools are kept: a server cannot make Deskbell page or grow forever.
const MAX_PAGES: usize = 20;
const MAX_TOOLS: usize = 500;

impl Server {
    /// An error's text fit for the log: a streamable-HTTP server's URL may carry
    /// a token in its query, and the SDK's errors quote the URL.
    fn shown(&self, text: String) -> String {
        match &self.config.url {
            Some(url) => crate::secret::without_url_secrets(&text, url),
            None => text,
        }
    }

    /// Starts the server's supervisor. The receiver fires once the first attempt
    /// to connect and list tools has ended, however it ended.
    pub fn spawn(
        site: &str,
        config: McpConfig,
        stop: CancellationToken,
    ) -> (Arc<Server>, oneshot::Receiver<()>) {
        let server = Arc::new(Server {
            site: site.to_string(),
            config,
            peer: Mutex::new(None),
            listed: RwLock::new(Arc::default()),
            generation: AtomicU64::new(0),
        });
        let (ready, first) = oneshot::channel();
        tokio::spawn(Arc::clone(&server).supervise(stop, ready));
        (server, first)
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn site(&self) -> &str {
        &self.site
    }

    pub fn config(&self) -> &McpConfig {
        &self.config
    }

    /// The tools the server listed last (kept while it is down, so that calls
    /// to them fail with a reason the model is told, rather than vanish).
    pub fn listed(&self) -> Arc<Vec<Listed>> {
        match self.listed.read() {
            Ok(l) => Arc::clone(&l),
            Err(poisoned) => Arc::clone(poisoned.get_ref()),
        }
    }

    /// Whether a connection is open now (calls can go through).
    pub fn is_connected(&self) -> bool {
        self.current_peer().is_some()
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    async fn supervise(self: Arc<Self>, stop: CancellationToken, ready: oneshot::Sender<()>) {
        let mut ready = Some(ready);
        let mut backoff = FIRST_BACKOFF;
        loop {
            let began = Instant::now();
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.connection(&mut ready) => {}
            }
            if let Some(r) = ready.take() {
                let _ = r.send(());
            }
            if began.elapsed() >= HEALTHY_AFTER {
                backoff = FIRST_BACKOFF;
            }
            tracing::warn!(
                site = %self.site,
                server = %self.config.name,
                retry_in_ms = backoff.as_millis() as u64,
                "MCP server is not connected; trying again"
            );
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One connection's life: connect, list, serve calls and re-list on change
    /// until the connection closes. Returns when it has closed or failed.
    async fn connection(&self, ready: &mut Option<oneshot::Sender<()>>) {
        let changed = Arc::new(Notify::new());
        let listener = Listener {
            changed: Arc::clone(&changed),
        };
        let connected = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let connection = client::connect(&self.config, listener).await?;
            let listed = list(connection.peer()).await?;
            anyhow::Ok((connection, listed))
        })
        .await;
        let (connection, listed) = match connected {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                tracing::warn!(site = %self.site, server = %self.config.name, error = self.shown(format!("{e:#}")), "MCP server could not be started");
                return;
            }
            Err(_) => {
                tracing::warn!(site = %self.site, server = %self.config.name, "MCP server did not answer in time");
                return;
            }
        };
        tracing::info!(site = %self.site, server = %self.config.name, tools = listed.len(), "MCP server connected");
        self.publish(listed);
        let peer = connection.peer().clone();
        let broken = Arc::new(Notify::new());
        self.set_peer(Some(Live {
            peer: peer.clone(),
            broken: Arc::clone(&broken),
        }));
        if let Some(r) = ready.take() {
            let _ = r.send(());
        }
        let mut waiting = std::pin::pin!(connection.waiting());
        loop {
            tokio::select! {
                _ = &mut waiting => break,
                _ = broken.notified() => break,
                _ = changed.notified() => match tokio::time::timeout(CONNECT_TIMEOUT, list(&peer)).await {
                    Ok(Ok(listed)) => self.publish(listed),
                    Ok(Err(e)) => tracing::warn!(server = %self.config.name, error = self.shown(format!("{e:#}")), "MCP tool list could not be read"),
                    // A listing that hangs means the connection is gone.
                    Err(_) => break,
                },
            }
        }
        self.set_peer(None);
    }

    fn set_peer(&self, peer: Option<Live>) {
        match self.peer.lock() {
            Ok(mut p) => *p = peer,
            Err(poisoned) => *poisoned.into_inner() = peer,
        }
    }

    fn current_peer(&self) -> Option<Live> {
        match self.peer.lock() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reads the tool list now (bounded), so that an answer to a card is judged
    /// against what the server offers at this moment, not at its last notice.
    pub async fn relist(&self) {
        let Some(live) = self.current_peer() else {
            return;
        };
        match tokio::time::timeout(RELIST_TIMEOUT, list(&live.peer)).await {
            Ok(Ok(listed)) => self.publish(listed),
            Ok(Err(e)) => {
                tracing::warn!(server = %self.config.name, error = self.shown(format!("{e:#}")), "MCP tool list could not be read")
            }
            Err(_) => {
                tracing::warn!(server = %self.config.name, "MCP tool list did not come in time")
            }
        }
    }

    fn publish(&self, listed: Vec<Listed>) {
        for name in self.config.tools.keys() {
            if !listed.iter().any(|t| &t.name == name) {
                tracing::warn!(server = %self.config.name, tool = %name, "the file sets a tool this MCP server does not list");
            }
        }
        let listed = Arc::new(listed);
        if *self.listed() == *listed {
            return;
        }
        match self.listed.write() {
            Ok(mut l) => *l = listed,
            Err(poisoned) => *poisoned.into_inner() = listed,
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Calls one tool once (`tools/call`) and reads the outcome as the HTTP
    /// executor's: the text content for the model, cut at 16 KiB.
    pub async fn call(&self, tool: &str, arguments: &Value, timeout: Duration) -> Outcome {
        let started = Instant::now();
        let failed = |reason: Reason, result: String| Outcome {
            succeeded: false,
            http_status: None,
            result,
            failure: Some(reason),
            duration_ms: started.elapsed().as_millis() as i64,
        };
        let Some(live) = self.current_peer() else {
            return failed(
                Reason::Unreachable,
                "The tool's server is not running right now.".into(),
            );
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments.as_object().cloned();
        match tokio::time::timeout(timeout, live.peer.call_tool(params)).await {
            Err(_) => {
                // A connection that lost its session hangs rather than fails:
                // one that does not answer a listing either is dropped.
                if self.config.url.is_some() {
                    tokio::spawn(async move {
                        let answered =
                            tokio::time::timeout(RELIST_TIMEOUT, live.peer.list_tools(None)).await;
                        if !matches!(answered, Ok(Ok(_))) {
                            live.broken.notify_one();
                        }
                    });
                }
                failed(
                    Reason::Timeout,
                    format!(
                        "The tool did not answer within {} seconds.",
                        timeout.as_secs_f64()
                    ),
                )
            }
            Ok(answer) => {
                if let Err(e) = &answer {
                    tracing::warn!(site = %self.site, server = %self.config.name, tool, error = self.shown(e.to_string()), "MCP call failed");
                }
                let (judged, broken) = listed::judge(answer);
                if broken {
                    live.broken.notify_one();
                }
                match judged {
                    Ok(text) => Outcome {
                        succeeded: true,
                        http_status: None,
                        result: text,
                        failure: None,
                        duration_ms: started.elapsed().as_millis() as i64,
                    },
                    Err((reason, text)) => failed(reason, text),
                }
            }
        }
    }
}

/// Every tool the server lists, page by page, within the bounds above.
async fn list(peer: &Peer<RoleClient>) -> anyhow::Result<Vec<Listed>> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let page = peer.list_tools(params).await?;
        out.extend(page.tools.iter().filter_map(Listed::from_mcp));
        if out.len() >= MAX_TOOLS {
            out.truncate(MAX_TOOLS);
            tracing::warn!(
                tools = MAX_TOOLS,
                "an MCP server lists more tools than are kept"
            );
            break;
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(out)
}

/// Connects once, lists the tools and closes: `deskbell check`.
pub async fn probe(config: &McpConfig) -> anyhow::Result<usize> {
    let listener = Listener {
        changed: Arc::new(Notify::new()),
    };
    let count = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let mut connection = client::connect(config, listener).await?;
        let count = list(connection.peer()).await?.len();
        let _ = connection.close().await;
        anyhow::Ok(count)
    })
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "it did not answer within {} seconds",
            CONNECT_TIMEOUT.as_secs()
        )
    })??;
    Ok(count)
}
