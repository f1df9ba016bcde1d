//! The crash tests' harness: `deskbell serve` as a child process on a fresh port,
//! killed or aborted at a crash point, and the test's view of its database.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use deskbell::testkit::{FakeLlm, HookReply, Reply as Script, Webhook};
use serde_json::{Value, json};

use crate::support::{self, ORIGIN, deskbell_command, read};

/// A `deskbell serve` child process on a fresh port.
pub struct Server {
    pub child: Child,
    pub base: String,
}

/// A failing assertion must not leave a server running: dropping one stops it.
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `deskbell serve` on a fresh port, optionally aborting at a crash point.
pub fn spawn(config: &Path, crash_at: Option<&str>) -> (Child, String) {
    spawn_env(config, crash_at, &[])
}

/// Like `spawn`, with more environment variables.
pub fn spawn_env(config: &Path, crash_at: Option<&str>, env: &[(&str, &str)]) -> (Child, String) {
    let port = crate::support::free_port();
    let mut command = deskbell_command();
    command
        .args(["serve", "--config"])
        .arg(config)
        .env("DESKBELL_BIND", format!("127.0.0.1:{port}"))
        .env("DESKBELL_EMBEDDING", "off")
        .env("BETTER_AUTH_SECRET", support::SECRET)
        .env("TOOL_SECRET", support::TOOL_SECRET)
        .env("ACME_IDENTITY_SECRET", support::IDENTITY_SECRET)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(point) = crash_at {
        command.env("DESKBELL_CRASH_AT", point);
    }
    command.envs(env.iter().copied());
    (command.spawn().unwrap(), format!("http://127.0.0.1:{port}"))
}

impl Server {
    pub async fn start(config: &Path, crash_at: Option<&str>) -> Server {
        Self::start_env(config, crash_at, &[]).await
    }

    pub async fn start_env(config: &Path, crash_at: Option<&str>, env: &[(&str, &str)]) -> Server {
        let (child, base) = spawn_env(config, crash_at, env);
        let server = Server { child, base };
        let http = reqwest::Client::new();
        for _ in 0..400 {
            if http
                .get(format!("{}/healthz", server.base))
                .send()
                .await
                .is_ok()
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("deskbell serve did not start");
    }

    /// SIGKILL: no shutdown, no destructor, nothing more written.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits for a process that aborts itself at a crash point.
    pub async fn crashed(mut self) {
        for _ in 0..400 {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        self.child.kill().unwrap();
        panic!("the crash point was not reached");
    }

    pub async fn visitor(&self) -> String {
        visitor_at(&self.base).await
    }

    pub async fn ask(&self, token: &str, body: Value) -> support::Reply {
        ask_at(&self.base, token, body).await
    }

    /// Raises a card for cancelling order 42 and confirms it without waiting for
    /// the answer (the crash will cut it); returns the conversation and the card.
    pub async fn confirm_in_background(&self, s: &Setup, token: &str) -> (String, Value) {
        self.confirm_call_in_background(s, token, "cancel_order", json!({"order_id": 42}))
            .await
    }

    /// Like `confirm_in_background`, for a card of any confirm tool.
    pub async fn confirm_call_in_background(
        &self,
        s: &Setup,
        token: &str,
        tool: &str,
        arguments: Value,
    ) -> (String, Value) {
        s.llm.push(Script::tool_calls(&[(tool, arguments)]));
        let r = self.ask(token, json!({"message": "Please do it"})).await;
        let conversation = r.conversation();
        let card = r.event("confirm").clone();
        self.ask_in_background(
            token,
            json!({"conversation": conversation, "call": card["call"], "decision": "confirm", "signature": card["signature"]}),
        );
        (conversation, card)
    }

    /// Sends an ask and waits until the server acknowledges it: the stream's head
    /// comes only once the turn's start is saved, so what a crash cuts after this
    /// is in the database. The stream is read on in the background. Returns the
    /// status.
    pub async fn ask_acknowledged(&self, token: &str, body: Value) -> u16 {
        let r = ask_request(&self.base, token, &body).send().await.unwrap();
        let status = r.status().as_u16();
        tokio::spawn(async move {
            let _ = r.text().await;
        });
        status
    }

    /// Sends an ask whose whole stream is read in the background, for a test
    /// to look at once the process it went to has done whatever it does.
    pub fn ask_streamed(
        &self,
        token: &str,
        body: Value,
    ) -> tokio::task::JoinHandle<support::Reply> {
        let base = self.base.clone();
        let token = token.to_string();
        tokio::spawn(async move { ask_at(&base, &token, body).await })
    }

    /// Sends an ask whose stream will be cut by the crash; nobody waits for it.
    pub fn ask_in_background(&self, token: &str, body: Value) {
        let request = ask_request(&self.base, token, &body);
        tokio::spawn(async move {
            if let Ok(r) = request.send().await {
                let _ = r.text().await;
            }
        });
    }

    pub async fn history(&self, token: &str, conversation: &str) -> Value {
        let r = reqwest::Client::new()
            .get(format!("{}/v1/conversations/{conversation}", self.base))
            .header("origin", ORIGIN)
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        r.json().await.unwrap()
    }

    /// Polls the history until it shows `count` messages (an answer still
    /// streaming is not shown).
    pub async fn settled_history(&self, token: &str, conversation: &str, count: usize) -> Value {
        for _ in 0..600 {
            let h = self.history(token, conversation).await;
            if h["messages"].as_array().is_some_and(|m| m.len() >= count) {
                return h;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the interrupted turn was never finished");
    }
}

/// A new visitor of the acme site at `base` (a server or a load balancer).
pub async fn visitor_at(base: &str) -> String {
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/visitors"))
        .header("origin", ORIGIN)
        .json(&json!({"site": "acme"}))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    body["token"].as_str().unwrap().to_string()
}

/// An ask at `base`, on a connection of its own.
pub async fn ask_at(base: &str, token: &str, body: Value) -> support::Reply {
    let r = ask_request(base, token, &body).send().await.unwrap();
    read(r).await
}

/// An ask at `base` from a client of its own, ready to send.
fn ask_request(base: &str, token: &str, body: &Value) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("{base}/v1/ask"))
        .header("origin", ORIGIN)
        .bearer_auth(token)
        .json(body)
}

/// The database of the suite's run (`DESKBELL_TEST_BACKEND`).
pub fn on_postgres() -> bool {
    support::Backend::under_test() == support::Backend::Postgres
}

pub struct Setup {
    pub llm: FakeLlm,
    pub hook: Webhook,
    pub config: PathBuf,
    pub database_url: String,
    _dir: tempfile::TempDir,
}

pub async fn setup(postgres: bool) -> Setup {
    setup_with(postgres, "", "").await
}

/// Like `setup`, with `extra` lines in the configuration's `[server]` table and
/// `acme` lines in the first site's (such as a `[site.limits]` table).
pub async fn setup_with(postgres: bool, extra: &str, acme: &str) -> Setup {
    let llm = FakeLlm::start().await.unwrap();
    let hook = Webhook::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let database_url = match postgres {
        true => support::fresh_postgres_database().await,
        false => format!("sqlite://{}", dir.path().join("deskbell.db").display()),
    };
    // A short lease, so that on PostgreSQL (where a start takes over only lapsed
    // leases) recovery comes within seconds.
    let text = format!(
        "[server]\ndata_dir = \"{}\"\ndatabase_url = \"{database_url}\"\nlease_s = 3\n{extra}{}",
        dir.path().display(),
        // The model stand-in pauses mid-answer longer than the suite's usual
        // stall limit.
        support::config_text(&llm, &hook)
            .replace("idle_timeout_s = 2", "idle_timeout_s = 300")
            .replace(
                "identity_secret_env = \"ACME_IDENTITY_SECRET\"\n",
                &format!("identity_secret_env = \"ACME_IDENTITY_SECRET\"\n{acme}\n"),
            )
    );
    let config = dir.path().join("deskbell.toml");
    std::fs::write(&config, text).unwrap();
    Setup {
        llm,
        hook,
        config,
        database_url,
        _dir: dir,
    }
}

impl Setup {
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }

    /// The configuration with a data folder of replica `i`'s own.
    pub fn replica_config(&self, i: usize) -> PathBuf {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let data = self.dir().join(format!("replica-{i}"));
        let text = text.replacen(
            &format!("data_dir = \"{}\"", self.dir().display()),
            &format!("data_dir = \"{}\"", data.display()),
            1,
        );
        let path = self.dir().join(format!("replica-{i}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Asks about order 42: the model looks it up, and the lookup hangs in
    /// the tools' backend until the test goes on (a call left running).
    pub async fn lookup_left_running(&self, server: &Server, token: &str) {
        self.llm.push(Script::Stream(vec![
            deskbell::testkit::Piece::Text("Let me look. ".into()),
            deskbell::testkit::Piece::ToolCall {
                id: "call_fake_0".into(),
                name: "lookup_order".into(),
                arguments: r#"{"order_id": 42}"#.into(),
            },
        ]));
        self.hook.push(hanging());
        server.ask_in_background(token, json!({"message": "Where is order 42?"}));
        self.wait_for_delivery("/lookup", 1).await;
    }

    pub async fn db(&self) -> sqlx::AnyPool {
        sqlx::any::install_default_drivers();
        sqlx::AnyPool::connect(&self.database_url).await.unwrap()
    }

    pub async fn audit(&self, call: &str) -> Vec<String> {
        let rows = sqlx::query("SELECT event, reason FROM audit WHERE call = $1 ORDER BY at, id")
            .bind(call)
            .fetch_all(&self.db().await)
            .await
            .unwrap();
        rows.iter()
            .map(|r| {
                use sqlx::Row;
                let event: String = r.get("event");
                match r.get::<Option<String>, _>("reason") {
                    Some(reason) => format!("{event}:{reason}"),
                    None => event,
                }
            })
            .collect()
    }

    /// The one call of the test's conversation, by the tool's path.
    pub async fn call_id(&self, tool: &str) -> String {
        use sqlx::Row;
        let row = sqlx::query("SELECT id FROM calls WHERE tool = $1")
            .bind(tool)
            .fetch_one(&self.db().await)
            .await
            .unwrap();
        row.get("id")
    }

    pub async fn reserved(&self) -> i64 {
        use sqlx::Row;
        let row =
            sqlx::query("SELECT CAST(COALESCE(SUM(reserved), 0) AS BIGINT) AS r FROM budgets")
                .fetch_one(&self.db().await)
                .await
                .unwrap();
        row.try_get::<i64, _>("r").unwrap_or_default()
    }

    pub async fn wait_for_delivery(&self, path: &str, count: usize) {
        for _ in 0..400 {
            if self.hook.calls().iter().filter(|c| c.path == path).count() >= count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the tool was not called");
    }

    pub fn idempotency_keys(&self, path: &str) -> Vec<String> {
        self.hook
            .calls()
            .iter()
            .filter(|c| c.path == path)
            .map(|c| c.headers["idempotency-key"].clone())
            .collect()
    }
}

/// A tool that never answers in time: the process is killed while it runs.
pub fn hanging() -> HookReply {
    HookReply {
        status: 200,
        body: "{\"ok\":true}".into(),
        delay: Duration::from_secs(120),
    }
}

impl Server {
    /// A start that recovers the dead process's call and dies delivering it.
    pub async fn start_crashing(config: &Path, point: &str) {
        let (child, base) = spawn(config, Some(point));
        Server { child, base }.crashed().await;
    }
}
