//! The operations of the OpenAPI document. Each function below only carries its
//! operation's description for the document; the handlers are in the modules
//! the router mounts.
#![allow(dead_code)]

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
              (status = 202, description = "A person holds the conversation (SPEC §19): the message is stored, not answered by the assistant.", body = QueuedAck),
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
