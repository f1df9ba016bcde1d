//! The configuration file of SPEC §12, its environment overrides and its checks.
//!
//! Loading is split in two on purpose: `parse` turns TOML into typed values (unknown
//! keys are errors, reported with their path), and `validate` collects *every*
//! semantic problem so that `deskbell check` can report them all at once.

pub mod env;
pub mod gates;
mod hours;
mod knowledge;
mod llm;
mod tools;
mod validate;

pub use env::Env;
pub use hours::Hours;
pub use knowledge::{Embedding, KnowledgeConfig};
pub use llm::LlmConfig;
pub use tools::{
    ApprovalWebhook, McpConfig, McpToolConfig, Quota, QuotaPer, QuotaWindow, ToolConfig,
    default_approval_ttl,
};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::secret::Secret;
pub use crate::states::Policy;

/// A problem found in a configuration: where it is and why it is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    pub reason: String,
}

/// Every problem of one configuration file, printable as one line per problem.
#[derive(Debug)]
pub struct ConfigError {
    pub file: String,
    pub problems: Vec<Problem>,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}: {}: {}", self.file, p.key, p.reason)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub llm: LlmConfig,
    #[serde(default)]
    pub knowledge: KnowledgeConfig,
    #[serde(default, rename = "site")]
    pub sites: Vec<SiteConfig>,
    /// The master secret, from `BETTER_AUTH_SECRET` only (never from the file).
    #[serde(skip)]
    pub secret: Option<Secret>,
    /// How long a confirmation card stays answerable.
    #[serde(skip, default = "default_ttl")]
    pub approval_ttl: Duration,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub bind: String,
    pub data_dir: PathBuf,
    pub database_url: Option<String>,
    pub trusted_proxies: Vec<String>,
    /// Seconds a client has to send its request headers (slow-loris protection; an
    /// extension of §12).
    pub header_read_timeout_s: f64,
    /// `full` (default) or `normal`: see `store::Durability`.
    pub sqlite_synchronous: crate::store::Durability,
    /// Seconds an answer's stream may wait for its client to read before the client
    /// counts as gone (SPEC §5: 30; the turn goes on and is saved). An extension
    /// of §12, so tests need not wait half a minute.
    pub stalled_reader_timeout_s: f64,
    /// Seconds a process's lease holds without renewal (renewed three times in
    /// that span): how soon a dead process's running calls and answers are taken
    /// over by another (SPEC §6.5, §16). An extension of §12.
    pub lease_s: f64,
    /// Connections open at once, in all and from one client address (a trusted
    /// proxy's are not capped per address); one more is answered 503.
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// Seconds a connection may sit with no request in flight before it is closed.
    pub idle_timeout_s: f64,
    /// The largest HTTP/1.1 request head (request line and headers), in KiB; a
    /// larger one is answered 431. Also the ceiling of each connection's read
    /// buffer, so more than 8 costs memory for every open stream (DECISIONS.md).
    pub max_request_head_kib: usize,
    /// Redis for the guards' counters shared by replicas (SPEC §16); without it
    /// they are per process.
    pub redis_url: Option<String>,
    /// Whether turns' starts and ends are committed together on PostgreSQL (as
    /// always on SQLite). On by default; off only to measure what it brings.
    pub group_commit: bool,
    /// Where Prometheus scrapes `/metrics` (SPEC §18): its own address, never
    /// the public one. Off unless set.
    pub metrics_bind: Option<String>,
    /// The console's own origin (SPEC §12, §15), when it is served under a name
    /// other than the bind address.
    pub public_url: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8080".into(),
            data_dir: PathBuf::from("./deskbell-data"),
            database_url: None,
            trusted_proxies: Vec::new(),
            header_read_timeout_s: 10.0,
            sqlite_synchronous: crate::store::Durability::Full,
            stalled_reader_timeout_s: 30.0,
            lease_s: 15.0,
            max_connections: 25_000,
            max_connections_per_ip: 256,
            idle_timeout_s: 60.0,
            max_request_head_kib: 8,
            redis_url: None,
            group_commit: true,
            metrics_bind: None,
            public_url: None,
        }
    }
}

impl ServerConfig {
    /// The database URL, defaulting to a SQLite file in the data folder.
    pub fn database_url(&self) -> String {
        match &self.database_url {
            Some(url) => url.clone(),
            None => format!("sqlite://{}", self.data_dir.join("deskbell.db").display()),
        }
    }

    pub fn bind_addr(&self) -> Option<SocketAddr> {
        self.bind.parse().ok()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteConfig {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub origins: Vec<String>,
    #[serde(default)]
    pub instructions: String,
    #[serde(default)]
    pub knowledge: Vec<KnowledgeSource>,
    pub identity_secret_env: Option<String>,
    /// Which verified-identity forms the site accepts (SPEC §4).
    #[serde(default)]
    pub identity: IdentityForms,
    #[serde(default)]
    pub require_verified_identity: bool,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default, rename = "tool")]
    pub tools: Vec<ToolConfig>,
    /// MCP servers whose tools join the site's (SPEC §17).
    #[serde(default, rename = "mcp")]
    pub mcp: Vec<McpConfig>,
    /// The human desk (SPEC §19).
    #[serde(default)]
    pub handoff: HandoffConfig,
    /// Where `approval.requested` is posted (SPEC §20), signed like tool calls.
    pub approval_webhook: Option<ApprovalWebhook>,
    /// The widget's language (SPEC §22): a language code, or `"auto"` for the
    /// visitor's browser language. An unknown code is English, with a warning.
    #[serde(default = "auto")]
    pub locale: String,
    /// The operator's own words for the widget's strings, by key.
    #[serde(default)]
    pub strings: std::collections::BTreeMap<String, crate::locale::StringOverride>,
    #[serde(skip)]
    pub identity_secret: Option<Secret>,
}

fn auto() -> String {
    "auto".into()
}

/// `[site.handoff]`: whether visitors may reach a person (SPEC §19).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandoffConfig {
    #[serde(default)]
    pub enabled: bool,
    /// When people answer, as `"Mon-Fri 09:00-17:00 Europe/Berlin"` (`hours.rs`);
    /// none: whenever an operator is signed in.
    #[serde(default)]
    pub hours: Option<String>,
    /// What a visitor is told when nobody is there (outside the hours, or no
    /// operator signed in for two minutes).
    #[serde(default)]
    pub offline_message: Option<String>,
}

impl HandoffConfig {
    /// The hours, if set. They were checked when the file was read; hours that
    /// do not parse read as never open, so nothing is promised.
    pub fn parsed_hours(&self) -> Option<Result<Hours, String>> {
        self.hours.as_deref().map(Hours::parse)
    }

    /// What a visitor is told when nobody is there.
    pub fn offline_text(&self) -> &str {
        self.offline_message
            .as_deref()
            .unwrap_or("Nobody from the team is available right now. You can leave your email address for them.")
    }
}

/// `any`: a `user_hash` or an identity token; `jwt`: identity tokens only (a leaked
/// `user_hash` never expires, a token does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdentityForms {
    #[default]
    Any,
    Jwt,
}

/// A file or folder of knowledge: a path, or `{ path, base_url }` so that
/// `docs/returns.md` under base `https://acme.example/help` cites
/// `https://acme.example/help/returns`. A web source (`path` an http(s) URL) may
/// reach a private address (an intranet) only with `allow_private = true`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum KnowledgeSource {
    Path(String),
    Folder {
        path: String,
        base_url: Option<String>,
        #[serde(default)]
        allow_private: bool,
    },
}

impl KnowledgeSource {
    /// Whether a web source may be fetched from private addresses.
    pub fn allow_private(&self) -> bool {
        matches!(
            self,
            KnowledgeSource::Folder {
                allow_private: true,
                ..
            }
        )
    }

    pub fn parts(&self) -> (&str, Option<&str>) {
        match self {
            KnowledgeSource::Path(p) => (p, None),
            KnowledgeSource::Folder { path, base_url, .. } => (path, base_url.as_deref()),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    pub requests_per_minute: u32,
    pub requests_per_minute_per_ip: u32,
    pub daily_token_budget: u64,
    pub concurrent_streams_per_visitor: u32,
    pub concurrent_streams: u32,
    pub max_message_chars: usize,
    /// The most tokens one turn may use; also what it reserves of the daily budget
    /// (an extension of §12).
    pub max_tokens_per_turn: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            requests_per_minute: 20,
            requests_per_minute_per_ip: 60,
            daily_token_budget: 1_000_000,
            concurrent_streams_per_visitor: 2,
            concurrent_streams: 200,
            max_message_chars: 4000,
            max_tokens_per_turn: 20_000,
        }
    }
}

fn default_ttl() -> Duration {
    Duration::from_secs(600)
}

impl Config {
    /// Reads, parses and validates a configuration file with the given environment.
    pub fn load(path: &Path, env: &Env) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            problems: vec![Problem {
                key: "(file)".into(),
                reason: format!("cannot be read: {e}"),
            }],
        })?;
        Self::from_toml(&text, &file, env)
    }

    /// Parses and validates configuration text; `file` only names it in errors.
    pub fn from_toml(text: &str, file: &str, env: &Env) -> Result<Config, ConfigError> {
        let config = parse(text).map_err(|problem| ConfigError {
            file: file.into(),
            problems: vec![problem],
        })?;
        config.finish(file, env)
    }

    /// Applies the environment, resolves secrets and runs every check.
    pub fn finish(mut self, file: &str, env: &Env) -> Result<Config, ConfigError> {
        self.llm.provider_defaults();
        let mut problems = env::apply(&mut self, env);
        problems.extend(validate::check(&self));
        if problems.is_empty() {
            Ok(self)
        } else {
            Err(ConfigError {
                file: file.into(),
                problems,
            })
        }
    }

    /// Parses a file without applying the environment or running checks, for commands
    /// that only need to find the database.
    pub fn load_unchecked(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            problems: vec![Problem {
                key: "(file)".into(),
                reason: format!("cannot be read: {e}"),
            }],
        })?;
        parse(&text).map_err(|problem| ConfigError {
            file,
            problems: vec![problem],
        })
    }

    /// Where `deskbell demo` keeps its database.
    pub fn demo_database_url() -> String {
        ServerConfig::default().database_url()
    }

    pub fn site(&self, id: &str) -> Option<&SiteConfig> {
        self.sites.iter().find(|s| s.id == id)
    }
}

fn parse(text: &str) -> Result<Config, Problem> {
    let de = toml::Deserializer::parse(text).map_err(|e| Problem {
        key: "(syntax)".into(),
        reason: e.to_string().trim().replace('\n', " "),
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let key = if path == "." {
            "(top level)".into()
        } else {
            path
        };
        Problem {
            key,
            reason: e.into_inner().message().trim().to_string(),
        }
    })
}

#[cfg(test)]
mod tests;
