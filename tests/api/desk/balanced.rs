//! The desk across two replicas behind HAProxy (PostgreSQL, Redis): the
//! visitor's calls go through the balancer, the operator's to the other
//! replica, and the visitor's live channel hears the operator wherever it
//! landed, woken by LISTEN/NOTIFY well within the channel's own re-read.

use std::time::Duration;

use serde_json::json;

use super::crash::{ada_at, operator_post};
use crate::replicas::cluster::Cluster;
use crate::support::{Channel, ask_path_post};
use deskbell::testkit::Reply as Script;

#[tokio::test]
async fn the_desk_flow_works_across_replicas_behind_a_balancer() {
    let c = Cluster::start(2, None, "[site.handoff]\nenabled = true\n", &[]).await;
    let operator_base = c.replica(1).base.clone();
    let session = ada_at(&c.setup.database_url, &operator_base).await;

    let token = c.visitor().await;
    c.setup.llm.push(Script::text("Hello!"));
    let r = c.ask(&token, json!({"message": "Hi"})).await;
    let conversation = r.conversation();
    let handed = ask_path_post(
        &c.base,
        &token,
        &format!("/v1/conversations/{conversation}/handoff"),
    )
    .await;
    assert_eq!(handed["holder"], "queue", "{handed:?}");
    let mut balanced = Channel::open(&c.base, &token, &conversation, Some("1")).await;
    let mut on_first = Channel::open(&c.replica(0).base, &token, &conversation, Some("1")).await;

    let desk = format!("/v1/operator/conversations/{conversation}");
    assert_eq!(
        operator_post(
            &operator_base,
            &session,
            &format!("{desk}/takeover"),
            json!({})
        )
        .await,
        200
    );
    assert_eq!(
        operator_post(
            &operator_base,
            &session,
            &format!("{desk}/messages"),
            json!({"text": "Ada here."})
        )
        .await,
        200
    );
    for live in [&mut balanced, &mut on_first] {
        let events = live.take(2, Duration::from_secs(3)).await;
        assert_eq!(events[0].data, json!({"holder": "operator", "name": "Ada"}));
        assert_eq!(events[1].data["text"], "Ada here.");
    }

    // While Ada holds it, the visitor's messages reach neither model nor budget.
    let asked = c.setup.llm.requests().len();
    let r = c
        .ask(
            &token,
            json!({"conversation": conversation, "message": "Thanks Ada"}),
        )
        .await;
    assert_eq!(r.status, 202, "{:?}", r.json);
    assert_eq!(c.setup.llm.requests().len(), asked);

    assert_eq!(
        operator_post(
            &operator_base,
            &session,
            &format!("{desk}/release"),
            json!({})
        )
        .await,
        200
    );
    for live in [&mut balanced, &mut on_first] {
        let back = live.take(1, Duration::from_secs(3)).await;
        assert_eq!(back[0].data["holder"], "assistant");
    }
    c.setup.llm.push(Script::text("Back with you."));
    let r = c
        .ask(
            &token,
            json!({"conversation": conversation, "message": "One more thing"}),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    let request = c.setup.llm.requests().last().unwrap().to_string();
    assert!(
        request.contains("Ada — a person from the support team — wrote:] Ada here."),
        "{request}"
    );
}
