//! The server under test: `deskbell serve` as a child process with a generated
//! configuration pointing at this process's scripted model and tool endpoint.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use deskbell::testkit::{FakeLlm, Webhook};
use tokio::process::{Child, Command};

pub const ORIGIN: &str = "https://bench.example";

/// Whether servers started from now on speak HTTP/2 to the model stand-in
/// (`[llm] http2`), as they would to a hosted model over TLS.
pub static MODEL_HTTP2: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
const SECRET: &str = "bench-secret-0123456789abcdef0123456789";

pub struct Server {
    pub base: String,
    pub child: Child,
    pub started_in: Duration,
    _dir: Option<tempfile::TempDir>,
}

/// Limits far above any load the benchmark makes.
const UNLIMITED: &str = "[site.limits]
requests_per_minute = 1000000
requests_per_minute_per_ip = 1000000
concurrent_streams_per_visitor = 100000
concurrent_streams = 100000
daily_token_budget = 1000000000000
";

/// Guards set far above the load, except on the `limited` site.
pub fn config(
    llm: &FakeLlm,
    hook: &Webhook,
    port: u16,
    dir: &std::path::Path,
    knowledge: Option<&std::path::Path>,
    database_url: &str,
) -> String {
    let knowledge = knowledge
        .map(|k| format!("knowledge = [\"{}\"]", k.display()))
        .unwrap_or_default();
    format!(
        r#"
[server]
data_dir = "{data}"
bind = "127.0.0.1:{port}"
database_url = "{database_url}"
sqlite_synchronous = "{sync}"
group_commit = {group}
# Every client of the benchmark comes from 127.0.0.1.
max_connections_per_ip = 100000

[llm]
base_url = "{llm}"
model = "fake"
max_output_tokens = 256
http2 = {http2}

[[site]]
id = "bench"
origins = ["{ORIGIN}"]
{knowledge}
{UNLIMITED}
[[site.tool]]
name = "cancel_order"
label = "Cancel an order"
policy = "confirm"
url = "{hook}"
input_schema = {{ type = "object", required = ["order_id"], properties = {{ order_id = {{ type = "integer", title = "Order ID" }} }} }}

[[site]]
id = "desk"
origins = ["{ORIGIN}"]
[site.handoff]
enabled = true
{UNLIMITED}
[[site]]
id = "limited"
origins = ["{ORIGIN}"]
[site.limits]
requests_per_minute = 20
requests_per_minute_per_ip = 1000000
concurrent_streams_per_visitor = 1000
concurrent_streams = 100000
daily_token_budget = 1000000000000
"#,
        data = dir.display(),
        group = std::env::var("BENCH_GROUP_COMMIT").map_or(true, |v| v != "off"),
        sync = std::env::var("BENCH_SQLITE_SYNCHRONOUS").unwrap_or_else(|_| "full".into()),
        llm = llm.base_url,
        http2 = MODEL_HTTP2.load(std::sync::atomic::Ordering::Relaxed),
        hook = hook.url("/cancel"),
    )
}

/// A loopback port nothing listens on at the moment of asking.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub fn deskbell_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.with_file_name("deskbell");
    anyhow::ensure!(
        path.exists(),
        "{} is missing: run `cargo build --release --bins --features testkit` first",
        path.display()
    );
    Ok(path)
}

/// `deskbell`; with `BENCH_SERVER_CPU=N` pinned to core N by `taskset` (which
/// becomes the server: the pid is the server's); with `BENCH_SERVER_WRAP` run
/// under that command line (a profiler such as `heaptrack -o /tmp/heap`).
fn server_command() -> anyhow::Result<Command> {
    let mut line: Vec<String> = Vec::new();
    if let Ok(wrap) = std::env::var("BENCH_SERVER_WRAP") {
        line.extend(wrap.split_whitespace().map(str::to_string));
    }
    if let Ok(cpu) = std::env::var("BENCH_SERVER_CPU") {
        line.extend(["taskset".into(), "-c".into(), cpu]);
    }
    line.push(deskbell_binary()?.display().to_string());
    let mut command = Command::new(&line[0]);
    command.args(&line[1..]);
    Ok(command)
}

pub async fn start(llm: &FakeLlm, hook: &Webhook) -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let mut server = start_in(dir.path(), None, llm, hook).await?;
    server._dir = Some(dir);
    Ok(server)
}

/// Like `start`, with Prometheus metrics served on `metrics` (SPEC §18).
pub async fn start_with_metrics(
    llm: &FakeLlm,
    hook: &Webhook,
    metrics: &str,
) -> anyhow::Result<Server> {
    let dir = tempfile::tempdir()?;
    let env = [("DESKBELL_METRICS_BIND", metrics)];
    let mut server = start_in_env(dir.path(), None, llm, hook, &env).await?;
    server._dir = Some(dir);
    Ok(server)
}

/// Starts a server keeping its files in `dir`, optionally with a knowledge folder.
pub async fn start_in(
    dir: &std::path::Path,
    knowledge: Option<&std::path::Path>,
    llm: &FakeLlm,
    hook: &Webhook,
) -> anyhow::Result<Server> {
    start_in_env(dir, knowledge, llm, hook, &[]).await
}

pub async fn start_in_env(
    dir: &std::path::Path,
    knowledge: Option<&std::path::Path>,
    llm: &FakeLlm,
    hook: &Webhook,
    env: &[(&str, &str)],
) -> anyhow::Result<Server> {
    let database_url = database(dir).await?;
    start_on(dir, knowledge, llm, hook, env, &database_url).await
}

/// A replica: a server on a given database (one of several sharing it).
pub async fn start_replica(
    dir: &std::path::Path,
    llm: &FakeLlm,
    hook: &Webhook,
    env: &[(&str, &str)],
    database_url: &str,
) -> anyhow::Result<Server> {
    start_on(dir, None, llm, hook, env, database_url).await
}

pub async fn start_on(
    dir: &std::path::Path,
    knowledge: Option<&std::path::Path>,
    llm: &FakeLlm,
    hook: &Webhook,
    env: &[(&str, &str)],
    database_url: &str,
) -> anyhow::Result<Server> {
    let port = free_port()?;
    let path = dir.join("bench.toml");
    std::fs::write(&path, config(llm, hook, port, dir, knowledge, database_url))?;
    // A server that embeds its knowledge at start (`--only latency` with
    // `BENCH_EMBEDDING_MODEL`) takes minutes; any other is ready in seconds.
    let embeds = env.contains(&("DESKBELL_EMBEDDING", "on"));
    let patience = Duration::from_secs(if embeds { 600 } else { 30 });
    let started = Instant::now();
    let mut child = server_command()?
        .args(["serve", "--config"])
        .arg(&path)
        .env("DESKBELL_EMBEDDING", "off")
        .env("BETTER_AUTH_SECRET", SECRET)
        // `BENCH_SERVER_LOG` widens the server's log, for example to
        // `deskbell::first_token=debug` for the phases of each first token.
        .env(
            "DESKBELL_LOG",
            std::env::var("BENCH_SERVER_LOG").unwrap_or_else(|_| "error".into()),
        )
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start deskbell serve")?;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            break;
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the server exited before it was ready: {status}");
        }
        anyhow::ensure!(
            started.elapsed() < patience,
            "the server did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(Server {
        base,
        started_in: started.elapsed(),
        child,
        _dir: None,
    })
}

/// The server's database: a SQLite file in `dir`, or with `BENCH_POSTGRES` (a
/// server URL such as `postgres://postgres@127.0.0.1:5432`) a fresh PostgreSQL
/// database on that server.
async fn database(dir: &std::path::Path) -> anyhow::Result<String> {
    let Ok(server) = std::env::var("BENCH_POSTGRES") else {
        return Ok(format!("sqlite://{}", dir.join("bench.db").display()));
    };
    fresh_postgres(&server).await
}

/// A fresh, empty database named `bench_…` on the PostgreSQL server at `server`.
pub async fn fresh_postgres(server: &str) -> anyhow::Result<String> {
    deskbell::testkit::fresh_postgres(server, "bench").await
}

impl Server {
    /// Resident memory of the server process, in MiB.
    pub fn rss_mib(&self) -> f64 {
        match self.child.id() {
            Some(pid) => crate::stats::rss_mib(&pid.to_string()),
            None => 0.0,
        }
    }
}
