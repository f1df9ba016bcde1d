//! Helpers for tests that reach past the in-process app: the `deskbell` binary as
//! a child process, configuration files, and fresh PostgreSQL databases.

use super::reply::{Reply, read};
use serde_json::Value;

/// Against a server outside the test (a child process): a new visitor of the
/// `acme` site asks `message` from `origin`.
pub async fn ask_as_new_visitor(base: &str, origin: &str, message: &str) -> Reply {
    let http = reqwest::Client::new();
    let visitor: Value = http
        .post(format!("{base}/v1/visitors"))
        .header("origin", origin)
        .json(&serde_json::json!({"site": "acme"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ask = http
        .post(format!("{base}/v1/ask"))
        .header("origin", origin)
        .bearer_auth(visitor["token"].as_str().unwrap())
        .json(&serde_json::json!({"message": message}))
        .send()
        .await
        .unwrap();
    read(ask).await
}

/// The `deskbell` binary with a clean environment (only `PATH`, and BM25
/// search alone unless a test turns the embedding model on).
pub fn deskbell_command() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_deskbell"));
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DESKBELL_EMBEDDING", "off");
    c
}

/// A finished command's output, which must have succeeded (its standard error
/// is the failure's message).
pub fn succeeded(out: std::process::Output) -> std::process::Output {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A configuration file in a fresh temporary folder (kept alive by the first value).
pub fn config_file(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// A fresh, empty database on the PostgreSQL server named by
/// `DESKBELL_TEST_POSTGRES` (default: the local server, trust auth).
pub async fn fresh_postgres_database() -> String {
    let server = std::env::var("DESKBELL_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
    deskbell::testkit::fresh_postgres(&server, "deskbell_test")
        .await
        .expect("PostgreSQL must be running for these tests")
}

/// A loopback port free at this moment, for a child process to bind. The port
/// is released before the child binds it, so it is taken below Linux's
/// ephemeral range (32768 on), where no `bind(0)` or outgoing connection of
/// the hundreds of tests running at once can be handed it meanwhile, and each
/// call of this process takes the next one, so no two tests are given the same
/// port. A port taken from the ephemeral range was once given to something
/// else before a child bound it ("deskbell serve did not start").
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 20_000;
    const PORTS: u16 = 12_000;
    // Started from the process id, so two test binaries run at once (a
    // developer's, say) are unlikely to walk the same ports in step.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % u32::from(PORTS)) as u16;
    for _ in 0..PORTS {
        let port = FIRST + (start + NEXT.fetch_add(1, Ordering::Relaxed) % PORTS) % PORTS;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!(
        "no free loopback port from {FIRST} to {}",
        FIRST + PORTS - 1
    )
}

/// A visitor's POST with an empty JSON body to `path` on the server at `base`.
pub async fn ask_path_post(base: &str, token: &str, path: &str) -> serde_json::Value {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("origin", super::ORIGIN)
        .bearer_auth(token)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    r.json().await.unwrap()
}
