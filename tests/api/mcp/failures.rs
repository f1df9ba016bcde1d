//! MCP servers that cannot start, refuse a call, fail it slowly, race for one
//! card, or are pointed elsewhere by the file.

use super::*;

#[test]
fn check_reports_an_mcp_server_that_cannot_start() {
    let (_dir, path) = config_file(
        "mcp.toml",
        "[[site]]\nid = \"acme\"\norigins = [\"https://acme.example\"]\n\
         [[site.mcp]]\nname = \"files\"\ncommand = [\"/nonexistent/mcp-server\"]\n",
    );
    let out = deskbell_command()
        .args(["check", "--config"])
        .arg(&path)
        .env("DESKBELL_EMBEDDING", "off")
        .env("BETTER_AUTH_SECRET", "0123456789abcdef0123456789abcdef")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("site[0].mcp[0] (files): the MCP server could not be started"),
        "{stderr}"
    );
}

#[test]
fn an_mcp_server_needs_exactly_one_of_command_and_url() {
    let text =
        |server: &str| format!("[[site]]\nid = \"acme\"\n[[site.mcp]]\nname = \"x\"\n{server}\n");
    let env = crate::support::env();
    for (server, key) in [
        ("", "site[0].mcp[0].command"),
        (
            "command = [\"node\"]\nurl = \"http://127.0.0.1:1/mcp\"",
            "site[0].mcp[0].command",
        ),
        ("url = \"ftp://x\"", "site[0].mcp[0].url"),
        (
            "command = [\"node\"]\ntools = { t = { policy = \"sometimes\" } }",
            "site[0].mcp[0].tools.t.policy",
        ),
        (
            "command = [\"node\"]\ntools = { t = { label = \" \" } }",
            "site[0].mcp[0].tools.t.label",
        ),
        (
            "command = [\"node\"]\ntimeout_s = 0",
            "site[0].mcp[0].timeout_s",
        ),
        (
            "command = [\"node\"]\npass_env = [\"BETTER_AUTH_SECRET\"]",
            "site[0].mcp[0].pass_env[0]",
        ),
    ] {
        let e = Config::from_toml(&text(server), "t.toml", &env).unwrap_err();
        assert!(
            e.problems.iter().any(|p| p.key == key),
            "{server}: {:?}",
            e.problems
        );
    }
}

#[tokio::test]
async fn answers_racing_for_an_mcp_card_run_its_call_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("notes.log");
    let server = notes_server(&log);
    let t = TestApp::with(move |c| {
        crate::support::for_racing(c);
        c.sites[0].mcp.push(server);
    })
    .await;
    let visitor = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "send_note",
        json!({"text": "once"}),
    )]));
    let r = t.question(&visitor, None, "Send a note").await;
    let card = r.event("confirm").clone();
    let conversation = r.conversation();
    let answers = (0..10).map(|_| t.answer(&visitor, &conversation, &card, "confirm"));
    let replies = futures_util::future::join_all(answers).await;
    let won = replies.iter().filter(|r| r.status == 200).count();
    let lost = replies
        .iter()
        .filter(|r| (r.status, r.code()) == (409, "call_not_pending"))
        .count();
    assert_eq!((won, lost), (1, 9));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "\"once\"\n",
        "the server ran the call exactly once"
    );
    let call = card["call"].as_str().unwrap();
    let events = t.audit_events(call).await;
    assert_eq!(events.iter().filter(|e| *e == "executed").count(), 1);
    assert_eq!(
        events.iter().filter(|e| *e == "refused:replayed").count(),
        9
    );
}

#[tokio::test]
async fn a_tool_error_and_a_slow_tool_fail_the_call_and_the_turn_answers() {
    let folder = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = filesystem(folder.path());
    let mut slow = everything_stdio(&dir.path().join("pid"));
    slow.timeout_s = 1.0;
    let t = TestApp::with(move |c| {
        c.sites[0].mcp.push(files);
        c.sites[0].mcp.push(slow);
    })
    .await;
    let visitor = t.visitor().await;
    // Outside the allowed folder: the server answers with `isError`.
    t.llm.push(Script::tool_calls(&[(
        "read_text_file",
        json!({"path": "/etc/hostname"}),
    )]));
    let r = t.question(&visitor, None, "Read the host name").await;
    assert_eq!(r.event("done")["status"], "answered");
    let step = (*r.all("step").last().unwrap()).clone();
    assert_eq!(step["status"], "failed");
    let call = step["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        vec!["requested", "failed:tool_error"]
    );
    assert!(tool_result(&t, 1).starts_with("The tool reported an error:"));

    t.llm.push(Script::tool_calls(&[(
        "trigger-long-running-operation",
        json!({"duration": 5, "steps": 5}),
    )]));
    let r = t.question(&visitor, None, "Run the slow job").await;
    assert_eq!(r.event("done")["status"], "answered");
    let step = (*r.all("step").last().unwrap()).clone();
    let call = step["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        vec!["requested", "failed:timeout"]
    );
    assert!(tool_result(&t, 3).contains("did not answer within 1 seconds"));
}

#[tokio::test]
async fn a_server_that_cannot_start_leaves_the_site_serving_with_its_other_tools() {
    let t = TestApp::with(with_server(stdio(
        "broken",
        vec!["/nonexistent/mcp-server".into()],
    )))
    .await;
    let visitor = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "lookup_order",
        json!({"order_id": 7}),
    )]));
    let r = t.question(&visitor, None, "Where is order 7?").await;
    assert_eq!(r.event("done")["status"], "answered");
    assert_eq!(r.all("step").last().unwrap()["status"], "succeeded");
    assert!(!t.app.mcp.of_site("acme")[0].is_connected());
}

/// A call the server refuses (here: a tool it does not have, which the
/// TypeScript SDK answers as an `isError` result) fails as a tool error; the
/// connection, and the child process, stay. (A JSON-RPC error answer is judged
/// the same way: `mcp::tools::tests`.)
#[tokio::test]
async fn a_call_the_server_refuses_fails_as_a_tool_error_and_keeps_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let t = TestApp::with(with_server(everything_stdio(&pid_file))).await;
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let server = t.app.mcp.of_site("acme")[0].clone();
    let outcome = server
        .call("no-such-tool", &json!({}), Duration::from_secs(10))
        .await;
    assert!(!outcome.succeeded);
    assert_eq!(
        outcome.failure.map(|r| r.as_str()),
        Some("tool_error"),
        "{}",
        outcome.result
    );
    assert!(outcome.result.starts_with("The tool reported an error:"));
    // Had the connection been dropped, the supervisor would start a new child.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(server.is_connected());
    assert_eq!(std::fs::read_to_string(&pid_file).unwrap(), pid);
    let outcome = server
        .call("get-sum", &json!({"a": 1, "b": 1}), Duration::from_secs(10))
        .await;
    assert!(outcome.succeeded, "{}", outcome.result);
}

/// The card's digest covers where the server is: a replica (or a restart)
/// whose file starts the server differently refuses a pending card as stale,
/// while one with the same file runs it.
#[tokio::test]
async fn a_card_is_stale_where_the_file_points_its_server_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("notes.log");
    let elsewhere = dir.path().join("elsewhere.log");
    let t = TestApp::with(with_server(notes_server(&log))).await;
    let same = t.replica(with_server(notes_server(&log))).await;
    let moved = t.replica(with_server(notes_server(&elsewhere))).await;
    let card_for = |text: &'static str| {
        let t = &t;
        async move {
            let visitor = t.visitor().await;
            t.llm
                .push(Script::tool_calls(&[("send_note", json!({"text": text}))]));
            let r = t.question(&visitor, None, "Send a note").await;
            (visitor, r.conversation(), r.event("confirm").clone())
        }
    };
    let (visitor, conversation, card) = card_for("kept").await;
    let r = same.answer(&visitor, &conversation, &card, "confirm").await;
    assert_eq!(r.event("done")["status"], "answered", "{:?}", r.json);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "\"kept\"\n");

    let (visitor, conversation, card) = card_for("moved").await;
    let r = moved
        .answer(&visitor, &conversation, &card, "confirm")
        .await;
    assert_eq!((r.status, r.code()), (409, "call_not_pending"));
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await,
        vec!["requested", "refused:stale"]
    );
    assert!(!elsewhere.exists());
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "\"kept\"\n");
}
