//! The application state and the HTTP router that every entry point (serve, demo,
//! tests, benchmarks) builds in the same way.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Method, header};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, SiteConfig};
use crate::guard::counters::{Counters, LocalCounters};
use crate::knowledge::Knowledge;
use crate::llm::{LocalProvider, OpenAiProvider, Provider};
use crate::secret::Keys;
use crate::store::Store;
use crate::tools::Toolbox;
use crate::tools::http::Executor;

/// Request bodies are small JSON documents; anything larger is refused early.
const BODY_LIMIT: usize = 64 * 1024;
/// A body must arrive within this, so a slow sender cannot hold a connection open.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Site {
    pub config: SiteConfig,
    pub tools: Toolbox,
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
    /// Rate-limit buckets and stream slots.
    pub counters: Arc<dyn Counters>,
    pub trusted_proxies: Vec<std::net::IpAddr>,
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
async fn local_provider(config: &Config) -> anyhow::Result<LocalProvider> {
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
    Ok(provider)
}

/// Connects storage and the provider and derives the keys. The config must have been
/// validated and must carry the master secret.
pub async fn build(config: Config, overrides: Overrides) -> anyhow::Result<App> {
    let Some(secret) = config.secret.as_ref() else {
        anyhow::bail!("BETTER_AUTH_SECRET is not set");
    };
    let keys = Keys::derive(secret);
    let store = Store::connect(
        &config.server.database_url(),
        config.server.sqlite_synchronous,
    )
    .await?
    .with_lease(Duration::from_secs_f64(config.server.lease_s));
    let clock = overrides.clock.unwrap_or_else(|| Arc::new(SystemClock));
    let interrupted = store.fail_interrupted_messages(clock.now_ms()).await?;
    if interrupted > 0 {
        tracing::warn!(
            count = interrupted,
            "answers interrupted by a stop of an earlier version were marked failed"
        );
    }
    store.take_lease().await?;
    let provider: Arc<dyn Provider> = match overrides.provider {
        Some(p) => p,
        None if config.llm.provider == "local" => Arc::new(local_provider(&config).await?),
        None => Arc::new(OpenAiProvider::new(&config.llm)?),
    };
    let trusted_proxies = config
        .server
        .trusted_proxies
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    let knowledge = Knowledge::open(&config).await?;
    let mut sites = HashMap::new();
    for site in &config.sites {
        let tools = Toolbox::new(&site.tools)?;
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
        counters: overrides
            .counters
            .unwrap_or_else(|| Arc::new(LocalCounters::default())),
        trusted_proxies,
    });
    // What a dead process left is finished now: on a SQLite file this process
    // has alone, every other lease is a dead one; otherwise a lease is claimed
    // once it has lapsed (`ask::lease_forever`). A failure here is logged, and
    // the next renewal tries again: it must not stop the server from starting.
    if let Err(e) = crate::ask::recover(&app, true).await {
        tracing::error!(error = format!("{e:#}"), "recovery at start failed");
    }
    Ok(app)
}

pub fn router(app: App) -> Router {
    let request_id = HeaderName::from_static("x-request-id");
    Router::new()
        .route("/healthz", get(healthz))
        .merge(crate::visitor::router())
        .merge(crate::ask::router())
        .merge(crate::conversation::router())
        .merge(crate::widget::router())
        .fallback(|| async { crate::error::ApiError::NotFound })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(RequestBodyTimeoutLayer::new(BODY_READ_TIMEOUT))
        .layer(cors(&app))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &axum::extract::Request| {
            let id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("");
            tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
        }))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(app)
}

/// Preflights are answered only for origins some site lists, never with a wildcard.
fn cors(app: &App) -> CorsLayer {
    let allowed: Vec<String> = app
        .sites
        .values()
        .flat_map(|s| s.config.origins.clone())
        .collect();
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, _| {
            origin
                .to_str()
                .is_ok_and(|o| allowed.iter().any(|a| a == o))
        }))
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
        .expose_headers([header::RETRY_AFTER])
        .max_age(Duration::from_secs(600))
}

async fn healthz(
    axum::extract::State(app): axum::extract::State<App>,
) -> Result<axum::Json<serde_json::Value>, crate::error::ApiError> {
    app.store.ping().await?;
    Ok(axum::Json(serde_json::json!({"status": "ok"})))
}

/// Serves until `shutdown` resolves, then waits (bounded) for running turns so that
/// answers in progress are finished and saved.
pub async fn serve(
    app: App,
    router: Router,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let sweeper = tokio::spawn(crate::confirm::expiry::sweep_forever(app.clone()));
    let lease = tokio::spawn(crate::ask::lease_forever(app.clone()));
    let header_timeout = Duration::from_secs_f64(app.config.server.header_read_timeout_s);
    crate::server::run(listener, router, header_timeout, shutdown).await?;
    sweeper.abort();
    app.turns.close();
    if tokio::time::timeout(Duration::from_secs(30), app.turns.wait())
        .await
        .is_err()
    {
        tracing::warn!("some turns were still running after 30 seconds and were stopped");
        // The lease is kept: what those turns left is recovered once it lapses.
        lease.abort();
        return Ok(());
    }
    lease.abort();
    if let Err(e) = app.store.release_lease().await {
        tracing::warn!(error = format!("{e:#}"), "the lease could not be given up");
    }
    Ok(())
}
