//! Drives the real app over HTTP on port 0, with a fresh database, a scripted model
//! server and a recording tool endpoint for every test.

use std::sync::Arc;

use deskbell::app::{self, App, Overrides};
use deskbell::clock::ManualClock;
use deskbell::config::{Config, Env};
use deskbell::llm::Provider;
use deskbell::testkit::{Dialect, FakeLlm, Webhook};
use serde_json::Value;

mod console;
mod live;
mod processes;
mod redis;
mod reply;
pub mod sent;

pub use console::{Console, PASSWORD, session_cookie};
pub use live::Channel;
pub use processes::{
    ask_as_new_visitor, ask_path_post, config_file, deskbell_command, free_port,
    fresh_postgres_database, succeeded,
};
pub use redis::{RedisChild, redis_url};
pub use reply::{Reply, parse_sse, parse_sse_with_ids, read};

pub const ORIGIN: &str = "https://shop.example";

pub const SECRET: &str = "test-master-secret-0123456789-abcdefghijklmnop";

pub const TOOL_SECRET: &str = "tool-webhook-secret";

pub const IDENTITY_SECRET: &str = "acme-identity-secret";

pub struct TestApp {
    pub base: String,
    pub http: reqwest::Client,
    pub llm: FakeLlm,
    pub hook: Webhook,
    pub clock: Arc<ManualClock>,
    pub app: App,
    pub database_url: String,
    _dir: Option<tempfile::TempDir>,
}

/// The database the suite runs on: SQLite files by default, a fresh PostgreSQL
/// database per test with `DESKBELL_TEST_BACKEND=postgres` (CI runs both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn under_test() -> Backend {
        match std::env::var("DESKBELL_TEST_BACKEND").as_deref() {
            Ok("postgres") => Backend::Postgres,
            _ => Backend::Sqlite,
        }
    }
}

/// The model stand-in's protocol: OpenAI's by default, Anthropic's with
/// `DESKBELL_TEST_PROVIDER=anthropic` (CI runs the provider-facing suites both
/// ways, SPEC §22).
pub fn dialect_under_test() -> Dialect {
    match std::env::var("DESKBELL_TEST_PROVIDER").as_deref() {
        Ok("anthropic") => Dialect::Anthropic,
        _ => Dialect::OpenAi,
    }
}

pub fn config_text(llm: &FakeLlm, hook: &Webhook) -> String {
    format!(
        r#"
[llm]
provider = "{provider}"
base_url = "{llm}"
model = "fake"
idle_timeout_s = 2
connect_timeout_s = 2
max_retries = 2

[[site]]
id = "acme"
name = "Acme"
origins = ["{ORIGIN}", "http://localhost:3000"]
instructions = "Be helpful."
identity_secret_env = "ACME_IDENTITY_SECRET"

[[site.tool]]
name = "lookup_order"
label = "Look up an order"
policy = "auto"
url = "{lookup}"
input_schema = {{ type = "object", required = ["order_id"], properties = {{ order_id = {{ type = "integer" }} }} }}

[[site.tool]]
name = "cancel_order"
label = "Cancel an order"
description = "Cancel an order that has not shipped."
policy = "confirm"
url = "{cancel}"
secret_env = "TOOL_SECRET"
input_schema = {{ type = "object", required = ["order_id"], properties = {{ order_id = {{ type = "integer", title = "Order ID" }}, reason = {{ type = "string" }} }} }}

[[site.tool]]
name = "refund"
label = "Refund a payment"
policy = "confirm"
url = "{refund}"
input_schema = {{ type = "object", properties = {{ amount = {{ type = "number" }} }} }}

[[site.tool]]
name = "delete_account"
label = "Delete the account"
policy = "off"
url = "{delete}"

[[site]]
id = "other"
origins = ["https://other.example"]
"#,
        llm = llm.base_url,
        provider = llm.dialect().provider(),
        lookup = hook.url("/lookup"),
        cancel = hook.url("/cancel"),
        refund = hook.url("/refund"),
        delete = hook.url("/delete"),
    )
}

/// What a site's backend gives a signed-in user: the HMAC of the id under the
/// site's identity secret, in hex.
/// A card's `expires_at` as Unix milliseconds.
pub fn card_expires_ms(card: &serde_json::Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(card["expires_at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

pub fn user_hash(user: &str) -> String {
    hex::encode(deskbell::secret::hmac_sha256(
        IDENTITY_SECRET.as_bytes(),
        user.as_bytes(),
    ))
}

/// A sent message row for writing turns through the store directly.
pub fn message_row(
    id: &str,
    conversation: &str,
    role: deskbell::states::Role,
) -> deskbell::store::MessageRow {
    deskbell::store::MessageRow {
        id: id.into(),
        conversation: conversation.into(),
        turn: deskbell::ids::new_id("t"),
        role,
        text: "hello".into(),
        status: deskbell::states::MessageStatus::Sent,
        citations: None,
        created_at: 1,
        owner: None,
        budget_day: None,
        reserved: 0,
        author: None,
    }
}

pub fn env() -> Env {
    Env::empty()
        .with("BETTER_AUTH_SECRET", SECRET)
        .with("TOOL_SECRET", TOOL_SECRET)
        .with("ACME_IDENTITY_SECRET", IDENTITY_SECRET)
        .with("ANTHROPIC_API_KEY", "sk-ant-test-key")
        // BM25 alone unless a test turns the embedding model on (`knowledge.rs`).
        .with("DESKBELL_EMBEDDING", "off")
}

impl TestApp {
    pub async fn start() -> TestApp {
        Self::with(|_| {}).await
    }

    /// Starts an app whose configuration `edit` may change first.
    pub async fn with(edit: impl FnOnce(&mut Config)) -> TestApp {
        Self::with_provider(None, edit).await
    }

    /// Like `with`, answering with `provider` instead of the scripted model when
    /// given (a test that must watch the provider keeps its own handle).
    pub async fn with_provider(
        provider: Option<Arc<dyn Provider>>,
        edit: impl FnOnce(&mut Config),
    ) -> TestApp {
        Self::speaking(dialect_under_test(), provider, edit).await
    }

    /// Like `with_provider`, with a model stand-in of the given protocol
    /// whatever the suite's (`anthropic.rs` always speaks Anthropic's).
    pub async fn speaking(
        dialect: Dialect,
        provider: Option<Arc<dyn Provider>>,
        edit: impl FnOnce(&mut Config),
    ) -> TestApp {
        let dir = tempfile::tempdir().unwrap();
        let url = match Backend::under_test() {
            Backend::Sqlite => format!("sqlite://{}", dir.path().join("deskbell.db").display()),
            Backend::Postgres => fresh_postgres_database().await,
        };
        let llm = FakeLlm::start_as(dialect).await.unwrap();
        let hook = Webhook::start().await.unwrap();
        Self::on(
            url,
            Some(dir),
            llm,
            hook,
            Arc::new(ManualClock::starting_now()),
            provider,
            edit,
        )
        .await
    }

    /// Starts an app on a given database, model, endpoint and clock (a second
    /// replica); `provider`, when given, answers instead of the scripted model.
    pub async fn on(
        database_url: String,
        dir: Option<tempfile::TempDir>,
        llm: FakeLlm,
        hook: Webhook,
        clock: Arc<ManualClock>,
        provider: Option<Arc<dyn Provider>>,
        edit: impl FnOnce(&mut Config),
    ) -> TestApp {
        let mut config = Config::from_toml(&config_text(&llm, &hook), "test.toml", &env()).unwrap();
        config.server.database_url = Some(database_url.clone());
        // The app's own files (its knowledge indexes) in its own folder: tests
        // running at once must not share one index.
        if let Some(dir) = &dir {
            config.server.data_dir = dir.path().join("data");
        }
        edit(&mut config);
        let overrides = Overrides {
            clock: Some(clock.clone()),
            provider,
            ..Default::default()
        };
        let app = app::build(config, overrides).await.unwrap();
        let router = deskbell::routes::router(app.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(deskbell::routes::serve(
            app.clone(),
            router,
            listener,
            std::future::pending(),
        ));
        TestApp {
            base,
            http: reqwest::Client::new(),
            llm,
            hook,
            clock,
            app,
            database_url,
            _dir: dir,
        }
    }

    pub async fn visitor(&self) -> String {
        self.visitor_for("acme").await
    }

    pub async fn visitor_for(&self, site: &str) -> String {
        let origin = if site == "acme" {
            ORIGIN
        } else {
            "https://other.example"
        };
        let r = self
            .post(
                "/v1/visitors",
                None,
                origin,
                serde_json::json!({"site": site}),
            )
            .await;
        assert_eq!(r.status, 200, "{:?}", r.json);
        r.json["token"].as_str().unwrap().to_string()
    }

    /// A verified visitor of the acme site; the reply carries its token and id.
    pub async fn verified_visitor(&self, user: &str) -> Reply {
        let body =
            serde_json::json!({"site": "acme", "user_id": user, "user_hash": user_hash(user)});
        let r = self.post("/v1/visitors", None, ORIGIN, body).await;
        assert_eq!(r.status, 200, "{:?}", r.json);
        r
    }

    pub async fn post(&self, path: &str, token: Option<&str>, origin: &str, body: Value) -> Reply {
        self.post_raw(path, token, Some(origin), body.to_string())
            .await
    }

    pub async fn post_raw(
        &self,
        path: &str,
        token: Option<&str>,
        origin: Option<&str>,
        body: String,
    ) -> Reply {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(origin) = origin {
            req = req.header("origin", origin);
        }
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        read(req.send().await.unwrap()).await
    }

    pub async fn ask(&self, token: &str, body: Value) -> Reply {
        self.post("/v1/ask", Some(token), ORIGIN, body).await
    }

    pub async fn question(&self, token: &str, conversation: Option<&str>, message: &str) -> Reply {
        self.ask(
            token,
            serde_json::json!({"conversation": conversation, "message": message}),
        )
        .await
    }

    /// Answers a card with the call and signature of a `confirm` event.
    pub async fn answer(
        &self,
        token: &str,
        conversation: &str,
        card: &Value,
        decision: &str,
    ) -> Reply {
        let body = serde_json::json!({"conversation": conversation, "call": card["call"], "decision": decision, "signature": card["signature"]});
        self.ask(token, body).await
    }

    pub async fn history(&self, token: &str, conversation: &str) -> Reply {
        let req = self
            .http
            .get(format!("{}/v1/conversations/{conversation}", self.base))
            .header("origin", ORIGIN)
            .bearer_auth(token);
        read(req.send().await.unwrap()).await
    }

    pub async fn audit(&self) -> Vec<deskbell::store::AuditRow> {
        self.app
            .store
            .audit()
            .page(None, None, i64::MAX)
            .await
            .unwrap()
            .into_iter()
            .map(|(_, row)| row)
            .collect()
    }

    /// Audit events of one call, in order.
    pub async fn audit_events(&self, call: &str) -> Vec<String> {
        let rows = self.app.store.audit().for_call(call).await.unwrap();
        rows.iter()
            .map(|r| match &r.reason {
                Some(reason) => format!("{}:{reason}", r.event),
                None => r.event.to_string(),
            })
            .collect()
    }

    /// Waits until running turns are finished and saved (for disconnect tests).
    pub async fn settle(&self) {
        for _ in 0..200 {
            if self.app.turns.is_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("turns did not finish");
    }
}

impl TestApp {
    /// A pool on the test's database, for tests that must reach past the API.
    pub async fn db(&self) -> sqlx::AnyPool {
        sqlx::any::install_default_drivers();
        sqlx::AnyPool::connect(&self.database_url).await.unwrap()
    }

    /// The database itself refuses to change or delete audit rows.
    pub async fn assert_audit_is_append_only(&self) {
        let pool = self.db().await;
        let update = sqlx::query("UPDATE audit SET event = 'confirmed'")
            .execute(&pool)
            .await;
        assert!(update.is_err(), "an audit row was updated");
        let delete = sqlx::query("DELETE FROM audit").execute(&pool).await;
        assert!(delete.is_err(), "an audit row was deleted");
        if self.database_url.starts_with("postgres") {
            let truncate = sqlx::query("TRUNCATE audit").execute(&pool).await;
            assert!(truncate.is_err(), "the audit table was truncated");
        }
    }
}

impl TestApp {
    /// A second app on the same database, model, tool endpoint and clock: another
    /// replica, or the same server restarted with an edited configuration.
    pub async fn replica(&self, edit: impl FnOnce(&mut Config)) -> TestApp {
        TestApp::on(
            self.database_url.clone(),
            None,
            self.llm.clone(),
            self.hook.clone(),
            self.clock.clone(),
            None,
            edit,
        )
        .await
    }

    /// Asks the model to cancel order 42; returns the conversation and the card.
    pub async fn raise_card(&self, token: &str) -> (String, Value) {
        self.llm.push(deskbell::testkit::Reply::tool_calls(&[(
            "cancel_order",
            serde_json::json!({"order_id": 42}),
        )]));
        let r = self.question(token, None, "Please cancel order 42").await;
        assert_eq!(r.status, 200, "{:?}", r.json);
        (r.conversation(), r.event("confirm").clone())
    }
}

/// Guards loose enough that every racing answer reaches the decision itself, so a
/// race test sees the decision's 409s rather than the guards' 429s.
pub fn for_racing(c: &mut Config) {
    let limits = &mut c.sites[0].limits;
    limits.requests_per_minute = 1000;
    limits.requests_per_minute_per_ip = 1000;
    limits.concurrent_streams_per_visitor = 100;
}
