//! Public doors with bounds (SPEC §4, §6.3, §10): minting visitors is limited per
//! client address, a model response's tool calls are capped, and the audit export
//! walks the table a page at a time with spreadsheet-safe cells.

use deskbell::testkit::{Piece, Reply as Script};
use serde_json::json;

use crate::support::{ORIGIN, TestApp};

#[tokio::test]
async fn minting_visitors_is_limited_per_client_address() {
    let t = TestApp::with(|c| c.sites[0].limits.requests_per_minute_per_ip = 5).await;
    for _ in 0..5 {
        t.visitor().await;
    }
    let r = t
        .post("/v1/visitors", None, ORIGIN, json!({"site": "acme"}))
        .await;
    assert_eq!((r.status, r.code()), (429, "rate_limited"));
    let wait: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    // The origin is checked before the limit: an unlisted origin learns nothing.
    let r = t
        .post(
            "/v1/visitors",
            None,
            "https://evil.example",
            json!({"site": "acme"}),
        )
        .await;
    assert_eq!((r.status, r.code()), (403, "origin_not_allowed"));
    t.clock.advance_ms(60_000);
    t.visitor().await;
}

#[tokio::test]
async fn at_most_eight_tool_calls_of_a_response_are_considered() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.llm.push(Script::Stream(
        (0..11)
            .map(|i| Piece::ToolCall {
                id: format!("call_fake_{i}"),
                name: "lookup_order".into(),
                arguments: json!({"order_id": i}).to_string(),
            })
            .collect(),
    ));
    t.llm.push(Script::text("Looked them up."));
    let r = t.question(&token, None, "Look up orders 0 to 10").await;
    assert_eq!(r.event("done")["status"], "answered");
    assert_eq!(t.hook.calls().len(), 8, "the first eight ran");
    let refused: Vec<_> = t
        .audit()
        .await
        .into_iter()
        .filter(|r| r.event.as_str() == "refused")
        .map(|r| r.reason.map(|r| r.as_str()))
        .collect();
    assert_eq!(refused, [Some("too_many_calls"); 3]);
    let told = t.llm.requests()[1]["messages"].to_string();
    assert!(told.contains("at most 8 tool calls"), "{told}");
}

#[tokio::test]
async fn the_export_walks_past_a_page_and_no_cell_can_start_a_formula() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    // A refused call named by the model, so its name lands in the tool column.
    t.llm.push(Script::Stream(vec![Piece::ToolCall {
        id: "c1".into(),
        name: "\t=HYPERLINK(\"x\")".into(),
        arguments: "{}".into(),
    }]));
    t.llm.push(Script::text("No such tool."));
    t.question(&token, None, "hi").await;
    // More rows than one page of the export.
    let template = t.audit().await[0].clone();
    // Ten rows share each time, so pages break inside a run of equal times.
    for i in 0..2_100 {
        let mut row = template.clone();
        row.at += i / 10 + 1;
        row.call = format!("call_{i}");
        t.app.store.audit().append(&row).await.unwrap();
    }
    let export = |format: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_deskbell"))
            .args(["audit", "export", "--format", format])
            .env("DESKBELL_DATABASE_URL", &t.database_url)
            .output()
            .unwrap()
    };
    let jsonl = String::from_utf8(export("jsonl").stdout).unwrap();
    let ats: Vec<String> = jsonl
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["at"].to_string())
        .collect();
    assert_eq!(ats.len(), 2 + 2_100, "every row, once");
    let rows: std::collections::HashSet<&str> = jsonl.lines().collect();
    assert_eq!(
        rows.len(),
        2 + 2_100,
        "no row twice, none skipped at a page break"
    );
    let mut sorted = ats.clone();
    sorted.sort();
    assert_eq!(ats, sorted, "oldest first across pages");
    let csv = String::from_utf8(export("csv").stdout).unwrap();
    for line in csv.lines().skip(1) {
        for cell in line.split(',') {
            let cell = cell.trim_start_matches('"');
            assert!(
                !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                "{line}"
            );
        }
    }
}
