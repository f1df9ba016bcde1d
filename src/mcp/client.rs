//! Opening one connection to an MCP server with the official SDK (`rmcp`): the
//! transport (a child process or streamable HTTP) and the client's side of the
//! protocol, which only listens for the server saying its tool list changed.

use std::process::Stdio;
use std::sync::Arc;

use anyhow::Context;
use futures_util::StreamExt;
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
            let mut lines = std::pin::pin!(stderr_lines(stderr));
            while let Some(line) = lines.next().await {
                tracing::debug!(server = %server, "{line}");
            }
        });
    }
    Ok(transport)
}

/// The longest stderr line kept whole; a longer one is cut there.
const MAX_STDERR_LINE: usize = 4096;

/// A child's stderr as lines of at most `MAX_STDERR_LINE` bytes: a server that
/// prints without end and no newline cannot make Deskbell hold it all. What is
/// past the limit of a line is dropped, up to its newline, and the line says so.
fn stderr_lines<R>(reader: R) -> impl futures_util::Stream<Item = String>
where
    R: tokio::io::AsyncRead + Unpin,
{
    let reader = tokio::io::BufReader::new(reader);
    futures_util::stream::unfold(reader, |mut reader| async move {
        let mut line = Vec::new();
        let mut cut = false;
        loop {
            let available = reader.fill_buf().await.ok()?;
            if available.is_empty() {
                // The end: a last line without its newline is still a line.
                if line.is_empty() && !cut {
                    return None;
                }
                break;
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let chunk = &available[..newline.unwrap_or(available.len())];
            let room = MAX_STDERR_LINE.saturating_sub(line.len());
            cut |= chunk.len() > room;
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            let used = newline.map_or(available.len(), |i| i + 1);
            reader.consume(used);
            if newline.is_some() {
                break;
            }
        }
        let mut text = String::from_utf8_lossy(&line).into_owned();
        if cut {
            text.push_str(" (cut)");
        }
        Some((text, reader))
    })
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    #[tokio::test]
    async fn a_child_s_endless_stderr_line_is_dropped_and_the_next_one_kept() {
        let mut text = vec![b'a'; 10 * 1024 * 1024];
        text.extend_from_slice(b"\nserver ready\n");
        let lines: Vec<String> = super::stderr_lines(std::io::Cursor::new(text))
            .collect()
            .await;
        let lengths: Vec<usize> = lines.iter().map(String::len).collect();
        assert_eq!(lines.len(), 2, "{lengths:?}");
        assert!(lines[0].ends_with(" (cut)"), "{lengths:?}");
        assert!(lines[0].len() <= super::MAX_STDERR_LINE + 6, "{lengths:?}");
        assert_eq!(lines[1], "server ready");
    }
}
