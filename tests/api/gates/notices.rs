//! Telling the team that a call waits (SPEC §20): the `approval.requested`
//! webhook, signed like tool calls, and the `deskbell_approvals_waiting` gauge
//! as a real Prometheus scrapes it.

use std::time::Duration;

use deskbell::config::{ApprovalWebhook, Policy};
use deskbell::secret::Secret;
use deskbell::states::OperatorRole;
use deskbell::testkit::Reply as Script;
use serde_json::json;

use super::crash::{approvals_setup_with, approve_in_background, waiting_refund};
use super::tool;
use crate::crash::harness::Server;
use crate::desk::crash::ada_at;
use crate::metrics::Prometheus;
use crate::support::{TestApp, free_port};

#[tokio::test]
async fn a_waiting_call_is_posted_to_the_teams_webhook_signed() {
    let t = TestApp::with(|c| {
        let url = tool(c, "refund").url.replace("/refund", "/approvals");
        tool(c, "refund").policy = Policy::Approve;
        c.sites[0].approval_webhook = Some(ApprovalWebhook {
            url,
            secret_env: None,
            timeout_s: 5.0,
            secret: Some(Secret::new("team-secret")),
        });
    })
    .await;
    let token = t.visitor().await;
    t.llm
        .push(Script::tool_calls(&[("refund", json!({"amount": 250}))]));
    let r = t.question(&token, None, "Refund me 250").await;
    let call = r.event("step")["call"].as_str().unwrap().to_string();
    let mut posted = None;
    for _ in 0..100 {
        posted = t.hook.calls().into_iter().find(|c| c.path == "/approvals");
        if posted.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let posted = posted.expect("the webhook was told");
    assert_eq!(posted.body["event"], "approval.requested");
    assert_eq!(posted.body["call"], call.as_str());
    assert_eq!(posted.body["label"], "Refund a payment");
    assert_eq!(
        posted.body["arguments"],
        json!([{"name": "Amount", "value": "250"}])
    );
    let header = &posted.headers["deskbell-signature"];
    let unix: i64 = header
        .strip_prefix("t=")
        .and_then(|rest| rest.split(',').next())
        .and_then(|t| t.parse().ok())
        .unwrap();
    assert_eq!(
        header,
        &deskbell::tools::http::signature_header(b"team-secret", unix, &posted.raw)
    );
    let admin = t.console(OperatorRole::Admin).await;
    assert_eq!(
        admin.get("/v1/operator/approvals").await.json["items"][0]["call"],
        call.as_str()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_counts_the_calls_waiting_for_a_teammate() {
    let metrics = format!("127.0.0.1:{}", free_port());
    let s = approvals_setup_with(&format!("metrics_bind = \"{metrics}\"\n")).await;
    let server = Server::start(&s.config, None).await;
    let prometheus = Prometheus::start(&metrics);
    let session = ada_at(&s.database_url, &server.base).await;
    let token = server.visitor().await;
    let (_, first) = waiting_refund(&s, &server, &token, &session).await;
    waiting_refund(&s, &server, &token, &session).await;
    prometheus
        .until_at_least("deskbell_approvals_waiting", 2.0)
        .await;
    s.llm.push(Script::text("Done."));
    approve_in_background(&server.base, &session, &first);
    // Down again once the approval is decided (the gauge is read from the
    // database after each change).
    let mut now = None;
    for _ in 0..150 {
        now = prometheus.value("deskbell_approvals_waiting").await;
        if now == Some(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(now, Some(1.0));
    server.kill();
}
