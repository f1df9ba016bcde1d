//! Operating it (SPEC §18): a real Prometheus (Debian's `prometheus`) scrapes the
//! real `deskbell serve` on its metrics address while a few asks run; the counters
//! and histograms it stores are what those asks did. Also `/readyz`, JSON logs,
//! and that metrics never appear on the public address.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use deskbell::testkit::Reply as Script;
use serde_json::{Value, json};

use crate::crash::harness::{Server, setup_with};
use crate::support::free_port;

/// A Prometheus child process scraping `target` every second, stopped on drop.
pub(crate) struct Prometheus {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    pub(crate) fn start(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: deskbell\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian: apt-get install prometheus)");
        Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    /// The value of an instant query (summed), or `None` while it has no data.
    pub(crate) async fn value(&self, query: &str) -> Option<f64> {
        let r = reqwest::Client::new()
            .get(format!("{}/api/v1/query", self.base))
            .query(&[("query", query)])
            .send()
            .await
            .ok()?;
        let body: Value = r.json().await.ok()?;
        let result = body["data"]["result"].as_array()?;
        let first = result.first()?;
        first["value"][1].as_str()?.parse().ok()
    }

    /// Waits (bounded) until `query` reaches `want`, then holds that it is not more.
    pub(crate) async fn exactly(&self, query: &str, want: f64) {
        assert_eq!(self.until_at_least(query, want).await, want, "{query}");
    }

    /// Waits (bounded) until `query` reaches at least `want`; returns what it read.
    pub(crate) async fn until_at_least(&self, query: &str, want: f64) -> f64 {
        let mut last = None;
        for _ in 0..120 {
            last = self.value(query).await;
            if last.is_some_and(|v| v >= want) {
                return last.unwrap_or_default();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("{query}: wanted at least {want}, Prometheus has {last:?}");
    }
}

/// `deskbell serve` (SQLite) with metrics on a port of their own; returns the
/// metrics address.
async fn serving_metrics(env: &[(&str, &str)]) -> (crate::crash::harness::Setup, Server, String) {
    let metrics = format!("127.0.0.1:{}", free_port());
    let s = setup_with(false, &format!("metrics_bind = \"{metrics}\"\n"), "").await;
    let server = Server::start_env(&s.config, None, env).await;
    (s, server, metrics)
}

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_scrapes_what_the_asks_did() {
    // Cards live three seconds, so one can expire within the test.
    let (s, server, metrics) =
        serving_metrics(&[("DESKBELL_ACTION_APPROVAL_TTL_MIN", "0.05")]).await;
    let prometheus = Prometheus::start(&metrics);

    // An answered question, a card confirmed (and its continuation), and a
    // request the guards refuse.
    let token = server.visitor().await;
    s.llm.push(Script::text("Hello!"));
    let r = server.ask(&token, json!({"message": "Hi"})).await;
    assert_eq!(r.event("done")["status"], "answered");
    s.llm.push(Script::tool_calls(&[(
        "cancel_order",
        json!({"order_id": 42}),
    )]));
    let r = server
        .ask(&token, json!({"message": "Cancel order 42"}))
        .await;
    let card = r.event("confirm").clone();
    s.llm.push(Script::text("Cancelled."));
    let r = server
        .ask(
            &token,
            json!({"conversation": r.conversation(), "call": card["call"], "decision": "confirm", "signature": card["signature"]}),
        )
        .await;
    assert_eq!(r.event("done")["status"], "answered");
    let refused = reqwest::Client::new()
        .post(format!("{}/v1/ask", server.base))
        .header("origin", "https://elsewhere.example")
        .bearer_auth(&token)
        .json(&json!({"message": "Hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    // A card left waiting while the visitor asks something else: superseded.
    s.llm.push(Script::tool_calls(&[(
        "cancel_order",
        json!({"order_id": 7}),
    )]));
    let r = server
        .ask(&token, json!({"message": "Cancel order 7"}))
        .await;
    s.llm.push(Script::text("Sure."));
    server
        .ask(
            &token,
            json!({"message": "Never mind", "conversation": r.conversation()}),
        )
        .await;
    // A card answered after its three seconds: expired.
    s.llm.push(Script::tool_calls(&[(
        "cancel_order",
        json!({"order_id": 8}),
    )]));
    let r = server
        .ask(&token, json!({"message": "Cancel order 8"}))
        .await;
    let card = r.event("confirm").clone();
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let late = server
        .ask(
            &token,
            json!({"conversation": r.conversation(), "call": card["call"], "decision": "confirm", "signature": card["signature"]}),
        )
        .await;
    assert_eq!(late.status, 410);
    // A model that answers 500 on every try: the question fails before its
    // first token (503 provider_unavailable).
    for _ in 0..3 {
        s.llm.push(Script::Status(500));
    }
    let failed = server.ask(&token, json!({"message": "Hello?"})).await;
    assert_eq!(failed.status, 503);

    prometheus
        .exactly(
            r#"sum(deskbell_turns_total{site="acme",status="answered"})"#,
            3.0,
        )
        .await;
    prometheus
        .exactly(
            r#"sum(deskbell_turns_total{status="awaiting_confirmation"})"#,
            3.0,
        )
        .await;
    prometheus
        .exactly(r#"sum(deskbell_turns_total{status="failed"})"#, 1.0)
        .await;
    prometheus
        .exactly(
            r#"sum(deskbell_confirmations_total{decision="expired"})"#,
            1.0,
        )
        .await;
    prometheus
        .exactly(r#"sum(deskbell_provider_errors_total{kind="status"})"#, 1.0)
        .await;
    prometheus
        .exactly(
            r#"sum(deskbell_confirmations_total{decision="superseded"})"#,
            1.0,
        )
        .await;
    prometheus
        .exactly(
            r#"sum(deskbell_confirmations_total{decision="confirmed"})"#,
            1.0,
        )
        .await;
    prometheus.exactly(r#"sum(deskbell_tool_calls_total{tool="cancel_order",policy="confirm",outcome="succeeded"})"#, 1.0).await;
    prometheus
        .exactly(
            r#"sum(deskbell_guard_refusals_total{code="origin_not_allowed"})"#,
            1.0,
        )
        .await;
    // Two questions streamed text (the others only called a tool; a
    // continuation's first token is not a question's and is not timed).
    prometheus
        .exactly("sum(deskbell_time_to_first_token_seconds_count)", 2.0)
        .await;
    prometheus
        .until_at_least("sum(deskbell_turn_duration_seconds_count)", 7.0)
        .await;
    prometheus
        .until_at_least(r#"sum(deskbell_tokens_total{kind="output"})"#, 1.0)
        .await;
    assert_eq!(
        prometheus.value("deskbell_open_streams").await,
        Some(0.0),
        "no answer streams now"
    );
    server.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_are_served_on_their_own_address_only_and_name_no_visitor() {
    let (s, server, metrics) = serving_metrics(&[]).await;
    let token = server.visitor().await;
    s.llm.push(Script::text("Hello!"));
    let r = server.ask(&token, json!({"message": "Hi"})).await;
    let conversation = r.conversation();
    let http = reqwest::Client::new();
    let public = http
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(public.status(), 404, "never on the public address");
    let text = http
        .get(format!("http://{metrics}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("deskbell_turns_total"), "{text}");
    assert!(text.contains("# TYPE deskbell_time_to_first_token_seconds histogram"));
    assert!(
        !text.contains(&conversation),
        "no conversation id as a label"
    );
    assert!(!text.contains("v_"), "no visitor id as a label");
    server.kill();
}

#[test]
fn metrics_bind_and_public_url_refuse_nonsense_by_name() {
    let env = crate::support::env();
    let problems = |server: &str| {
        let text =
            format!("[server]\nbind = \"127.0.0.1:8080\"\n{server}\n[[site]]\nid = \"acme\"\n");
        match deskbell::config::Config::from_toml(&text, "t.toml", &env) {
            Ok(_) => Vec::new(),
            Err(e) => e.problems.into_iter().map(|p| p.key).collect(),
        }
    };
    for bad in [
        "metrics_bind = \"127.0.0.1:8080\"",
        "metrics_bind = \"0.0.0.0:8080\"",
        "metrics_bind = \"localhost\"",
        "metrics_bind = \"\"",
    ] {
        assert_eq!(problems(bad), ["server.metrics_bind"], "{bad}");
    }
    assert_eq!(problems("metrics_bind = 9464"), ["server.metrics_bind"]);
    assert_eq!(
        problems("public_url = \"ftp://help.example\""),
        ["server.public_url"]
    );
    assert!(
        problems("metrics_bind = \"127.0.0.1:9464\"\npublic_url = \"https://help.example\"")
            .is_empty()
    );
    // The environment's address wins over the file's, and is checked too.
    let text = "[server]\nmetrics_bind = \"127.0.0.1:9464\"\n[[site]]\nid = \"acme\"\n";
    let config = deskbell::config::Config::from_toml(
        text,
        "t.toml",
        &env.clone().with("DESKBELL_METRICS_BIND", "127.0.0.1:9999"),
    )
    .unwrap();
    assert_eq!(
        config.server.metrics_bind.as_deref(),
        Some("127.0.0.1:9999")
    );
    let e = deskbell::config::Config::from_toml(
        text,
        "t.toml",
        &env.with("DESKBELL_METRICS_BIND", "nowhere"),
    )
    .unwrap_err();
    assert!(e.problems.iter().any(|p| p.key == "server.metrics_bind"));
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_says_ready_and_names_what_is_missing_when_not() {
    let t = crate::support::TestApp::start().await;
    let r = reqwest::get(format!("{}/readyz", t.base)).await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "ready");
    assert_eq!(body["checks"]["database"], "ok");

    // Redis unreachable: asks cannot be counted, so the replica is not ready.
    let t = crate::support::TestApp::with(|c| {
        c.server.redis_url = Some(format!("redis://127.0.0.1:{}", free_port()));
    })
    .await;
    let r = reqwest::get(format!("{}/readyz", t.base)).await.unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "service_unavailable");
    assert_eq!(body["checks"]["counters"], "unavailable");
    assert_eq!(body["checks"]["database"], "ok");
    // Liveness stays separate.
    let r = reqwest::get(format!("{}/healthz", t.base)).await.unwrap();
    assert_eq!(r.status(), 200);
}

/// `/readyz` takes no credentials, so it only looks whether each site's index
/// is open. It used to reload every index on every call (reading every
/// passage's text again): a cheap way to make a replica busy.
#[tokio::test(flavor = "multi_thread")]
async fn readyz_does_not_reload_the_knowledge_indexes() {
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(
        docs.path().join("returns.md"),
        "# Returns\n\nSend it back within 30 days.\n",
    )
    .unwrap();
    let path = docs.path().display().to_string();
    let t = crate::support::TestApp::with(|c| {
        c.sites[0].knowledge = vec![deskbell::config::KnowledgeSource::Path(path)];
    })
    .await;
    let before = t.app.knowledge.reloads("acme");
    for _ in 0..20 {
        let r = reqwest::get(format!("{}/readyz", t.base)).await.unwrap();
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["checks"]["knowledge"], "ok");
    }
    assert_eq!(t.app.knowledge.reloads("acme"), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line_without_message_text() {
    let s = setup_with(false, "", "").await;
    let port = free_port();
    let mut child = crate::support::deskbell_command()
        .args(["serve", "--config"])
        .arg(&s.config)
        .env("DESKBELL_BIND", format!("127.0.0.1:{port}"))
        .env("DESKBELL_EMBEDDING", "off")
        .env("BETTER_AUTH_SECRET", crate::support::SECRET)
        .env("TOOL_SECRET", crate::support::TOOL_SECRET)
        .env("ACME_IDENTITY_SECRET", crate::support::IDENTITY_SECRET)
        .env("DESKBELL_LOG_FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..400 {
        if reqwest::get(format!("{base}/healthz")).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let token = crate::crash::harness::visitor_at(&base).await;
    s.llm.push(Script::text("Hello!"));
    let r =
        crate::crash::harness::ask_at(&base, &token, json!({"message": "my secret question text"}))
            .await;
    assert_eq!(r.event("done")["status"], "answered");
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let logs = String::from_utf8_lossy(&out.stderr);
    let mut lines = 0;
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        for field in ["time", "level", "target", "message"] {
            assert!(value.get(field).is_some(), "{field} in {line}");
        }
        lines += 1;
    }
    assert!(lines > 0);
    let lines: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let conversation = r.conversation();
    // A line the turn wrote after its question: the request's id and the turn's
    // site and conversation are fields of the line itself.
    assert!(
        lines.iter().any(|l| l["request_id"].is_string()
            && l["site"] == "acme"
            && l["conversation"] == conversation.as_str()),
        "{logs}"
    );
    assert!(!logs.contains("my secret question text"), "{logs}");
}

#[tokio::test]
async fn the_openapi_document_is_3_1_and_every_operation_in_it_is_served() {
    let t = crate::support::TestApp::start().await;
    let http = reqwest::Client::new();
    let doc: Value = http
        .get(format!("{}/openapi.json", t.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let codes = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap();
    for code in [
        "invalid_request",
        "call_not_pending",
        "rate_limited",
        "service_unavailable",
    ] {
        assert!(codes.iter().any(|c| c == code), "{code}");
    }
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 20);
    for (path, item) in paths {
        let concrete = path
            .replace("{id}", "x")
            .replace("{site}", "acme")
            .replace("{name}", "lookup_order");
        for method in item.as_object().unwrap().keys() {
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let r = http
                .request(method.clone(), format!("{}{concrete}", t.base))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            let fallback = body["error"]["message"] == "no such endpoint"
                || body["error"]["code"] == "method_not_allowed";
            assert!(
                !fallback,
                "{method} {path} is documented but not served ({status})"
            );
        }
    }
}
