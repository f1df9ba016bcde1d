//! Opening one connection to an MCP server with the official SDK (`rmcp`): the
//! transport (a child process or streamable HTTP) and the client's side of the
//! protocol, which only listens for the server saying its tool list changed.

use std::process::Stdio;
use std::sync::Arc;

use anyhow::Context;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;

use crate::config::McpConfig;

/// The protocol version Deskbell asks for: the newest with an `initialize`
/// handshake, which servers built on every current SDK answer (a server that
/// knows only an older one says so, and the SDK accepts it).
pub const PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Variables a child process may always see: enough to find programs and
/// write a cache, nothing secret.
const PASSED_ALWAYS: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ"];

/// The client's side of a connection: it offers the server nothing (no
/// sampling, no roots) and wakes the supervisor when the tool list changes.
#[derive(Clone)]
pub struct Listener {
    pub changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("deskbell", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(PROTOCOL)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }
}

pub type Connection = RunningService<RoleClient, Listener>;

/// Connects to the server and completes the handshake.
pub async fn connect(config: &McpConfig, listener: Listener) -> anyhow::Result<Connection> {
    match (&config.command, &config.url) {
        (Some(command), _) => {
            let transport = child(config, command)?;
            Ok(listener.serve(transport).await?)
        }
        (None, Some(url)) => {
            // Like the HTTP executor's: no redirect is followed (a server could
            // send the calls elsewhere), and connecting is bounded.
            let http = reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(5))
                .redirect(reqwest::redirect::Policy::none())
                .build()?;
            let transport = StreamableHttpClientTransport::with_client(
                http,
                StreamableHttpClientTransportConfig::with_uri(url.as_str()),
            );
            Ok(listener.serve(transport).await?)
        }
        (None, None) => anyhow::bail!("neither command nor url is set"),
    }
}

/// Starts the child process with a clean environment; its stderr is read line
/// by line into debug-level logs (a server may print anything there).
fn child(config: &McpConfig, command: &[String]) -> anyhow::Result<TokioChildProcess> {
    let (program, args) = command.split_first().context("the command is empty")?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).env_clear().kill_on_drop(true);
    for name in PASSED_ALWAYS
        .iter()
        .copied()
        .chain(config.pass_env.iter().map(String::as_str))
    {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    let (transport, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("{program:?} could not be started"))?;
    if let Some(stderr) = stderr {
        let server = config.name.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(server = %server, "{line}");
            }
        });
    }
    Ok(transport)
}
