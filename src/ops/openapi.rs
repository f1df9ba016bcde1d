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

/// The §5 error codes, as `error.code` may carry them.
#[derive(ToSchema)]
#[schema(as = ErrorCode)]
#[allow(dead_code)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorCodeDoc {
    InvalidRequest,
    InvalidVisitorToken,
    OriginNotAllowed,
    IdentityInvalid,
    SiteNotFound,
    SignatureInvalid,
    ConversationNotFound,
    CallNotFound,
    CallNotPending,
    ConfirmationExpired,
    MessageTooLong,
    RateLimited,
    TooManyStreams,
    DailyBudgetExhausted,
    ProviderUnavailable,
    ServiceUnavailable,
    NotFound,
    MethodNotAllowed,
    OperatorUnauthenticated,
    LoginFailed,
    Forbidden,
    CsrfInvalid,
    InternalError,
}

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
        operations::token_revoke,
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

// ---- operations -------------------------------------------------------------
// Each function below only carries its operation's description for the
// document; the handlers are in the modules the router mounts.
#[allow(dead_code)]
mod operations {
    use super::*;

    // Errors are listed by status with the codes each can carry, all in the
    // envelope of SPEC §5 (`error.code`, `error.message`; `Retry-After` on 429 and
    // 503).

    #[utoipa::path(get, path = "/healthz", tag = "operations",
        responses((status = 200, description = "Alive, and the database answers.", body = StatusDoc),
                  (status = 503, description = "service_unavailable: the database does not answer.", body = ErrorBody)))]
    fn healthz() {}

    #[utoipa::path(get, path = "/readyz", tag = "operations",
        responses((status = 200, description = "Ready: database, Redis (when configured) and every site's knowledge index.", body = StatusDoc),
                  (status = 503, description = "Not ready: `service_unavailable` with `checks` naming what failed.", body = ErrorBody)))]
    fn readyz() {}

    #[utoipa::path(post, path = "/v1/visitors", tag = "visitor",
        params(("Origin" = String, Header, description = "One of the site's origins.")),
        request_body = VisitorRequest,
        responses((status = 200, description = "A visitor token (SPEC §4).", body = VisitorResponse),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 403, description = "origin_not_allowed, identity_invalid.", body = ErrorBody),
                  (status = 404, description = "site_not_found.", body = ErrorBody),
                  (status = 429, description = "rate_limited.", body = ErrorBody),
                  (status = 503, description = "service_unavailable.", body = ErrorBody)))]
    fn create_visitor() {}

    #[utoipa::path(post, path = "/v1/ask", tag = "visitor", security(("visitor" = [])),
        params(("Origin" = String, Header, description = "One of the site's origins.")),
        request_body(content = AskDoc, description = "A question (`message`, optional `conversation`) or an answer to a card (`conversation`, `call`, `decision`, `signature`)."),
        responses((status = 200, description = "Server-sent events: `turn` {conversation, turn, message}, `delta` {text}, `step` {call, tool, label, status}, `confirm` {call, tool, label, arguments, expires_at, signature}, `decision` {call, status}, `citations` {items}, `error` {code, message}, and last `done` {status, usage}. Each event's data is one of the `StreamEvent` shapes.", content_type = "text/event-stream", body = AskEventDoc),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 401, description = "invalid_visitor_token.", body = ErrorBody),
                  (status = 403, description = "origin_not_allowed, identity_invalid, signature_invalid.", body = ErrorBody),
                  (status = 404, description = "conversation_not_found, call_not_found.", body = ErrorBody),
                  (status = 409, description = "call_not_pending.", body = ErrorBody),
                  (status = 410, description = "confirmation_expired.", body = ErrorBody),
                  (status = 413, description = "message_too_long.", body = ErrorBody),
                  (status = 429, description = "rate_limited, too_many_streams, daily_budget_exhausted.", body = ErrorBody),
                  (status = 503, description = "provider_unavailable, service_unavailable.", body = ErrorBody)))]
    fn ask() {}

    #[utoipa::path(get, path = "/v1/conversations/{id}", tag = "visitor", security(("visitor" = [])),
        params(("id" = String, Path, description = "A conversation id (c_…)."),
               ("Origin" = String, Header, description = "One of the site's origins.")),
        responses((status = 200, description = "The conversation's messages in order (SPEC §11).", body = ConversationView),
                  (status = 401, description = "invalid_visitor_token.", body = ErrorBody),
                  (status = 403, description = "origin_not_allowed.", body = ErrorBody),
                  (status = 404, description = "conversation_not_found.", body = ErrorBody),
                  (status = 429, description = "rate_limited.", body = ErrorBody),
                  (status = 503, description = "service_unavailable.", body = ErrorBody)))]
    fn conversation() {}

    #[utoipa::path(post, path = "/v1/operator/session", tag = "operator",
        request_body = LoginRequest,
        responses((status = 200, description = "Signed in: the session cookie is set; `csrf` goes in `X-Deskbell-CSRF` on changes.", body = SessionView),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 401, description = "login_failed.", body = ErrorBody),
                  (status = 429, description = "rate_limited.", body = ErrorBody)))]
    fn session_login() {}

    #[utoipa::path(get, path = "/v1/operator/session", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        responses((status = 200, description = "Who is signed in.", body = SessionView),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
    fn session_show() {}

    #[utoipa::path(delete, path = "/v1/operator/session", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        responses((status = 204, description = "Signed out."),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
                  (status = 403, description = "csrf_invalid.", body = ErrorBody)))]
    fn session_logout() {}

    #[utoipa::path(get, path = "/v1/operator/sites", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        responses((status = 200, description = "The configured sites.", body = Items<SiteView>),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
    fn sites() {}

    #[utoipa::path(get, path = "/v1/operator/conversations", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("site" = Option<String>, Query), ("status" = Option<crate::states::MessageStatus>, Query),
               ("pending" = Option<bool>, Query), ("q" = Option<String>, Query, description = "An exact id, or words of a message."),
               ("cursor" = Option<String>, Query), ("limit" = Option<i64>, Query, minimum = 1, maximum = 100, description = "1 to 100.")),
        responses((status = 200, description = "Newest first, keyset-paged.", body = Page<ConversationSummary>),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
    fn conversations() {}

    #[utoipa::path(get, path = "/v1/operator/conversations/{id}", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("id" = String, Path)),
        responses((status = 200, description = "One conversation with every call and its audit rows.", body = ConversationDetail),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
                  (status = 404, description = "conversation_not_found.", body = ErrorBody)))]
    fn conversation_detail() {}

    #[utoipa::path(get, path = "/v1/operator/events", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
            responses((status = 200, description = "Server-sent events named `conversation`, each with a `LiveChange` whose `change` is started, card_raised, card_answered or turn_ended.", content_type = "text/event-stream", body = LiveEventDoc),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
    fn events() {}

    #[utoipa::path(get, path = "/v1/operator/audit", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("site" = Option<String>, Query), ("event" = Option<AuditEvent>, Query), ("tool" = Option<String>, Query),
               ("call" = Option<String>, Query), ("after" = Option<String>, Query, description = "RFC 3339."),
               ("before" = Option<String>, Query, description = "RFC 3339."), ("cursor" = Option<String>, Query),
               ("limit" = Option<i64>, Query, minimum = 1, maximum = 100, description = "1 to 100.")),
        responses((status = 200, description = "Audit rows, newest first.", body = Page<AuditEntryDoc>),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
    fn audit() {}

    #[utoipa::path(get, path = "/v1/operator/audit/export", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("format" = Option<String>, Query, description = "jsonl (default) or csv."), ("site" = Option<String>, Query)),
        responses((status = 200, description = "The whole table, oldest first, as a download: JSON lines, or CSV with `format=csv`.", content((String = "application/x-ndjson"), (String = "text/csv"))),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
    fn audit_export() {}

    #[utoipa::path(get, path = "/v1/operator/tools", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("site" = Option<String>, Query)),
        responses((status = 200, description = "Every tool as it stands.", body = Items<ToolView>),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
    fn tools() {}

    #[utoipa::path(patch, path = "/v1/operator/tools/{site}/{name}", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("site" = String, Path), ("name" = String, Path)),
        request_body = ToolChange,
        responses((status = 200, description = "The tool after the change (admins only).", body = ToolView),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
                  (status = 403, description = "forbidden, csrf_invalid.", body = ErrorBody),
                  (status = 404, description = "not_found.", body = ErrorBody)))]
    fn tool_change() {}

    #[utoipa::path(post, path = "/v1/operator/tools/{site}/{name}/preview", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("site" = String, Path), ("name" = String, Path)),
        request_body = PreviewRequest,
        responses((status = 200, description = "The card these arguments would raise.", body = CardPreview),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
                  (status = 403, description = "csrf_invalid.", body = ErrorBody),
                  (status = 404, description = "not_found.", body = ErrorBody)))]
    fn tool_preview() {}

    #[utoipa::path(get, path = "/v1/operator/usage", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("site" = Option<String>, Query), ("days" = Option<i64>, Query, minimum = 1, maximum = 90, description = "1 to 90.")),
        responses((status = 200, description = "Per site and UTC day.", body = UsageView),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
    fn usage() {}

    #[utoipa::path(get, path = "/v1/operator/knowledge", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        responses((status = 200, description = "Each site's sources and last ingest.", body = Items<KnowledgeView>),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
    fn knowledge() {}

    #[utoipa::path(post, path = "/v1/operator/knowledge/{site}/ingest", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("site" = String, Path),
               ("Prefer" = Option<String>, Header, description = "`respond-async`: answer at once with the job (202) instead of waiting for the report.")),
        responses((status = 200, description = "The ingest's report (admins only).", body = ReportView),
                  (status = 202, description = "The ingest runs as a job; its progress is at the `Location` (with `Prefer: respond-async`).", body = IngestJobView),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
                  (status = 403, description = "forbidden, csrf_invalid.", body = ErrorBody),
                  (status = 404, description = "not_found.", body = ErrorBody)))]
    fn knowledge_ingest() {}

    #[utoipa::path(get, path = "/v1/operator/knowledge/{site}/ingest/{job}", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("site" = String, Path), ("job" = String, Path)),
        responses((status = 200, description = "An ingest job's progress, and its report once finished.", body = IngestJobView),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
                  (status = 404, description = "not_found.", body = ErrorBody)))]
    fn knowledge_ingest_job() {}

    #[utoipa::path(get, path = "/v1/operator/knowledge/{site}/search", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("site" = String, Path), ("q" = String, Query)),
        responses((status = 200, description = "What a turn would give the model for this question.", body = SearchView),
                  (status = 400, description = "invalid_request.", body = ErrorBody),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
                  (status = 404, description = "not_found.", body = ErrorBody)))]
    fn knowledge_search() {}

    #[utoipa::path(get, path = "/v1/operator/tokens", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        responses((status = 200, description = "Operator API tokens (never their secrets).", body = Items<TokenView>),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
                  (status = 403, description = "forbidden.", body = ErrorBody)))]
    fn tokens() {}

    #[utoipa::path(delete, path = "/v1/operator/tokens/{id}", tag = "operator",
        security(("operator_token" = []), ("operator_session" = [])),
        params(("id" = String, Path)),
        responses((status = 204, description = "Revoked."),
                  (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
                  (status = 403, description = "forbidden, csrf_invalid.", body = ErrorBody),
                  (status = 404, description = "not_found.", body = ErrorBody)))]
    fn token_revoke() {}
}

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
