//! `GET /openapi.json` (SPEC §18): an OpenAPI 3.1 document of the visitor and
//! operator APIs. Every body and answer schema is derived from the types in
//! `wire` (the ones the handlers serialize), and every state from `states`; the
//! operations are declared here, one function each, beside the router's paths.
//! Errors are the §5 envelope under `default`, with the codes each operation can
//! answer named in its description. The document is built once per process.
//!
//! CI runs schemathesis against a live server's document (`scripts/schemathesis`):
//! every response must conform to it, so it cannot drift from the code unseen.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::states::{AuditEvent, Policy, Reason};
#[allow(unused_imports)]
use crate::wire::*;

/// One audit row as the operator API lists it: the §10 export row plus
/// `operator` (the export's own shape, documented here).
#[derive(ToSchema)]
#[schema(as = AuditEntry)]
#[allow(dead_code)]
struct AuditEntryDoc {
    at: String,
    event: AuditEvent,
    reason: Option<Reason>,
    call: Option<String>,
    site: String,
    conversation: Option<String>,
    visitor: Option<String>,
    tool: String,
    policy: Policy,
    arguments: serde_json::Value,
    http_status: Option<i64>,
    duration_ms: Option<i64>,
    operator: Option<String>,
}

/// A question (SPEC §5).
#[derive(ToSchema)]
#[schema(as = AskQuestion)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
struct AskQuestionDoc {
    /// A conversation of this visitor's to go on; a new one when absent.
    conversation: Option<String>,
    /// Not empty, no NUL, at most the site's `max_message_chars`.
    #[schema(min_length = 1)]
    message: String,
}

/// An answer to a card (SPEC §5, §8), exactly as the `confirm` event gave it.
#[derive(ToSchema)]
#[schema(as = AskAnswer)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
struct AskAnswerDoc {
    conversation: String,
    call: String,
    decision: Decision,
    signature: String,
}

/// The body of `POST /v1/ask`: one of the two forms (`wire::AskBody` reads
/// both and `AskRequest::from_body` tells them apart).
#[derive(ToSchema)]
#[schema(as = Ask)]
#[allow(dead_code)]
#[serde(untagged)]
enum AskDoc {
    Question(AskQuestionDoc),
    Answer(AskAnswerDoc),
}

/// The names of the ask stream's events (SPEC §5).
#[derive(ToSchema)]
#[schema(as = AskEventName)]
#[allow(dead_code)]
#[serde(rename_all = "snake_case")]
enum AskEventNameDoc {
    Turn,
    Delta,
    Step,
    Confirm,
    Decision,
    Citations,
    Error,
    Done,
    Holder,
    Offline,
}

/// One server-sent event of an ask: its name, and as data one `StreamEvent`
/// shape in JSON.
#[derive(ToSchema)]
#[schema(as = AskEvent)]
#[allow(dead_code)]
struct AskEventDoc {
    event: AskEventNameDoc,
    #[schema(content_media_type = "application/json")]
    data: String,
}

/// The name of the console's live events (SPEC §15): always `conversation`;
/// what changed is the data's `change`.
#[derive(ToSchema)]
#[schema(as = LiveEventName)]
#[allow(dead_code)]
#[serde(rename_all = "snake_case")]
enum LiveEventNameDoc {
    Conversation,
}

/// One server-sent event of the console's live stream: `conversation`, with a
/// `LiveChange` in JSON as data (`change`: started, card_raised, card_answered,
/// turn_ended).
#[derive(ToSchema)]
#[schema(as = LiveEvent)]
#[allow(dead_code)]
struct LiveEventDoc {
    event: LiveEventNameDoc,
    #[schema(content_media_type = "application/json")]
    data: String,
}

/// What `/healthz` and a ready `/readyz` answer.
#[derive(ToSchema)]
#[schema(as = Status)]
#[allow(dead_code)]
struct StatusDoc {
    status: String,
    checks: Option<serde_json::Value>,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Deskbell",
        description = "A self-hosted AI help desk: the visitor API (tokens, asks streamed as server-sent events, history) and the operator API (SPEC §4–§11, §15).",
        license(name = "Apache-2.0")
    ),
    paths(
        operations::healthz, operations::readyz, operations::create_visitor, operations::ask,
        operations::conversation, operations::session_login, operations::session_show,
        operations::session_logout, operations::sites, operations::conversations,
        operations::conversation_detail, operations::events, operations::audit,
        operations::audit_export, operations::tools, operations::tool_change,
        operations::tool_preview, operations::usage, operations::knowledge,
        operations::knowledge_ingest, operations::knowledge_ingest_job,
        operations::knowledge_search, operations::tokens,
        operations::token_revoke, desk::handoff, desk::events, desk::takeover,
        desk::reply, desk::release, desk::contact, desk::queue, desk::presence,
        desk::cancel_card, desk::typing, desk::feedback, desk::feedback_export, desk::widget_strings, desk::site_strings,
        desk::site_string_set, desk::site_string_reset, approvals::list,
        approvals::decide,
    ),
    components(schemas(ErrorBody, ErrorDetail, ErrorCodeDoc, StreamEvent, AuditEntryDoc, StatusDoc)),
    modifiers(&Security),
    tags(
        (name = "visitor", description = "Called by the widget in a visitor's browser."),
        (name = "operator", description = "Called by the operator console and operators' scripts."),
        (name = "operations", description = "For load balancers and monitoring.")
    )
)]
struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "visitor",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The visitor token from POST /v1/visitors."))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "operator_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An operator API token (dbo_…) from `deskbell operator token`.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "operator_session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new("deskbell_operator"))),
        );
    }
}

/// The document as JSON text, built once.
pub fn document() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        ApiDoc::openapi()
            .to_json()
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    })
}

pub async fn openapi_json() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document())
}

// The operations: `openapi/operations.rs`.
mod approvals;
mod desk;
mod operations;

#[cfg(test)]
mod tests {
    use crate::error::ApiError as E;

    /// Every variant, once; the match below stops compiling when one is added
    /// without being listed here.
    fn every_error() -> Vec<E> {
        let all = vec![
            E::InvalidRequest(String::new()),
            E::InvalidVisitorToken,
            E::OriginNotAllowed,
            E::IdentityInvalid,
            E::SiteNotFound,
            E::SignatureInvalid,
            E::ConversationNotFound,
            E::CallNotFound,
            E::CallNotPending,
            E::ConfirmationExpired,
            E::MessageTooLong(1),
            E::BodyTooLarge,
            E::RateLimited(1),
            E::TooManyStreams(1),
            E::DailyBudgetExhausted(1),
            E::ProviderUnavailable,
            E::ServiceUnavailable(1),
            E::NotFound,
            E::MethodNotAllowed,
            E::OperatorUnauthenticated,
            E::LoginFailed,
            E::Forbidden,
            E::CsrfInvalid,
            E::ConversationHeld,
            E::NotHeld,
            E::HandoffDisabled,
            E::InvalidEdit("x".into()),
            E::Missing("x"),
            E::Internal(anyhow::anyhow!("x")),
        ];
        for e in &all {
            match e {
                E::InvalidRequest(_)
                | E::InvalidVisitorToken
                | E::OriginNotAllowed
                | E::IdentityInvalid
                | E::SiteNotFound
                | E::SignatureInvalid
                | E::ConversationNotFound
                | E::CallNotFound
                | E::CallNotPending
                | E::ConfirmationExpired
                | E::MessageTooLong(_)
                | E::BodyTooLarge
                | E::RateLimited(_)
                | E::TooManyStreams(_)
                | E::DailyBudgetExhausted(_)
                | E::ProviderUnavailable
                | E::ServiceUnavailable(_)
                | E::NotFound
                | E::MethodNotAllowed
                | E::OperatorUnauthenticated
                | E::LoginFailed
                | E::Forbidden
                | E::CsrfInvalid
                | E::ConversationHeld
                | E::NotHeld
                | E::HandoffDisabled
                | E::InvalidEdit(_)
                | E::Missing(_)
                | E::Internal(_) => {}
            }
        }
        all
    }

    #[test]
    fn every_error_code_is_in_the_document_and_the_document_has_no_other() {
        let doc: serde_json::Value = serde_json::from_str(super::document()).unwrap();
        let listed: Vec<&str> = doc["components"]["schemas"]["ErrorCode"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let mut codes: Vec<&str> = every_error().iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        let mut sorted = listed.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, codes);
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    }
}
