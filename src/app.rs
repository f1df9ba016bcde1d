//! The application state that every entry point (serve, demo, tests, benchmarks)
//! builds in the same way. Handlers take it from here; this module imports none
//! of them (the router is `routes.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, SiteConfig};
use crate::guard::counters::{Counters, LocalCounters};
use crate::guard::redis::RedisCounters;
use crate::knowledge::Knowledge;
use crate::llm::{OpenAiProvider, Provider};
use crate::secret::Keys;
use crate::store::Store;
use crate::tools::catalog::Catalog;
use crate::tools::http::Executor;

pub struct Site {
    pub config: SiteConfig,
    /// The file's tools with the console's changes (`tools::catalog`).
    pub tools: Catalog,
}

impl std::fmt::Debug for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Site({})", self.config.id)
    }
}

pub struct AppState {
    pub config: Config,
    pub sites: HashMap<String, Arc<Site>>,
    pub store: Store,
    pub keys: Keys,
    pub clock: Arc<dyn Clock>,
    pub provider: Arc<dyn Provider>,
    pub executor: Executor,
    pub knowledge: Knowledge,
    /// Turns run as tasks that outlive their request; shutdown waits for them.
    pub turns: TaskTracker,
    /// Rate-limit buckets and stream slots: in Redis with `redis_url`, else here.
    pub counters: Arc<dyn Counters>,
    /// This process's own counters, for reads while Redis cannot be reached.
    pub fallback_counters: LocalCounters,
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// Changes the operator console shows live.
    pub live: crate::live::Live,
    /// Whether browsers reach the console over plain HTTP (`public_url` is
    /// http://, or none is set and the server listens on loopback): its
    /// session cookie then goes without `Secure` (SPEC §15).
    pub plain_http: bool,
    /// The MCP servers' supervisors; dropping the state stops them.
    pub mcp: crate::mcp::Servers,
}

pub type App = Arc<AppState>;

impl AppState {
    pub fn site(&self, id: &str) -> Option<&Arc<Site>> {
        self.sites.get(id)
    }
}

/// What `build` may be given instead of the defaults, for tests and benchmarks.
#[derive(Default)]
pub struct Overrides {
    pub clock: Option<Arc<dyn Clock>>,
    pub provider: Option<Arc<dyn Provider>>,
    pub counters: Option<Arc<dyn Counters>>,
}

/// Loads the embedded model, off the async runtime since it reads a large file.
#[cfg(feature = "local-model")]
async fn local_provider(config: &Config) -> anyhow::Result<Arc<dyn Provider>> {
    use crate::llm::LocalProvider;
    use std::path::PathBuf;
    let llm = &config.llm;
    let path = match &llm.local_model {
        Some(path) => PathBuf::from(path),
        None => {
            let source = crate::llm::local::fetch::default_model();
            crate::llm::local::fetch::fetch(&source, &llm.local_cache, llm.hub_endpoint.as_deref())
                .await?
        }
    };
    let tokenizer = llm.local_tokenizer.as_ref().map(PathBuf::from);
    let queue = llm.local_queue;
    let (provider, _) =
        tokio::task::spawn_blocking(move || LocalProvider::start(path, tokenizer, queue)).await??;
    Ok(Arc::new(provider))
}

#[cfg(not(feature = "local-model"))]
async fn local_provider(_: &Config) -> anyhow::Result<Arc<dyn Provider>> {
    anyhow::bail!(
        "this build of Deskbell has no embedded model (it was built without the `local-model` feature): \
         set [llm] provider = \"openai\" and a base_url"
    )
}

/// Connects storage and the provider and derives the keys. The config must have been
/// validated and must carry the master secret.
pub async fn build(config: Config, overrides: Overrides) -> anyhow::Result<App> {
    let Some(secret) = config.secret.as_ref() else {
        anyhow::bail!("BETTER_AUTH_SECRET is not set");
    };
    let keys = Keys::derive(secret);
    let store = Store::connect_with(
        &config.server.database_url(),
        config.server.sqlite_synchronous,
        config.server.group_commit,
    )
    .await?
    .with_lease(Duration::from_secs_f64(config.server.lease_s));
    let clock = overrides.clock.unwrap_or_else(|| Arc::new(SystemClock));
    let interrupted = store
        .conversations()
        .fail_interrupted(clock.now_ms())
        .await?;
    if interrupted > 0 {
        tracing::warn!(
            count = interrupted,
            "answers interrupted by a stop of an earlier version were marked failed"
        );
    }
    store.leases().take().await?;
    let provider: Arc<dyn Provider> = match overrides.provider {
        Some(p) => p,
        None if config.llm.provider == "local" => local_provider(&config).await?,
        None if config.llm.provider == "anthropic" => {
            Arc::new(crate::llm::AnthropicProvider::new(&config.llm)?)
        }
        None => Arc::new(OpenAiProvider::new(&config.llm)?),
    };
    let trusted_proxies = config
        .server
        .trusted_proxies
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    let knowledge = Knowledge::open_shared(&config, &store).await?;
    let counters: Arc<dyn Counters> = match (overrides.counters, &config.server.redis_url) {
        (Some(counters), _) => counters,
        (None, Some(url)) => Arc::new(RedisCounters::connect(
            url,
            &store.installation().await?,
            // SPEC §16: a dead replica's slots are free within 30 s.
            Duration::from_secs_f64(config.server.lease_s.min(30.0)),
        )?),
        (None, None) => Arc::new(LocalCounters::default()),
    };
    // Browsers reach the console over plain HTTP only where the operator says
    // so (`public_url = "http://…"`) or, with no public URL, on loopback; behind
    // a TLS proxy on loopback the public URL is https and the cookie `Secure`.
    let plain_http = match &config.server.public_url {
        Some(url) => url.starts_with("http://"),
        None => config
            .server
            .bind
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.ip().is_loopback()),
    };
    let mcp = crate::mcp::Servers::start(&config.sites).await;
    let mut sites = HashMap::new();
    for site in &config.sites {
        let known = site.locale == "auto"
            || crate::locale::resolve(&site.locale, "") != "en"
            || site.locale.starts_with("en");
        if !known {
            tracing::warn!(
                site = %site.id,
                locale = %site.locale,
                languages = %crate::locale::known().join(", "),
                "the site's locale has no catalog: its widget speaks English"
            );
        }
        let tools = Catalog::new(&site.id, site.tools.clone(), mcp.of_site(&site.id))?;
        // The console's changes are read now, so the first turn needs no rebuild.
        let _ = tools.current(&store).await;
        sites.insert(
            site.id.clone(),
            Arc::new(Site {
                config: site.clone(),
                tools,
            }),
        );
    }
    let app = Arc::new(AppState {
        config,
        sites,
        store,
        keys,
        clock,
        provider,
        executor: Executor::new()?,
        knowledge,
        turns: TaskTracker::new(),
        counters,
        fallback_counters: LocalCounters::default(),
        trusted_proxies,
        live: Default::default(),
        plain_http,
        mcp,
    });
    Ok(app)
}
