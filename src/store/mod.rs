//! Durable state on SQLite or PostgreSQL through sqlx's `Any` driver.
//!
//! One set of SQL (with `$n` placeholders, which SQLite accepts too) serves both
//! backends, so handlers never know which one runs; only the migrations differ where
//! the dialects do (triggers). Ids, JSON and times are TEXT and BIGINT because `Any`
//! maps only the common scalar types.

mod approvals;
mod audit;
mod binds;
mod budget;
mod calls;
mod cards;
mod conversations;
pub mod desk;
mod edits;
mod error;
mod feedback;
pub mod ingests;
mod installation;
mod knowledge;
mod marks;
mod migrate;
mod operators;
mod overrides;
mod ownership;
mod quotas;
mod rows;
pub mod stored;
mod strings;
mod turns;
mod usage;
mod vectors;
mod visitors;

pub use crate::budget::{BudgetShare, Reservation};
pub use crate::states::{AuditEvent, CallKind, CallStatus, MessageStatus, Reason, Role};
pub use audit::{AuditFilter, AuditRow};
pub use calls::{CallRow, QuotaUse};
pub use cards::{Decided, Step};
pub use conversations::{
    ConversationFilter, ConversationListRow, MessageRow, SEARCH_WINDOW, STREAMING,
};
pub use error::{StoreError, StoreResult};
pub use feedback::FeedbackRow;
pub use ingests::IngestJobRow;
pub use operators::{OperatorRow, SessionRow, TokenRow};
pub use overrides::{ToolEdit, ToolOverride};
pub use ownership::{Claimed, DEFAULT_LEASE_MS, Fence, Renewal, StreamingAnswer};
pub use quotas::QuotaCount;
pub use strings::StringRow;
pub use turns::{TurnEnd, TurnStart};

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;

/// How SQLite commits (`[server] sqlite_synchronous`). `Full` syncs every commit to
/// disk: nothing acknowledged is lost even to a power cut. `Normal` syncs at WAL
/// checkpoints: a process crash loses nothing, a power cut may lose the last
/// commits, and commits cost no disk flush. PostgreSQL has its own settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    #[default]
    Full,
    Normal,
}

/// A pooled connection idle this long is pinged before it is handed out, so one
/// that the database or the network dropped meanwhile is replaced, not used.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The database `connection` talks to, by sqlx's name for it ("SQLite",
    /// "PostgreSQL").
    pub(in crate::store) fn of(connection: &sqlx::AnyConnection) -> Backend {
        if connection.backend_name().eq_ignore_ascii_case("sqlite") {
            Backend::Sqlite
        } else {
            Backend::Postgres
        }
    }
}

/// Reads go to `pool`; writes go to `writer`. On SQLite the writer is a single
/// connection: writers queue fairly in the pool instead of colliding in SQLite's
/// busy handler, whose back-off sleeps made for long tail latencies. On PostgreSQL
/// both are the same pool.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    writer: AnyPool,
    backend: Backend,
    /// SQLite only: commits turns' starts and ends together (see `turns.rs`).
    group: Option<turns::GroupCommit>,
    /// This process's lease, its length and the fence of what it starts
    /// (`ownership`).
    lease: std::sync::Arc<ownership::Lease>,
    /// SQLite only: this process's hold on the database's lock file (see
    /// `ownership::FileLock`), and whether it was the only process when it started.
    file_lock: Option<std::sync::Arc<ownership::FileLock>>,
    /// The questions' budget and tool-version reads, shared when they coincide.
    site_reads: std::sync::Arc<budget::SiteReads>,
    /// The sites' budgets as this replica last read and reserved them.
    known_budgets: std::sync::Arc<budget::KnownBudgets>,
    /// When this process last forgot old sign-in failures and their keys.
    login_keys_purged_at: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// Wakes this process's readers of a conversation's desk events (`desk.rs`).
    desk_events: tokio::sync::broadcast::Sender<String>,
    /// Wakes the live channels of one conversation (`desk/wakers.rs`).
    desk_wakers: std::sync::Arc<desk::Wakers>,
}

/// A transaction on either backend.
pub(crate) type Tx<'a> = sqlx::Transaction<'a, sqlx::Any>;

/// Reads a state kept as TEXT (`states.rs`); a value it does not know is a
/// decode error, never a default.
pub(crate) fn state<T>(
    row: &sqlx::any::AnyRow,
    column: &str,
    parse: fn(&str) -> Result<T, crate::states::UnknownState>,
) -> Result<T, sqlx::Error> {
    use sqlx::Row;
    let text: String = row.try_get(column)?;
    parse(&text).map_err(|e| sqlx::Error::ColumnDecode {
        index: column.to_string(),
        source: Box::new(e),
    })
}

/// Reads a state kept as nullable TEXT.
pub(crate) fn optional_state<T>(
    row: &sqlx::any::AnyRow,
    column: &str,
    parse: fn(&str) -> Result<T, crate::states::UnknownState>,
) -> Result<Option<T>, sqlx::Error> {
    use sqlx::Row;
    let text: Option<String> = row.try_get(column)?;
    text.map(|t| {
        parse(&t).map_err(|e| sqlx::Error::ColumnDecode {
            index: column.to_string(),
            source: Box::new(e),
        })
    })
    .transpose()
}

/// SQL assembled from constant parts (column lists), never from input.
pub(crate) fn sql(text: String) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(text)
}

impl Store {
    /// Connects, creating the SQLite file and its folder if missing, and applies the
    /// migrations of the backend.
    pub async fn connect(url: &str, durability: Durability) -> anyhow::Result<Store> {
        Self::connect_with(url, durability, true).await
    }

    /// Like `connect`; `group_commit` off makes each turn's start and end a
    /// transaction of its own on PostgreSQL too (`[server] group_commit`, a
    /// switch for measuring what the group commit brings).
    pub async fn connect_with(
        url: &str,
        durability: Durability,
        group_commit: bool,
    ) -> anyhow::Result<Store> {
        sqlx::any::install_default_drivers();
        let (backend, url) = if url.starts_with("sqlite:") {
            (Backend::Sqlite, prepare_sqlite_url(url)?)
        } else {
            (Backend::Postgres, url.to_string())
        };
        let synchronous = match durability {
            Durability::Full => "PRAGMA synchronous = FULL",
            Durability::Normal => "PRAGMA synchronous = NORMAL",
        };
        let open = |max: u32| {
            // sqlx pings every connection it takes from the idle queue: one more
            // round trip (on SQLite, one more hand-off to the connection's thread)
            // before each read and each group commit. Under load connections are
            // idle for microseconds, so only one idle for a while is checked.
            let options = AnyPoolOptions::new()
                .max_connections(max)
                .acquire_timeout(Duration::from_secs(10))
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move {
                        if meta.idle_for >= PING_AFTER_IDLE {
                            sqlx::Connection::ping(conn).await?;
                        }
                        Ok(true)
                    })
                });
            // `synchronous` belongs to a connection, not the file: it is set on every
            // connection the pool opens, so a recycled connection never falls back
            // to SQLite's default.
            let options = match backend {
                Backend::Sqlite => options.after_connect(move |conn, _| {
                    Box::pin(async move {
                        sqlx::Executor::execute(&mut *conn, synchronous).await?;
                        Ok(())
                    })
                }),
                // The vectors' reads take bytes as PostgreSQL prints them
                // (`store/vectors`): hex, whatever the database's own default.
                // The group commit's array literals mean a missing value by an
                // unquoted NULL (`rows.rs`), which PostgreSQL reads so only while
                // `array_nulls` is on; a database set otherwise would store the
                // word instead.
                Backend::Postgres => options.after_connect(|conn, _| {
                    Box::pin(async move {
                        sqlx::Executor::execute(&mut *conn, "SET bytea_output = 'hex'").await?;
                        sqlx::Executor::execute(&mut *conn, "SET array_nulls = on").await?;
                        Ok(())
                    })
                }),
            };
            options.connect(&url)
        };
        let context = || format!("cannot open the database ({})", redact_url(&url));
        let store = match backend {
            Backend::Sqlite => {
                let writer = open(1).await.with_context(context)?;
                // WAL lets readers proceed while the writer commits; the mode is stored
                // in the file, so setting it once per start is enough.
                sqlx::query("PRAGMA journal_mode = WAL")
                    .execute(&writer)
                    .await?;
                let pool = open(4).await.with_context(context)?;
                Store {
                    group: Some(turns::GroupCommit::start(writer.clone())),
                    pool,
                    writer,
                    backend,
                    lease: std::sync::Arc::new(ownership::Lease::new(DEFAULT_LEASE_MS)),
                    file_lock: ownership::FileLock::take(&url)?.map(std::sync::Arc::new),
                    site_reads: Default::default(),
                    known_budgets: Default::default(),
                    login_keys_purged_at: Default::default(),
                    desk_events: tokio::sync::broadcast::channel(1024).0,
                    desk_wakers: Default::default(),
                }
            }
            Backend::Postgres => {
                let pool = open(16).await.with_context(context)?;
                Store {
                    writer: pool.clone(),
                    // Every turn's start and end lock its site's budget row: in
                    // separate transactions they queue on that lock one commit
                    // at a time; together they share one.
                    group: group_commit.then(|| turns::GroupCommit::start(pool.clone())),
                    pool,
                    backend,
                    lease: std::sync::Arc::new(ownership::Lease::new(DEFAULT_LEASE_MS)),
                    file_lock: None,
                    site_reads: Default::default(),
                    known_budgets: Default::default(),
                    login_keys_purged_at: Default::default(),
                    desk_events: tokio::sync::broadcast::channel(1024).0,
                    desk_wakers: Default::default(),
                }
            }
        };
        migrate::run(&store).await?;
        // pgvector's type where the server has it (SPEC §21); a failure here
        // leaves the vectors as bytes, which serve the same.
        if let Err(e) = vectors::adopt_pgvector(&store).await {
            tracing::warn!(error = %e, "passage vectors could not move to pgvector's type; they stay stored as bytes");
        }
        Ok(store)
    }

    pub async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Sets how long this process's lease holds without renewal (`[server] lease_s`).
    pub fn with_lease(mut self, lease: Duration) -> Store {
        let ms = lease.as_millis().clamp(1_000, i64::MAX as u128) as i64;
        self.lease = std::sync::Arc::new(ownership::Lease::new(ms));
        self
    }

    /// How often the lease is renewed: three times within its lifetime.
    pub fn renew_every(&self) -> Duration {
        self.lease.length() / 3
    }

    /// The database's own clock in milliseconds, as SQL: leases are timed by one
    /// clock that every replica shares, not by each replica's own.
    fn now_sql(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
            Backend::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        }
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub(crate) fn writer(&self) -> &AnyPool {
        &self.writer
    }
}

/// Adds `mode=rwc` (create if missing) and creates the parent folder.
fn prepare_sqlite_url(url: &str) -> anyhow::Result<String> {
    let rest = url.trim_start_matches("sqlite:").trim_start_matches("//");
    let path = rest.split('?').next().unwrap_or_default();
    let parent = Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent.filter(|_| path != ":memory:") {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create the data folder {}", parent.display()))?;
    }
    Ok(if url.contains("mode=") {
        url.to_string()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    })
}

/// A database URL without its password, for error messages.
fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `synchronous` is a per-connection setting: every connection of both pools
    /// carries the configured one, not only the first.
    #[tokio::test]
    async fn every_sqlite_connection_has_the_configured_synchronous_setting() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("s.db").display());
        let store = Store::connect(&url, Durability::Normal).await.unwrap();
        let mut held = Vec::new();
        for _ in 0..4 {
            let mut conn = store.pool().acquire().await.unwrap();
            let (mode,): (i64,) = sqlx::query_as("PRAGMA synchronous")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            assert_eq!(mode, 1, "NORMAL on every read connection");
            held.push(conn);
        }
        let (mode,): (i64,) = sqlx::query_as("PRAGMA synchronous")
            .fetch_one(store.writer())
            .await
            .unwrap();
        assert_eq!(mode, 1, "NORMAL on the writer");
    }
}
