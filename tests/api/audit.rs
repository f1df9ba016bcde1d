//! The audit table (SPEC §10): append-only, and exported oldest first.

use serde_json::{Value, json};

use crate::support::TestApp;

#[tokio::test]
async fn the_audit_table_is_append_only() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.raise_card(&token).await;
    t.assert_audit_is_append_only().await;
    assert_eq!(t.audit().await.len(), 1);
}

#[tokio::test]
async fn the_audit_export_writes_every_row_oldest_first() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    t.answer(&token, &conversation, &card, "confirm").await;
    let export = |format: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_deskbell"))
            .args(["audit", "export", "--site", "acme", "--format", format])
            .env("DESKBELL_DATABASE_URL", &t.database_url)
            .output()
            .unwrap()
    };
    let out = crate::support::succeeded(export("jsonl"));
    let rows: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let events: Vec<&str> = rows.iter().map(|r| r["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["requested", "confirmed", "executed"]);
    let row = &rows[1];
    assert!(row["at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(row["call"], card["call"]);
    assert_eq!(row["site"], "acme");
    assert_eq!(row["conversation"], conversation.as_str());
    assert!(row["visitor"].as_str().unwrap().starts_with("v_"));
    assert_eq!(row["tool"], "cancel_order");
    assert_eq!(row["policy"], "confirm");
    assert_eq!(row["reason"], Value::Null);
    assert_eq!(row["arguments"], json!({"order_id": 42}));
    let csv = String::from_utf8(export("csv").stdout).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("at,event,reason,call"));
    assert!(
        lines[2].contains(",confirmed,,") && lines[2].contains("\"{\"\"order_id\"\":42}\""),
        "{}",
        lines[2]
    );
}
