//! The human desk (SPEC §19): a conversation is held by the assistant, waits
//! in the queue for a person, or is held by an operator.
//!
//! The holder changes only three ways — the visitor's "Talk to a person"
//! (`visitor.rs`), the assistant's `handoff` tool, and an operator's takeover
//! (`console.rs`) — and goes back to the assistant only by a release. Each
//! change is a compare-and-set on the conversation's row with its audit row
//! and the visitor's `holder` event in one transaction (`store::desk`). While
//! a person holds it, a visitor's ask is stored and acknowledged, never sent to
//! the model. What reaches the visitor live (operator replies, holder changes)
//! is stored as numbered events and streamed by `events.rs`; `notify.rs` wakes
//! the streams of every replica when one commits.

mod availability;
pub(crate) mod console;
mod events;
pub mod notify;
mod queue;
mod visitor;

use axum::Router;
use axum::routing::{get, post};

use crate::app::App;
use crate::clock::Millis;
use crate::states::{AuditEvent, Policy};
use crate::store::AuditRow;
use crate::store::desk::Holder;
use crate::wire::{HolderEvent, HolderKind};

pub use console::display_name;
pub use visitor::{Handed, queued, to_queue};

pub fn router() -> Router<App> {
    Router::new()
        .route("/v1/conversations/{id}/handoff", post(visitor::handoff))
        .route("/v1/conversations/{id}/events", get(events::stream))
        .route("/v1/conversations/{id}/contact", post(visitor::contact))
        .route(
            "/v1/operator/conversations/{id}/takeover",
            post(console::takeover),
        )
        .route(
            "/v1/operator/conversations/{id}/messages",
            post(console::reply),
        )
        .route(
            "/v1/operator/conversations/{id}/release",
            post(console::release),
        )
        .route(
            "/v1/operator/conversations/{id}/calls/{call}/cancel",
            post(queue::cancel_card),
        )
        .route(
            "/v1/operator/conversations/{id}/typing",
            post(console::typing),
        )
        .route("/v1/operator/queue", get(queue::queue))
        .route("/v1/operator/presence", get(queue::presence))
}

/// The built-in tool through which the assistant asks for a person.
pub const HANDOFF_TOOL: &str = "handoff";

/// The `handoff` tool as the model is offered it.
pub fn handoff_tool() -> std::sync::Arc<crate::llm::ToolSpec> {
    static SPEC: std::sync::OnceLock<std::sync::Arc<crate::llm::ToolSpec>> =
        std::sync::OnceLock::new();
    SPEC.get_or_init(|| {
        std::sync::Arc::new(crate::llm::ToolSpec {
            name: HANDOFF_TOOL.into(),
            description: "Hand the conversation to a person from the support team: when the visitor \
                          asks for a person, or when you cannot help and a person could. Call it once. \
                          Do not promise the visitor a person: whether one is available now is told to \
                          the visitor when you call it."
                .into(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {"reason": {"type": "string", "description": "Why a person is needed, in a sentence."}},
                "required": ["reason"]
            }),
        })
    })
    .clone()
}

/// The name a visitor sees for an operator who set none: never their email.
pub const DEFAULT_OPERATOR_NAME: &str = "Support team";

/// The audit row of a change of holder: `handoff` or `released`, with who
/// asked (`from`), why, and the operator when one acted.
fn holder_audit(
    event: AuditEvent,
    conversation: &str,
    site: &str,
    visitor: &str,
    details: serde_json::Value,
    operator: Option<&str>,
    at: Millis,
) -> AuditRow {
    AuditRow {
        at,
        event,
        reason: None,
        call: String::new(),
        site: site.to_string(),
        conversation: conversation.to_string(),
        visitor: visitor.to_string(),
        tool: "handoff".into(),
        policy: Policy::Auto,
        // Built from strings only, so canonical form cannot fail; an empty
        // object stands in if it ever did.
        arguments: serde_json_canonicalizer::to_string(&details).unwrap_or_else(|_| "{}".into()),
        http_status: None,
        duration_ms: None,
        operator: operator.map(str::to_string),
        rule: None,
    }
}

/// The visitor's `holder` event for a holder, with the operator's display name.
pub(crate) fn holder_event(holder: &Holder, name: Option<&str>) -> HolderEvent {
    HolderEvent {
        holder: match holder {
            Holder::Assistant => HolderKind::Assistant,
            Holder::Queue => HolderKind::Queue,
            Holder::Operator(_) => HolderKind::Operator,
        },
        name: match holder {
            Holder::Operator(_) => Some(name.unwrap_or(DEFAULT_OPERATOR_NAME).to_string()),
            _ => None,
        },
    }
}
