//! The human desk (SPEC §19): who holds a conversation, operators' replies on
//! the visitor's live channel, and the way back to the assistant.

mod balanced;
mod channel;
mod console;
pub(crate) mod crash;
mod holders;
mod metrics;
mod nobody;
mod turns;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Console, Reply, TestApp};
use deskbell::config::Config;
use deskbell::states::OperatorRole;

/// Handoff enabled on the test site.
pub fn with_handoff(c: &mut Config) {
    c.sites[0].handoff.enabled = true;
}

/// A visitor and a conversation the assistant answered once, with an
/// operator signed in (someone is at the desk).
pub async fn conversation(t: &TestApp) -> (String, String) {
    on_duty(t).await;
    conversation_alone(t).await
}

/// A visitor and a conversation the assistant answered once.
pub async fn conversation_alone(t: &TestApp) -> (String, String) {
    let token = t.visitor().await;
    t.llm
        .push(deskbell::testkit::Reply::text("Hello, how can I help?"));
    let r = t.question(&token, None, "Hi").await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    (token, r.conversation())
}

impl TestApp {
    /// The visitor's "Talk to a person".
    pub async fn handoff(&self, token: &str, conversation: &str, body: Value) -> Reply {
        self.post(
            &format!("/v1/conversations/{conversation}/handoff"),
            Some(token),
            crate::support::ORIGIN,
            body,
        )
        .await
    }
}

impl Console {
    pub async fn takeover(&self, conversation: &str, body: Value) -> Reply {
        let path = format!("/v1/operator/conversations/{conversation}/takeover");
        self.send(Method::POST, &path, body).await
    }

    pub async fn reply(&self, conversation: &str, text: &str) -> Reply {
        let path = format!("/v1/operator/conversations/{conversation}/messages");
        self.send(Method::POST, &path, json!({ "text": text }))
            .await
    }

    pub async fn release(&self, conversation: &str) -> Reply {
        let path = format!("/v1/operator/conversations/{conversation}/release");
        self.send(Method::POST, &path, json!({})).await
    }
}

/// An operator signed in now, so someone is at the desk.
pub async fn on_duty(t: &TestApp) {
    let email = format!("duty-{}@example.test", deskbell::ids::new_id("o"));
    t.add_operator(&email, OperatorRole::Agent).await;
    assert_eq!(
        t.sign_in(&email, crate::support::PASSWORD).await.status,
        200
    );
}

/// A signed-in operator with a display name.
pub async fn named_console(t: &TestApp, role: OperatorRole, email: &str, name: &str) -> Console {
    t.add_operator(email, role).await;
    assert!(t.app.store.operators().set_name(email, name).await.unwrap());
    let r = t.sign_in(email, crate::support::PASSWORD).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    Console {
        base: t.base.clone(),
        http: t.http.clone(),
        cookie: crate::support::session_cookie(&r),
        csrf: r.json["csrf"].as_str().unwrap().to_string(),
    }
}

/// The audit rows of one kind for a conversation.
pub async fn audit_of(
    t: &TestApp,
    conversation: &str,
    event: &str,
) -> Vec<deskbell::store::AuditRow> {
    t.audit()
        .await
        .into_iter()
        .filter(|r| r.conversation == conversation && r.event.as_str() == event)
        .collect()
}
