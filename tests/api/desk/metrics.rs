//! The desk's metrics as a real Prometheus scrapes them from `deskbell serve`:
//! handoffs by who asked, the queue's wait, and the operators present.

use std::time::Duration;

use serde_json::json;

use super::crash::{ada_at, operator_post};
use crate::crash::harness::{Server, setup_with};
use crate::metrics::Prometheus;
use crate::support::{ask_path_post, free_port};
use deskbell::testkit::Reply as Script;

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_scrapes_the_desks_handoffs_queue_wait_and_presence() {
    let metrics = format!("127.0.0.1:{}", free_port());
    let s = setup_with(
        false,
        &format!("metrics_bind = \"{metrics}\"\n"),
        "[site.handoff]\nenabled = true\n",
    )
    .await;
    let server = Server::start(&s.config, None).await;
    let prometheus = Prometheus::start(&metrics);
    let session = ada_at(&s.database_url, &server.base).await;

    // The visitor asks for a person; the assistant hands another conversation over.
    let token = server.visitor().await;
    s.llm.push(Script::text("Hello!"));
    let first = server
        .ask(&token, json!({"message": "Hi"}))
        .await
        .conversation();
    let handed = ask_path_post(
        &server.base,
        &token,
        &format!("/v1/conversations/{first}/handoff"),
    )
    .await;
    assert_eq!(handed["holder"], "queue");
    s.llm.push(Script::tool_calls(&[(
        "handoff",
        json!({"reason": "asked"}),
    )]));
    let r = server
        .ask(&token, json!({"message": "A person please"}))
        .await;
    assert_eq!(r.event("holder")["holder"], "queue");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let desk = format!("/v1/operator/conversations/{first}");
    assert_eq!(
        operator_post(
            &server.base,
            &session,
            &format!("{desk}/takeover"),
            json!({})
        )
        .await,
        200
    );

    prometheus
        .until_at_least(
            r#"deskbell_handoffs_total{site="acme",from="visitor"}"#,
            1.0,
        )
        .await;
    prometheus
        .exactly(r#"deskbell_handoffs_total{from="assistant"}"#, 1.0)
        .await;
    prometheus
        .exactly(r#"deskbell_handoffs_total{from="console"}"#, 1.0)
        .await;
    prometheus
        .exactly("deskbell_queue_wait_seconds_count", 1.0)
        .await;
    let waited = prometheus
        .value("deskbell_queue_wait_seconds_sum")
        .await
        .unwrap();
    assert!(waited > 0.2, "the queue's wait was {waited} s");
    prometheus.exactly("deskbell_operators_online", 1.0).await;
}
