use crate::support::{config_file, deskbell_command as deskbell};

#[test]
fn check_reports_every_problem_with_file_and_key() {
    let (_dir, path) = config_file(
        "bad.toml",
        r#"
[server]
bind = "nowhere"

[[site]]
id = "acme"
origins = ["https://acme.example/shop", "*"]

[[site.tool]]
name = "t"
label = ""
policy = "auto"
url = "ftp://x"
input_schema = { type = "object", properties = { a = { type = "nonsense" } } }

[[site.tool]]
name = "t"
label = "dup"
policy = "confirm"
url = "http://127.0.0.1:9/x"
"#,
    );
    let out = deskbell()
        .arg("check")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for key in [
        "server.bind",
        "site[0].origins[0]",
        "site[0].origins[1]",
        "site[0].tool[0].label",
        "site[0].tool[0].url",
        "site[0].tool[0].input_schema",
        "site[0].tool[1].name",
        "BETTER_AUTH_SECRET",
    ] {
        assert!(
            err.contains(&format!("bad.toml: {key}")),
            "missing {key} in:\n{err}"
        );
    }
}

#[test]
fn an_unknown_key_is_an_error_naming_its_path() {
    let (_dir, path) = config_file(
        "typo.toml",
        "[[site]]\nid = \"acme\"\n[site.limits]\nrequests_per_minit = 5\n",
    );
    let out = deskbell()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("typo.toml: site[0].limits"), "{err}");
    assert!(err.contains("requests_per_minit"), "{err}");
}

#[test]
fn a_valid_config_checks_ok() {
    let (_dir, path) = config_file(
        "ok.toml",
        "[[site]]\nid = \"acme\"\norigins = [\"https://acme.example\"]\n",
    );
    crate::support::succeeded(
        deskbell()
            .args(["check", "--config"])
            .arg(&path)
            .env("DESKBELL_EMBEDDING", "off")
            .env("BETTER_AUTH_SECRET", "0123456789abcdef0123456789abcdef")
            .output()
            .unwrap(),
    );
}

#[test]
fn serve_refuses_to_start_without_a_long_enough_secret() {
    let (_dir, path) = config_file(
        "ok.toml",
        "[[site]]\nid = \"acme\"\norigins = [\"https://acme.example\"]\n",
    );
    let out = deskbell()
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("BETTER_AUTH_SECRET is not set"));
    let out = deskbell()
        .args(["serve", "--config"])
        .arg(&path)
        .env("DESKBELL_EMBEDDING", "off")
        .env("BETTER_AUTH_SECRET", "short")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("at least 32 bytes") && !err.contains("short"),
        "the secret itself is never printed: {err}"
    );
}

#[test]
fn environment_variables_override_the_file() {
    let config = deskbell::config::Config::from_toml(
        "[server]\nbind = \"127.0.0.1:1\"\n[[site]]\nid = \"a\"\n",
        "f",
        &deskbell::config::Env::empty()
            .with("DESKBELL_BIND", "127.0.0.1:9999")
            .with("DESKBELL_DATABASE_URL", "postgres://db/x")
            .with("DESKBELL_LLM_BASE_URL", "http://llm.local/v1")
            .with("DESKBELL_LLM_MODEL", "m")
            .with("DESKBELL_ACTION_APPROVAL_TTL_MIN", "0.05"),
    )
    .unwrap();
    assert_eq!(config.server.bind, "127.0.0.1:9999");
    assert_eq!(config.server.database_url(), "postgres://db/x");
    assert_eq!(config.llm.base_url, "http://llm.local/v1");
    assert_eq!(config.llm.model, "m");
    assert_eq!(config.approval_ttl, std::time::Duration::from_secs(3));
    let bad = deskbell::config::Config::from_toml(
        "[[site]]\nid = \"a\"\n",
        "f",
        &deskbell::config::Env::empty().with("DESKBELL_ACTION_APPROVAL_TTL_MIN", "-1"),
    );
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("DESKBELL_ACTION_APPROVAL_TTL_MIN")
    );
}

/// SPEC §3: secrets never appear in logs, even at the most verbose level.
#[test]
fn secrets_never_appear_in_the_logs() {
    let master = "master-secret-that-must-not-leak-0123456789";
    let tool_secret = "tool-secret-that-must-not-leak";
    let port = crate::support::free_port();
    let data = tempfile::tempdir().unwrap();
    let (_dir, path) = config_file(
        "s.toml",
        &format!(
            "[server]\nbind = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\n[llm]\nbase_url = \"http://127.0.0.1:9/v1\"\nmax_retries = 0\n\
             [[site]]\nid = \"acme\"\norigins = [\"https://acme.example\"]\n[[site.tool]]\nname = \"t\"\nlabel = \"T\"\npolicy = \"auto\"\n\
             url = \"http://127.0.0.1:9/t\"\nsecret_env = \"TOOL_SECRET\"\n",
            data.path().display()
        ),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let env = [
        ("BETTER_AUTH_SECRET", master),
        ("TOOL_SECRET", tool_secret),
        ("OPENAI_API_KEY", "sk-key-that-must-not-leak"),
        ("DESKBELL_LOG", "trace"),
    ];
    let (reply, logs) = serve_ask_and_collect_logs(&runtime, &path, port, &env);
    let body = format!("{:?} {:?}", reply.events, reply.json);
    assert!(!body.contains(master) && !body.contains("sk-key"), "{body}");
    assert!(
        logs.contains("provider") || logs.contains("model"),
        "the test saw the logs: {logs}"
    );
    for secret in [master, tool_secret, "sk-key-that-must-not-leak"] {
        assert!(!logs.contains(secret), "{secret} leaked into the logs");
    }
}

/// Operators put keys in URLs (`?key=…`) and credentials in them (`user:pass@`):
/// neither reaches the logs when a tool endpoint or a knowledge page fails.
#[test]
fn urls_with_credentials_or_query_strings_never_appear_in_the_logs() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let llm = runtime
        .block_on(deskbell::testkit::FakeLlm::start())
        .unwrap();
    llm.push(deskbell::testkit::Reply::tool_calls(&[(
        "t",
        serde_json::json!({}),
    )]));
    let port = crate::support::free_port();
    let data = tempfile::tempdir().unwrap();
    let (_dir, path) = config_file(
        "s.toml",
        &format!(
            "[server]\nbind = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\n[llm]\nbase_url = \"{}\"\nmax_retries = 0\n\
             [[site]]\nid = \"acme\"\norigins = [\"https://acme.example\"]\n\
             knowledge = [\"http://someone:url-password@127.0.0.1:9/page?token=url-secret-two\"]\n\
             [[site.tool]]\nname = \"t\"\nlabel = \"T\"\npolicy = \"auto\"\n\
             url = \"http://127.0.0.1:9/t?key=url-secret-one\"\n",
            data.path().display(),
            llm.base_url
        ),
    );
    let env = [
        (
            "BETTER_AUTH_SECRET",
            "master-secret-0123456789-0123456789-abc",
        ),
        ("DESKBELL_LOG", "debug"),
        // No download of the embedding model: its debug lines are not this test's.
        ("DESKBELL_EMBEDDING", "off"),
    ];
    let (reply, logs) = serve_ask_and_collect_logs(&runtime, &path, port, &env);
    assert_eq!(reply.status, 200, "{:?}", reply.json);
    assert!(
        logs.contains("tool endpoint unreachable") && logs.contains("knowledge source skipped"),
        "both failures were logged: {logs}"
    );
    for secret in ["url-secret-one", "url-secret-two", "url-password"] {
        assert!(!logs.contains(secret), "{secret} leaked into the logs");
    }
}

/// Runs `deskbell serve` with the configuration at `path` (bound to `port`) and
/// `env`, asks one question as a new visitor of `acme`, stops the server, and
/// returns the reply and everything the server wrote to stdout and stderr.
fn serve_ask_and_collect_logs(
    runtime: &tokio::runtime::Runtime,
    path: &std::path::Path,
    port: u16,
    env: &[(&str, &str)],
) -> (crate::support::Reply, String) {
    use std::io::Read;
    let mut command = deskbell();
    command
        .args(["serve", "--config"])
        .arg(path)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    // The pipes are read while the server runs: a server writing more than a
    // pipe holds (debug lines for every statement) would otherwise block on
    // its log and never answer.
    let drain = |stream: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut stream) = stream {
                let _ = stream.read_to_string(&mut text);
            }
            text
        })
    };
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let reply = runtime.block_on(async {
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        for _ in 0..400 {
            if http.get(format!("{base}/healthz")).send().await.is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        crate::support::ask_as_new_visitor(&base, "https://acme.example", "hello").await
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let logs = stderr.join().unwrap() + &stdout.join().unwrap();
    (reply, logs)
}

/// The binary's allocator options (`src/main.rs`) reach jemalloc: its own report
/// of where each option came from names them as the program's. A renamed symbol
/// would leave jemalloc at its defaults without any error.
#[test]
#[cfg(not(target_env = "msvc"))]
fn the_binary_gives_jemalloc_its_decay_options() {
    let out = deskbell()
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "confirm_conf:true")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("global variable malloc_conf): \"dirty_decay_ms:1000,muzzy_decay_ms:0\""),
        "{stderr}"
    );
}
