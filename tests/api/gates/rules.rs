//! `confirm_when` (SPEC §20): a rule on the arguments decides whether a call
//! needs its card; a rule that throws means "confirm", never "auto".

use deskbell::testkit::{HookReply, Reply as Script};
use serde_json::{Value, json};

use super::tool;
use crate::support::TestApp;

async fn refund_app(rule: &str) -> TestApp {
    let rule = rule.to_string();
    TestApp::with(move |c| tool(c, "refund").confirm_when = Some(rule)).await
}

fn rule_of(row: &deskbell::store::AuditRow) -> Value {
    serde_json::from_str(
        row.rule
            .as_deref()
            .expect("the requested row names the rule"),
    )
    .unwrap()
}

#[tokio::test]
async fn a_refund_below_the_rule_runs_on_its_own_and_the_audit_names_the_rule() {
    let t = refund_app("args.amount > 100").await;
    let token = t.visitor().await;
    t.llm
        .push(Script::tool_calls(&[("refund", json!({"amount": 40}))]));
    t.hook.push(HookReply::ok(r#"{"refunded": 40}"#));
    t.llm.push(Script::text("Refunded."));
    let r = t.question(&token, None, "Refund me 40").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert!(!r.names().contains(&"confirm"), "{:?}", r.names());
    let steps = r.all("step");
    assert_eq!(steps.last().unwrap()["status"], "succeeded");
    assert_eq!(t.hook.calls().len(), 1);
    assert_eq!(t.hook.calls()[0].body["arguments"], json!({"amount": 40}));
    let call = steps[0]["call"].as_str().unwrap();
    assert_eq!(t.audit_events(call).await, ["requested", "executed"]);
    let rows = t.app.store.audit().for_call(call).await.unwrap();
    assert_eq!(
        rule_of(&rows[0]),
        json!({"confirm_when": "args.amount > 100", "result": false})
    );
    assert_eq!(rows[0].policy.as_str(), "confirm");
    assert_eq!(
        rows[1].rule, None,
        "only the requested row carries the rule"
    );
}

#[tokio::test]
async fn a_refund_above_the_rule_raises_a_card_and_runs_nothing() {
    let t = refund_app("args.amount > 100").await;
    let token = t.visitor().await;
    t.llm
        .push(Script::tool_calls(&[("refund", json!({"amount": 150}))]));
    let r = t.question(&token, None, "Refund me 150").await;
    assert_eq!(r.names(), ["turn", "confirm", "done"]);
    assert!(t.hook.calls().is_empty());
    let call = r.event("confirm")["call"].as_str().unwrap();
    let rows = t.app.store.audit().for_call(call).await.unwrap();
    assert_eq!(
        rule_of(&rows[0]),
        json!({"confirm_when": "args.amount > 100", "result": true})
    );
}

#[tokio::test]
async fn a_rule_that_throws_on_a_missing_field_or_a_wrong_type_means_confirm() {
    for (rule, args) in [
        ("args.amount > 100", json!({})),
        ("args.amount > '100'", json!({"amount": 150})),
        ("args.amount", json!({"amount": 5})),
    ] {
        let t = refund_app(rule).await;
        let token = t.visitor().await;
        t.llm.push(Script::tool_calls(&[("refund", args.clone())]));
        let r = t.question(&token, None, "Refund me").await;
        assert_eq!(r.names(), ["turn", "confirm", "done"], "{rule} on {args}");
        assert!(t.hook.calls().is_empty(), "{rule} on {args}: nothing ran");
        let call = r.event("confirm")["call"].as_str().unwrap();
        let rows = t.app.store.audit().for_call(call).await.unwrap();
        let said = rule_of(&rows[0]);
        assert!(
            said["result"]
                .as_str()
                .is_some_and(|s| s.starts_with("error: ")),
            "{rule} on {args}: {said}"
        );
    }
}

#[tokio::test]
async fn the_rule_is_in_the_audit_export() {
    let t = refund_app("args.amount > 100").await;
    let token = t.visitor().await;
    t.llm
        .push(Script::tool_calls(&[("refund", json!({"amount": 150}))]));
    t.question(&token, None, "Refund me 150").await;
    let export = |format: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_deskbell"))
            .args(["audit", "export", "--format", format])
            .env("DESKBELL_DATABASE_URL", &t.database_url)
            .output()
            .unwrap()
    };
    let out = crate::support::succeeded(export("jsonl"));
    let text = String::from_utf8(out.stdout).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["event"], "requested");
    assert_eq!(first["rule"]["result"], true);
    let csv = String::from_utf8(crate::support::succeeded(export("csv")).stdout).unwrap();
    assert!(
        csv.lines().next().unwrap().ends_with(",operator,rule"),
        "{csv}"
    );
    assert!(
        csv.contains(r#""{""confirm_when"":""args.amount > 100"",""result"":true}""#),
        "{csv}"
    );
}
