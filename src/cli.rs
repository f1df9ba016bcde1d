//! The command line (SPEC §13).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::audit::Format;
use crate::config::{Config, Env};
use crate::secret::MIN_SECRET_BYTES;

#[derive(Parser)]
#[command(name = "deskbell", version, about = "A self-hosted AI help desk")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the server.
    Serve {
        #[arg(long)]
        config: PathBuf,
    },
    /// Runs a complete demo site on 127.0.0.1:8080.
    Demo,
    /// Validates a configuration and reports every problem.
    Check {
        #[arg(long)]
        config: PathBuf,
    },
    /// (Re)indexes the knowledge of every site, or of one.
    Ingest {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        site: Option<String>,
    },
    /// Works with the audit table.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Manages operator accounts and API tokens.
    Operator {
        #[command(subcommand)]
        command: OperatorCommand,
    },
}

#[derive(Subcommand)]
enum OperatorCommand {
    /// Creates an operator; reads the password from standard input, or generates
    /// one and prints it once.
    Add {
        email: String,
        #[arg(long, value_parser = ["admin", "agent"], default_value = "admin")]
        role: String,
        /// The name visitors see on this operator's replies (never the email).
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Prints a new operator API token once.
    Token {
        #[arg(long)]
        name: String,
        #[arg(long, value_parser = ["admin", "agent"], default_value = "admin")]
        role: String,
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Writes the audit table out, oldest first, one row per line.
    Export {
        /// The configuration naming the database (default: the demo's data folder).
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        site: Option<String>,
        #[arg(long, value_enum, default_value = "jsonl")]
        format: Format,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("deskbell: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let env = Env::from_process();
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve { config } => serve(config, &env).await,
            Command::Demo => crate::demo::run(&env).await,
            Command::Check { config } => check(config, &env).await,
            Command::Ingest { config, site } => ingest(config, site, &env).await,
            Command::Audit {
                command:
                    AuditCommand::Export {
                        config,
                        site,
                        format,
                    },
            } => export(config, site, format, &env).await,
            Command::Operator { command } => operator(command, &env).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("deskbell: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr, one line per event: readable text, or with
/// `DESKBELL_LOG_FORMAT=json` one JSON object per line (time, level, target,
/// the request's and turn's fields, message: `ops::logs`) for log collectors
/// (SPEC §18).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DESKBELL_LOG")
        .unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match std::env::var("DESKBELL_LOG_FORMAT").as_deref() {
        Ok("json") => builder
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(crate::ops::logs::FlatJson)
            .init(),
        _ => builder.init(),
    }
}

/// Why `serve` cannot start with this secret, if it cannot.
pub fn secret_problem(secret: Option<&crate::secret::Secret>) -> Option<String> {
    match secret {
        None => Some(format!(
            "BETTER_AUTH_SECRET is not set. Deskbell signs visitor tokens and confirmations with keys derived from it; \
             set it to at least {MIN_SECRET_BYTES} random bytes, for example: export BETTER_AUTH_SECRET=$(openssl rand -hex 32)"
        )),
        Some(s) if s.len() < MIN_SECRET_BYTES => Some(format!(
            "BETTER_AUTH_SECRET is {} bytes long; it must be at least {MIN_SECRET_BYTES} bytes",
            s.len()
        )),
        Some(_) => None,
    }
}

async fn serve(path: PathBuf, env: &Env) -> anyhow::Result<ExitCode> {
    let config = match Config::load(&path, env) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(2));
        }
    };
    if let Some(problem) = secret_problem(config.secret.as_ref()) {
        eprintln!("deskbell: {problem}");
        return Ok(ExitCode::from(2));
    }
    let bind = config.server.bind.clone();
    if let Some(metrics) = &config.server.metrics_bind {
        crate::ops::metrics::start(metrics).await?;
    }
    let app = crate::app::build(config, Default::default()).await?;
    let router = crate::routes::router(app.clone());
    let listener = tokio::net::TcpListener::bind(&bind).await?;
    tracing::info!(addr = %listener.local_addr()?, "deskbell is serving");
    crate::routes::serve(app, router, listener, crate::server::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

async fn check(path: PathBuf, env: &Env) -> anyhow::Result<ExitCode> {
    let mut lines = Vec::new();
    let config = match Config::load(&path, env) {
        Ok(c) => Some(c),
        Err(e) => {
            lines.push(e.to_string());
            None
        }
    };
    // A configuration that reads well may still name an MCP server that cannot
    // start: each is tried once.
    if let Some(c) = &config {
        for problem in crate::mcp::check(&c.sites).await {
            lines.push(format!("{}: {problem}", path.display()));
        }
    }
    let secret = env
        .get(crate::config::env::SECRET_VAR)
        .map(crate::secret::Secret::new);
    if let Some(problem) = secret_problem(secret.as_ref()) {
        lines.push(format!("{}: BETTER_AUTH_SECRET: {problem}", path.display()));
    }
    match (config, lines.is_empty()) {
        (Some(c), true) => {
            let tools: usize = c.sites.iter().map(|s| s.tools.len()).sum();
            let servers: usize = c.sites.iter().map(|s| s.mcp.len()).sum();
            println!(
                "{}: ok ({} sites, {} tools, {} MCP servers)",
                path.display(),
                c.sites.len(),
                tools,
                servers
            );
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            for line in lines {
                eprintln!("{line}");
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// Publishes each site's knowledge to the database (every running replica brings
/// its index up to date within seconds) and updates this machine's index.
async fn ingest(path: PathBuf, only: Option<String>, env: &Env) -> anyhow::Result<ExitCode> {
    let config = Config::load_unchecked(&path)?;
    let store = command_store(Some(path.clone()), env).await?;
    // The same model as the server's, so the passages it indexes carry their
    // vectors (SPEC §21).
    let knowledge = crate::knowledge::Knowledge::embedding_with(&config).await;
    let sites: Vec<_> = config
        .sites
        .iter()
        .filter(|s| only.as_ref().is_none_or(|o| *o == s.id))
        .collect();
    if sites.is_empty() {
        eprintln!("{}: no site {:?}", path.display(), only.unwrap_or_default());
        return Ok(ExitCode::from(1));
    }
    for site in sites {
        let r = knowledge
            .ingest(&store, &config.server.data_dir, site)
            .await?;
        println!(
            "{}: {} added, {} updated, {} unchanged, {} removed ({} chunks written)",
            site.id, r.added, r.updated, r.unchanged, r.removed, r.chunks
        );
        for s in &r.skipped {
            println!(
                "  skipped {}: {}",
                crate::secret::loggable_url(&s.path),
                s.reason
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The database a command works on: `DESKBELL_DATABASE_URL`, else the config's,
/// else the demo's.
async fn command_store(path: Option<PathBuf>, env: &Env) -> anyhow::Result<crate::store::Store> {
    let url = match (env.get("DESKBELL_DATABASE_URL"), path) {
        (Some(url), _) => url.to_string(),
        (None, Some(path)) => Config::load_unchecked(&path)?.server.database_url(),
        (None, None) => Config::demo_database_url(),
    };
    crate::store::Store::connect(&url, Default::default()).await
}

async fn operator(command: OperatorCommand, env: &Env) -> anyhow::Result<ExitCode> {
    use crate::operator::commands;
    use crate::states::OperatorRole;
    let role = |text: &str| OperatorRole::parse(text).map_err(anyhow::Error::from);
    match command {
        OperatorCommand::Add {
            email,
            role: r,
            name,
            config,
        } => {
            let store = command_store(config, env).await?;
            commands::add(&store, &email, role(&r)?, name.as_deref()).await
        }
        OperatorCommand::Token {
            name,
            role: r,
            config,
        } => commands::token(&command_store(config, env).await?, &name, role(&r)?).await,
    }
}

async fn export(
    path: Option<PathBuf>,
    site: Option<String>,
    format: Format,
    env: &Env,
) -> anyhow::Result<ExitCode> {
    let store = command_store(path, env).await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    crate::audit::export(&store, site.as_deref(), format, &mut out).await?;
    std::io::Write::flush(&mut out)?;
    Ok(ExitCode::SUCCESS)
}
