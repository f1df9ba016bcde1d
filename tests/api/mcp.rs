//! MCP tools (SPEC §17) with real MCP servers from npm (`tests/mcp`, installed by
//! `.ci/run`): the reference filesystem server over stdio, the everything server
//! over stdio and streamable HTTP, and a small server on the official SDK whose
//! tool changes its schema on demand. Their tools get the same cards, policies,
//! races and audit rows as HTTP tools.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use deskbell::config::{Config, McpConfig, McpToolConfig, Policy};
use deskbell::states::OperatorRole;
use deskbell::testkit::Reply as Script;
use serde_json::json;

use crate::support::{TestApp, config_file, deskbell_command, free_port, sent};

/// Where `tests/mcp`'s packages are installed.
fn modules() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/node_modules");
    assert!(
        dir.is_dir(),
        "run `npm ci` in tests/mcp first (scripts/test does): {}",
        dir.display()
    );
    dir
}

fn script(package: &str, file: &str) -> String {
    modules().join(package).join(file).display().to_string()
}

fn stdio(name: &str, command: Vec<String>) -> McpConfig {
    McpConfig {
        name: name.into(),
        command: Some(command),
        url: None,
        tools: BTreeMap::new(),
        timeout_s: 30.0,
        pass_env: Vec::new(),
    }
}

/// The reference filesystem server, allowed one folder.
fn filesystem(folder: &Path) -> McpConfig {
    stdio(
        "files",
        vec![
            "node".into(),
            script("@modelcontextprotocol/server-filesystem", "dist/index.js"),
            folder.display().to_string(),
        ],
    )
}

/// The everything server over stdio, started through a shell that first writes
/// its process id to `pid_file` (the shell `exec`s node, so the id is node's).
fn everything_stdio(pid_file: &Path) -> McpConfig {
    let node = script("@modelcontextprotocol/server-everything", "dist/index.js");
    stdio(
        "everything",
        vec![
            "sh".into(),
            "-c".into(),
            format!(
                "echo $$ > '{}'; exec node '{node}' stdio",
                pid_file.display()
            ),
        ],
    )
}

fn with_server(server: McpConfig) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| c.sites[0].mcp.push(server)
}

fn word(policy: Policy) -> McpToolConfig {
    McpToolConfig {
        policy: Some(policy),
        ..Default::default()
    }
}

/// The names of the tools offered in the model's `n`th request.
fn offered(t: &TestApp, n: usize) -> Vec<String> {
    sent::offered(&t.llm.requests()[n])
}

/// What the model was told of its last tool call in its `n`th request.
fn tool_result(t: &TestApp, n: usize) -> String {
    sent::tool_results(&t.llm.requests()[n]).pop().unwrap()
}

/// Waits (bounded) until `ready` holds.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    for _ in 0..300 {
        if ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test]
async fn read_only_filesystem_tools_run_at_once_and_their_text_reaches_the_model() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("returns.txt");
    std::fs::write(&file, "Returns are free within 30 days.").unwrap();
    let t = TestApp::with(with_server(filesystem(folder.path()))).await;
    let visitor = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "read_text_file",
        json!({"path": file.display().to_string()}),
    )]));
    let r = t
        .question(&visitor, None, "What is the returns policy?")
        .await;
    assert_eq!(r.event("done")["status"], "answered", "{:?}", r.names());
    let steps = r.all("step");
    assert_eq!(steps.last().unwrap()["status"], "succeeded", "{steps:?}");
    assert_eq!(
        steps[0]["label"], "Read Text File",
        "the label is the tool's title"
    );
    let names = offered(&t, 0);
    for tool in [
        "read_text_file",
        "write_file",
        "list_directory",
        "lookup_order",
    ] {
        assert!(names.contains(&tool.to_string()), "{tool} in {names:?}");
    }
    assert!(tool_result(&t, 1).contains("Returns are free within 30 days."));
    let call = steps[0]["call"].as_str().unwrap();
    assert_eq!(t.audit_events(call).await, vec!["requested", "executed"]);
    let audit = t.audit().await;
    let row = audit.iter().find(|a| a.call == call).unwrap();
    assert_eq!(row.policy.as_str(), "auto");
}

#[tokio::test]
async fn write_file_waits_for_the_card_and_writes_exactly_once_when_confirmed() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("note.txt");
    let t = TestApp::with(with_server(filesystem(folder.path()))).await;
    let visitor = t.visitor().await;
    let path = file.display().to_string();
    t.llm.push(Script::tool_calls(&[(
        "write_file",
        json!({"path": path, "content": "Call me back at 5."}),
    )]));
    let r = t.question(&visitor, None, "Leave a note for me").await;
    assert_eq!(r.event("done")["status"], "awaiting_confirmation");
    let card = r.event("confirm").clone();
    assert_eq!(card["label"], "Write File");
    assert_eq!(
        card["arguments"],
        json!([{"name": "Path", "value": path}, {"name": "Content", "value": "Call me back at 5."}]),
        "the card shows the arguments in words"
    );
    assert!(
        !file.exists(),
        "nothing is written before the visitor confirms"
    );

    let conversation = r.conversation();
    let r = t.answer(&visitor, &conversation, &card, "confirm").await;
    assert_eq!(r.event("done")["status"], "answered", "{:?}", r.json);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "Call me back at 5."
    );
    assert!(tool_result(&t, 1).contains("Successfully wrote"));
    // Gone again, the file would come back if a replay ran the call a second time.
    std::fs::remove_file(&file).unwrap();
    let replay = t.answer(&visitor, &conversation, &card, "confirm").await;
    assert_eq!((replay.status, replay.code()), (409, "call_not_pending"));
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        vec!["requested", "confirmed", "executed", "refused:replayed"]
    );
    assert!(!file.exists(), "the replay ran nothing");
}

#[tokio::test]
async fn cancelling_a_write_writes_nothing() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("note.txt");
    let t = TestApp::with(with_server(filesystem(folder.path()))).await;
    let visitor = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "write_file",
        json!({"path": file.display().to_string(), "content": "no"}),
    )]));
    let r = t.question(&visitor, None, "Leave a note").await;
    let card = r.event("confirm").clone();
    let r = t.answer(&visitor, &r.conversation(), &card, "cancel").await;
    assert_eq!(r.event("done")["status"], "answered");
    assert!(!file.exists());
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        vec!["requested", "cancelled:visitor"]
    );
}

#[tokio::test]
async fn the_files_word_on_a_tool_wins_over_its_annotations() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("auto.txt");
    let mut server = filesystem(folder.path());
    server.tools.insert("write_file".into(), word(Policy::Auto));
    server
        .tools
        .insert("list_directory".into(), word(Policy::Off));
    server.tools.insert(
        "read_text_file".into(),
        McpToolConfig {
            policy: Some(Policy::Confirm),
            label: Some("Read one of your files".into()),
            description: None,
        },
    );
    let t = TestApp::with(with_server(server)).await;
    let visitor = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "write_file",
        json!({"path": file.display().to_string(), "content": "at once"}),
    )]));
    let r = t.question(&visitor, None, "Write it").await;
    assert_eq!(r.event("done")["status"], "answered");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "at once");
    let names = offered(&t, 0);
    assert!(
        !names.contains(&"list_directory".to_string()),
        "off hides it"
    );

    // A read-only tool the operator wants confirmed raises a card.
    t.llm.push(Script::tool_calls(&[(
        "read_text_file",
        json!({"path": file.display().to_string()}),
    )]));
    let r = t.question(&visitor, None, "Read it").await;
    assert_eq!(r.event("done")["status"], "awaiting_confirmation");
    assert_eq!(r.event("confirm")["label"], "Read one of your files");

    t.llm.push(Script::tool_calls(&[(
        "list_directory",
        json!({"path": folder.path().display().to_string()}),
    )]));
    let r = t.question(&visitor, None, "List it").await;
    let refused = t
        .audit()
        .await
        .into_iter()
        .find(|a| a.tool == "list_directory" && a.event.as_str() == "refused")
        .unwrap();
    assert_eq!(refused.reason.map(|r| r.as_str()), Some("tool_off"));
    assert_eq!(r.event("done")["status"], "answered");
}

#[tokio::test]
async fn a_later_server_whose_tool_names_are_taken_has_them_prefixed_and_each_reaches_its_own() {
    let one = tempfile::tempdir().unwrap();
    let two = tempfile::tempdir().unwrap();
    std::fs::write(one.path().join("a.txt"), "from the docs server").unwrap();
    std::fs::write(two.path().join("a.txt"), "from the files server").unwrap();
    let mut docs = filesystem(one.path());
    docs.name = "docs".into();
    let files = filesystem(two.path());
    let t = TestApp::with(move |c| {
        // A file tool named like one of the servers' tools keeps its name.
        let mut clash = c.sites[0].tools[0].clone();
        clash.name = "read_text_file".into();
        c.sites[0].tools.push(clash);
        c.sites[0].mcp.push(docs);
        c.sites[0].mcp.push(files);
    })
    .await;
    let visitor = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "docs_read_text_file",
        json!({"path": one.path().join("a.txt").display().to_string()}),
    )]));
    t.question(&visitor, None, "Read the docs copy").await;
    let names = offered(&t, 0);
    for name in [
        "read_text_file",
        "docs_read_text_file",
        "files_read_text_file",
        "write_file",
        "files_write_file",
    ] {
        assert!(names.contains(&name.to_string()), "{name} in {names:?}");
    }
    assert!(
        !names.contains(&"docs_write_file".to_string()),
        "the first server keeps its names"
    );
    assert_eq!(tool_result(&t, 1), "from the docs server");
    t.llm.push(Script::tool_calls(&[(
        "files_read_text_file",
        json!({"path": two.path().join("a.txt").display().to_string()}),
    )]));
    t.question(&visitor, None, "Read the files copy").await;
    assert_eq!(tool_result(&t, 3), "from the files server");
}

#[tokio::test]
async fn the_everything_server_over_streamable_http_answers_through_a_card() {
    let port = free_port();
    let mut child = tokio::process::Command::new("node")
        .arg(script(
            "@modelcontextprotocol/server-everything",
            "dist/index.js",
        ))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    until("the everything server listens", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    let mut server = stdio("everything", Vec::new());
    server.command = None;
    server.url = Some(format!("http://127.0.0.1:{port}/mcp"));
    // The operator wants even this read-only tool confirmed.
    server.tools.insert("echo".into(), word(Policy::Confirm));
    let t = TestApp::with(with_server(server)).await;
    let visitor = t.visitor().await;
    t.llm
        .push(Script::tool_calls(&[("get-sum", json!({"a": 2, "b": 40}))]));
    let r = t.question(&visitor, None, "What is 2 + 40?").await;
    assert_eq!(r.event("done")["status"], "answered");
    let names = offered(&t, 0);
    assert!(names.contains(&"echo".to_string()), "{names:?}");
    assert!(tool_result(&t, 1).contains("42"), "{}", tool_result(&t, 1));

    t.llm.push(Script::tool_calls(&[(
        "echo",
        json!({"message": "hello from the card"}),
    )]));
    let r = t.question(&visitor, None, "Echo something").await;
    let card = r.event("confirm").clone();
    assert_eq!(card["arguments"][0]["value"], "hello from the card");
    let r = t
        .answer(&visitor, &r.conversation(), &card, "confirm")
        .await;
    assert_eq!(r.event("done")["status"], "answered");
    let told = tool_result(&t, 3);
    assert!(told.contains("hello from the card"), "{told}");
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        vec!["requested", "confirmed", "executed"]
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn a_server_killed_mid_call_fails_the_call_and_comes_back_for_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let t = TestApp::with(with_server(everything_stdio(&pid_file))).await;
    let first_pid = std::fs::read_to_string(&pid_file).unwrap();
    let visitor = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "trigger-long-running-operation",
        json!({"duration": 30, "steps": 30}),
    )]));
    let db = t.db().await;
    let killer = tokio::spawn({
        let pid = first_pid.trim().to_string();
        async move {
            // The call is recorded as running just before it is sent.
            for _ in 0..300 {
                let running: i64 =
                    sqlx::query_scalar("SELECT COUNT(*) FROM calls WHERE status = 'running'")
                        .fetch_one(&db)
                        .await
                        .unwrap();
                if running > 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let status = std::process::Command::new("kill")
                .args(["-9", &pid])
                .status()
                .unwrap();
            assert!(status.success());
        }
    });
    let r = t.question(&visitor, None, "Run the long job").await;
    killer.await.unwrap();
    assert_eq!(r.event("done")["status"], "answered", "the turn answers");
    let step = (*r.all("step").last().unwrap()).clone();
    assert_eq!(step["status"], "failed");
    let call = step["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        vec!["requested", "failed:unreachable"]
    );
    assert!(tool_result(&t, 1).contains("stopped before it answered"));

    // The supervisor starts the server again; the next call works.
    until("the server is started again", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|p| p != first_pid)
    })
    .await;
    let server = t.app.mcp.of_site("acme")[0].clone();
    until("the new server is connected", || server.is_connected()).await;
    t.llm
        .push(Script::tool_calls(&[("get-sum", json!({"a": 1, "b": 2}))]));
    let r = t.question(&visitor, None, "1 + 2?").await;
    assert_eq!(r.all("step").last().unwrap()["status"], "succeeded");
    assert!(tool_result(&t, 3).contains('3'));
}

#[tokio::test]
async fn a_card_whose_tool_changed_its_schema_on_the_server_is_refused_as_stale() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("notes.log");
    let t = TestApp::with(with_server(notes_server(&log))).await;
    let visitor = t.visitor().await;
    t.llm
        .push(Script::tool_calls(&[("send_note", json!({"text": "hi"}))]));
    let r = t.question(&visitor, None, "Send a note").await;
    let card = r.event("confirm").clone();
    let conversation = r.conversation();

    // Another visitor's turn makes the server change the tool's schema.
    let mcp = t.app.mcp.of_site("acme")[0].clone();
    let before = mcp.generation();
    let other = t.visitor().await;
    t.llm.push(Script::tool_calls(&[("widen_note", json!({}))]));
    t.question(&other, None, "Widen it").await;
    until("the new tool list is read", || mcp.generation() > before).await;

    let r = t.answer(&visitor, &conversation, &card, "confirm").await;
    assert_eq!((r.status, r.code()), (409, "call_not_pending"));
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        vec!["requested", "refused:stale"]
    );
    assert!(!log.exists(), "the stale card ran nothing");
}

#[tokio::test]
async fn a_child_server_sees_none_of_deskbells_environment_but_what_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = everything_stdio(&dir.path().join("pid"));
    // Cargo sets both in the test process's environment; only one is passed.
    server.pass_env = vec!["CARGO_PKG_NAME".into()];
    let t = TestApp::with(with_server(server)).await;
    let visitor = t.visitor().await;
    t.llm.push(Script::tool_calls(&[("get-env", json!({}))]));
    t.question(&visitor, None, "Show the environment").await;
    let env = tool_result(&t, 1);
    assert!(env.contains("CARGO_PKG_NAME"), "{env}");
    assert!(env.contains("PATH"), "{env}");
    assert!(!env.contains("CARGO_MANIFEST_DIR"), "{env}");
}

#[tokio::test]
async fn the_console_lists_mcp_tools_and_an_admin_can_change_their_policy() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("x.txt");
    let t = TestApp::with(with_server(filesystem(folder.path()))).await;
    let admin = t.console(OperatorRole::Admin).await;
    let tool = admin.tool("acme", "write_file").await;
    assert_eq!(tool["source"], "mcp");
    assert_eq!(tool["policy"], "confirm");
    assert_eq!(tool["file"]["policy"], "confirm");
    assert_eq!(tool["label"], "Write File");
    assert_eq!(tool["url"], "mcp://files/write_file");
    // Neither read-only nor destructive: still confirmed (only read-only runs on its own).
    let create = admin.tool("acme", "create_directory").await;
    assert_eq!(create["policy"], "confirm");
    assert_eq!(admin.tool("acme", "list_directory").await["policy"], "auto");
    let r = admin
        .patch_tool("acme", "list_directory", json!({"policy": "off"}))
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    let r = admin
        .patch_tool("acme", "write_file", json!({"policy": "auto"}))
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    let visitor = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "write_file",
        json!({"path": file.display().to_string(), "content": "from the console"}),
    )]));
    let r = t.question(&visitor, None, "Write").await;
    assert_eq!(r.event("done")["status"], "answered");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "from the console");
    assert!(
        !offered(&t, 0).contains(&"list_directory".to_string()),
        "switched off in the console"
    );
}

/// The small SDK server of `tests/mcp/changing-server.mjs`, appending each run
/// of `send_note` to `log`.
fn notes_server(log: &Path) -> McpConfig {
    stdio(
        "notes",
        vec![
            "node".into(),
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/mcp/changing-server.mjs")
                .display()
                .to_string(),
            log.display().to_string(),
        ],
    )
}

// Servers that fail, refuse, race or move: `mcp/failures.rs`.
mod failures;
