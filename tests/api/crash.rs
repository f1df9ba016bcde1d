//! Crash tests (SPEC §6.5): the real `deskbell serve` binary as a child process,
//! killed with SIGKILL (or aborted at a chosen crash point) while a call runs or an
//! answer streams, then started again. Every call ends with exactly one outcome,
//! every delivery carries the same `Idempotency-Key`, history shows every
//! acknowledged message (an interrupted answer as `failed`), and budget
//! reservations are released.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use deskbell::testkit::{FakeLlm, HookReply, Piece, Reply as Script, Webhook};
use serde_json::{Value, json};

use crate::support::{self, ORIGIN, deskbell_command, read};

/// A `deskbell serve` child process on a fresh port.
struct Server {
    child: Child,
    base: String,
}

/// `deskbell serve` on a fresh port, optionally aborting at a crash point.
fn spawn(config: &Path, crash_at: Option<&str>) -> (Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut command = deskbell_command();
    command
        .args(["serve", "--config"])
        .arg(config)
        .env("DESKBELL_BIND", format!("127.0.0.1:{port}"))
        .env("BETTER_AUTH_SECRET", support::SECRET)
        .env("TOOL_SECRET", support::TOOL_SECRET)
        .env("ACME_IDENTITY_SECRET", support::IDENTITY_SECRET)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(point) = crash_at {
        command.env("DESKBELL_CRASH_AT", point);
    }
    (command.spawn().unwrap(), format!("http://127.0.0.1:{port}"))
}

impl Server {
    async fn start(config: &Path, crash_at: Option<&str>) -> Server {
        let (child, base) = spawn(config, crash_at);
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
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits for a process that aborts itself at a crash point.
    async fn crashed(mut self) {
        for _ in 0..400 {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        self.child.kill().unwrap();
        panic!("the crash point was not reached");
    }

    async fn visitor(&self) -> String {
        let http = reqwest::Client::new();
        let r = http
            .post(format!("{}/v1/visitors", self.base))
            .header("origin", ORIGIN)
            .json(&json!({"site": "acme"}))
            .send()
            .await
            .unwrap();
        let body: Value = r.json().await.unwrap();
        body["token"].as_str().unwrap().to_string()
    }

    async fn ask(&self, token: &str, body: Value) -> support::Reply {
        let r = reqwest::Client::new()
            .post(format!("{}/v1/ask", self.base))
            .header("origin", ORIGIN)
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        read(r).await
    }

    /// Raises a card for cancelling order 42 and confirms it without waiting for
    /// the answer (the crash will cut it); returns the conversation and the card.
    async fn confirm_in_background(&self, s: &Setup, token: &str) -> (String, Value) {
        s.llm.push(Script::tool_calls(&[(
            "cancel_order",
            json!({"order_id": 42}),
        )]));
        let r = self.ask(token, json!({"message": "Cancel order 42"})).await;
        let conversation = r.conversation();
        let card = r.event("confirm").clone();
        self.ask_in_background(
            token,
            json!({"conversation": conversation, "call": card["call"], "decision": "confirm", "signature": card["signature"]}),
        );
        (conversation, card)
    }

    /// Sends an ask whose stream will be cut by the crash; nobody waits for it.
    fn ask_in_background(&self, token: &str, body: Value) {
        let request = reqwest::Client::new()
            .post(format!("{}/v1/ask", self.base))
            .header("origin", ORIGIN)
            .bearer_auth(token)
            .json(&body);
        tokio::spawn(async move {
            if let Ok(r) = request.send().await {
                let _ = r.text().await;
            }
        });
    }

    async fn history(&self, token: &str, conversation: &str) -> Value {
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
    async fn settled_history(&self, token: &str, conversation: &str, count: usize) -> Value {
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

/// The database of the suite's run (`DESKBELL_TEST_BACKEND`).
fn on_postgres() -> bool {
    support::Backend::under_test() == support::Backend::Postgres
}

struct Setup {
    llm: FakeLlm,
    hook: Webhook,
    config: PathBuf,
    database_url: String,
    _dir: tempfile::TempDir,
}

async fn setup(postgres: bool) -> Setup {
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
        "[server]\ndata_dir = \"{}\"\ndatabase_url = \"{database_url}\"\nlease_s = 3\n{}",
        dir.path().display(),
        // The model stand-in pauses mid-answer longer than the suite's usual
        // stall limit.
        support::config_text(&llm, &hook).replace("idle_timeout_s = 2", "idle_timeout_s = 300")
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
    async fn db(&self) -> sqlx::AnyPool {
        sqlx::any::install_default_drivers();
        sqlx::AnyPool::connect(&self.database_url).await.unwrap()
    }

    async fn audit(&self, call: &str) -> Vec<String> {
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
    async fn call_id(&self, tool: &str) -> String {
        use sqlx::Row;
        let row = sqlx::query("SELECT id FROM calls WHERE tool = $1")
            .bind(tool)
            .fetch_one(&self.db().await)
            .await
            .unwrap();
        row.get("id")
    }

    async fn reserved(&self) -> i64 {
        use sqlx::Row;
        let row =
            sqlx::query("SELECT CAST(COALESCE(SUM(reserved), 0) AS BIGINT) AS r FROM budgets")
                .fetch_one(&self.db().await)
                .await
                .unwrap();
        row.try_get::<i64, _>("r").unwrap_or_default()
    }

    async fn wait_for_delivery(&self, path: &str, count: usize) {
        for _ in 0..400 {
            if self.hook.calls().iter().filter(|c| c.path == path).count() >= count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the tool was not called");
    }

    fn idempotency_keys(&self, path: &str) -> Vec<String> {
        self.hook
            .calls()
            .iter()
            .filter(|c| c.path == path)
            .map(|c| c.headers["idempotency-key"].clone())
            .collect()
    }
}

/// A tool that never answers in time: the process is killed while it runs.
fn hanging() -> HookReply {
    HookReply {
        status: 200,
        body: "{\"ok\":true}".into(),
        delay: Duration::from_secs(120),
    }
}

async fn confirmed_call_killed_while_its_tool_runs(postgres: bool) {
    let s = setup(postgres).await;
    let server = Server::start(&s.config, None).await;
    let token = server.visitor().await;
    s.hook.push(hanging());
    let (conversation, card) = server.confirm_in_background(&s, &token).await;
    s.wait_for_delivery("/cancel", 1).await;
    server.kill();

    s.llm.push(Script::text("Order 42 is cancelled [1]."));
    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 3).await;
    let call = card["call"].as_str().unwrap();
    assert_eq!(s.audit(call).await, ["requested", "confirmed", "executed"]);
    let keys = s.idempotency_keys("/cancel");
    assert_eq!(keys, [call, call], "delivered again with the same key");
    let last = history["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["status"], "answered", "{history}");
    assert_eq!(last["text"], "Order 42 is cancelled [1].");
    assert_eq!(last["steps"][0]["status"], "succeeded");
    assert_eq!(s.reserved().await, 0, "every reservation is released");
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_confirmed_call_killed_while_its_tool_runs_is_delivered_again_and_answered() {
    confirmed_call_killed_while_its_tool_runs(on_postgres()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_auto_call_killed_while_it_runs_is_delivered_again_and_the_turn_finished() {
    let s = setup(on_postgres()).await;
    let server = Server::start(&s.config, None).await;
    let token = server.visitor().await;
    s.llm.push(Script::Stream(vec![
        Piece::Text("Let me look. ".into()),
        Piece::ToolCall {
            id: "call_fake_0".into(),
            name: "lookup_order".into(),
            arguments: r#"{"order_id": 42}"#.into(),
        },
    ]));
    s.hook.push(hanging());
    server.ask_in_background(&token, json!({"message": "Where is order 42?"}));
    s.wait_for_delivery("/lookup", 1).await;
    let conversation: String = {
        use sqlx::Row;
        let row = sqlx::query("SELECT id FROM conversations")
            .fetch_one(&s.db().await)
            .await
            .unwrap();
        row.get("id")
    };
    server.kill();

    s.llm.push(Script::text("It shipped yesterday."));
    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 2).await;
    let call = s.call_id("lookup_order").await;
    assert_eq!(s.audit(&call).await, ["requested", "executed"]);
    assert_eq!(s.idempotency_keys("/lookup"), [call.clone(), call.clone()]);
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{history}");
    assert_eq!(messages[0]["text"], "Where is order 42?");
    assert_eq!(messages[1]["status"], "answered");
    assert_eq!(messages[1]["text"], "Let me look. It shipped yesterday.");
    assert_eq!(messages[1]["steps"][0]["status"], "succeeded");
    // The resumed model round saw the delivered result after the original call.
    let last = s.llm.requests().last().unwrap().clone();
    let roles: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(s.reserved().await, 0);
    server.kill();
}

async fn answer_killed_mid_stream(postgres: bool) {
    let s = setup(postgres).await;
    let server = Server::start(&s.config, None).await;
    let token = server.visitor().await;
    s.llm.push(Script::Stream(vec![
        Piece::Text("The first part. ".into()),
        Piece::Pause(Duration::from_millis(2200)),
        Piece::Text("The second part.".into()),
        Piece::Pause(Duration::from_secs(120)),
    ]));
    server.ask_in_background(&token, json!({"message": "Tell me a long story"}));
    // The second delta arrives after the checkpoint interval and is saved.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let conversation: String = {
        use sqlx::Row;
        let row = sqlx::query("SELECT id FROM conversations")
            .fetch_one(&s.db().await)
            .await
            .unwrap();
        row.get("id")
    };
    assert!(s.reserved().await > 0, "the turn holds a reservation");
    server.kill();

    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 2).await;
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{history}");
    assert_eq!(messages[0]["text"], "Tell me a long story");
    assert_eq!(messages[1]["status"], "failed");
    // The text saved at the last checkpoint (every two seconds while streaming).
    let text = messages[1]["text"].as_str().unwrap();
    assert!(text.starts_with("The first part. The"), "{text}");
    assert_eq!(s.reserved().await, 0, "the reservation is released");
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_killed_mid_stream_shows_as_failed_with_its_text() {
    answer_killed_mid_stream(on_postgres()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_the_decision_and_the_run_still_runs_the_call_once() {
    let s = setup(on_postgres()).await;
    let server = Server::start(&s.config, Some("after_decide")).await;
    let token = server.visitor().await;
    let (conversation, card) = server.confirm_in_background(&s, &token).await;
    server.crashed().await;
    assert!(s.hook.calls().is_empty(), "the crash came before the run");

    s.llm.push(Script::text("Done [1]."));
    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 3).await;
    let call = card["call"].as_str().unwrap();
    assert_eq!(s.audit(call).await, ["requested", "confirmed", "executed"]);
    assert_eq!(s.idempotency_keys("/cancel"), [call]);
    let last = history["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["status"], "answered", "{history}");
    assert_eq!(s.reserved().await, 0);
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_whose_three_deliveries_were_interrupted_fails_as_interrupted() {
    let s = setup(on_postgres()).await;
    let server = Server::start(&s.config, Some("before_delivery")).await;
    let token = server.visitor().await;
    let (conversation, card) = server.confirm_in_background(&s, &token).await;
    server.crashed().await;
    // Each start delivers again and dies at the same point, twice more.
    for _ in 0..2 {
        Server::start_crashing(&s.config, "before_delivery").await;
    }
    s.llm.push(Script::text("Sorry, that did not go through."));
    let server = Server::start(&s.config, None).await;
    let history = server.settled_history(&token, &conversation, 3).await;
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        s.audit(call).await,
        ["requested", "confirmed", "failed:interrupted"]
    );
    assert!(s.hook.calls().is_empty(), "no delivery reached the tool");
    let last = history["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["status"], "answered", "{history}");
    assert_eq!(last["steps"][0]["status"], "failed");
    assert_eq!(s.reserved().await, 0);
    server.kill();
}

impl Server {
    /// A start that recovers the dead process's call and dies delivering it.
    async fn start_crashing(config: &Path, point: &str) {
        let (child, base) = spawn(config, Some(point));
        Server { child, base }.crashed().await;
    }
}

/// On PostgreSQL a start does not take other leases at once (they may be live
/// replicas): the dead process's work is claimed once its lease lapses. (The
/// whole file runs on PostgreSQL too in the suite's PostgreSQL pass.)
#[tokio::test(flavor = "multi_thread")]
async fn on_postgresql_a_killed_process_is_recovered_once_its_lease_lapses() {
    confirmed_call_killed_while_its_tool_runs(true).await;
    answer_killed_mid_stream(true).await;
}
